//! `commtune map`: per operation the decision map the history store gives, and how well the
//! history predicts problems it has not seen (leave-one-out): the benchmark of the prediction.
//! Entries of different MPI libraries, platforms or timings never mix (as in the library, which
//! predicts only from `predict::compatible` entries): each triple gets its own section, and
//! entries of unknown timing (format version 1) one of their own.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use commtune_history::map::{self, Map};
use commtune_history::predict::{self, Evaluation, Knowledge, Measured, Predictor};
use commtune_history::{Entry, Loaded, UNKNOWN_TIMING};
use commtune_tune::classes::human;

pub struct Options {
    /// Only this operation.
    pub op: Option<String>,
    /// The prediction windows to evaluate, as fractions (0.1: 10 %).
    pub pmax: Vec<f64>,
    /// The decision map's tolerance (a fraction).
    pub tolerance: f64,
}

/// A later store whose problems the store predicts, instead of leave-one-out.
pub struct Later<'a> {
    pub dir: &'a Path,
    pub loaded: &'a Loaded,
}

/// What entries of one section share: MPI library, platform (as the heading shows it), timing.
type Section<'a> = (&'a str, String, &'a str);

/// The decisions of each MPI library, platform and timing (ping-pong samples are no decision:
/// with no timing of their own they would make a section of unknown timing and no problems).
fn sections<'a>(loaded: &'a Loaded, op: Option<&str>) -> BTreeMap<Section<'a>, Vec<Entry>> {
    let mut sections: BTreeMap<Section, Vec<Entry>> = BTreeMap::new();
    for entry in &loaded.entries {
        if !entry.is_decision() || op.is_some_and(|op| op != entry.op) {
            continue;
        }
        sections
            .entry((
                entry.mpi.as_str(),
                entry.platform.to_string(),
                entry.timing_name(),
            ))
            .or_default()
            .push(entry.clone());
    }
    sections
}

/// The whole output: a heading line, then one section per MPI library, platform and timing.
pub fn text(dir: &Path, loaded: &Loaded, later: Option<Later>, options: &Options) -> String {
    let mut out = format!(
        "history {}: {} entries in {} files\n",
        dir.display(),
        loaded.entries.len(),
        loaded.files
    );
    let sections = sections(loaded, options.op.as_deref());
    let mut later_sections = BTreeMap::new();
    if let Some(later) = &later {
        later_sections = self::sections(later.loaded, options.op.as_deref());
        let _ = writeln!(
            out,
            "predicting the problems of the later store {}: {} entries in {} files",
            later.dir.display(),
            later.loaded.entries.len(),
            later.loaded.files
        );
    }
    if sections.is_empty() {
        out.push_str("nothing to map\n");
    }
    for ((mpi, platform, timing), entries) in sections {
        let measured = predict::merge(&entries);
        let trial = match later {
            None => Trial::LeaveOneOut,
            Some(_) => {
                let key = (mpi, platform.clone(), timing);
                let problems = later_sections
                    .get(&key)
                    .map_or_else(Vec::new, |e| predict::merge(e));
                let knowledge = options
                    .pmax
                    .iter()
                    .map(|&p| Knowledge::new(&entries, p))
                    .collect();
                Trial::Later {
                    problems,
                    knowledge,
                }
            }
        };
        // The version string's first part names the library and its version.
        let library = mpi.split(',').next().unwrap_or(mpi);
        let unrecorded = if timing == UNKNOWN_TIMING {
            " (format 1 did not record it)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "\n## {library} on {platform}, timing {timing}{unrecorded}: {} entries, {} problems",
            entries.len(),
            measured.len()
        );
        section(&mut out, &measured, &trial, options);
    }
    out
}

/// How the prediction is evaluated.
enum Trial {
    /// Each problem of the store predicted from the others.
    LeaveOneOut,
    /// The problems of a later store (of the same library, platform and timing), predicted from the
    /// store's knowledge at each pmax.
    Later {
        problems: Vec<Measured>,
        knowledge: Vec<Knowledge>,
    },
}

impl Trial {
    fn title(&self) -> &'static str {
        match self {
            Trial::LeaveOneOut => "prediction, leave-one-out:",
            Trial::Later { .. } => "prediction of the later store's problems:",
        }
    }

    /// The prediction rates of each predictor (rows) at each pmax (columns) for the problems of
    /// `op` (None: all operations).
    fn rates(&self, measured: &[Measured], op: Option<&str>, pmax: &[f64]) -> String {
        let of_op = |problems: &[Measured]| -> Vec<Measured> {
            problems
                .iter()
                .filter(|m| op.is_none_or(|op| m.op == op))
                .cloned()
                .collect()
        };
        match self {
            Trial::LeaveOneOut => {
                let problems = of_op(measured);
                rates(pmax, |i, predictor| {
                    predict::leave_one_out(&problems, pmax[i], predictor)
                })
            }
            Trial::Later {
                problems,
                knowledge,
            } => {
                let problems = of_op(problems);
                rates(pmax, |i, predictor| {
                    predict::against(&knowledge[i], &problems, pmax[i], predictor)
                })
            }
        }
    }
}

fn section(out: &mut String, measured: &[Measured], trial: &Trial, options: &Options) {
    let map = Map::new(measured, options.tolerance);
    let mut by_op: BTreeMap<&str, Vec<&Measured>> = BTreeMap::new();
    for m in measured {
        by_op.entry(m.op.as_str()).or_default().push(m);
    }
    let mut all = map::Penalty::default();
    for (op, problems) in &by_op {
        let mut comm_sizes: Vec<u32> = problems.iter().map(|m| m.comm_size).collect();
        comm_sizes.dedup();
        let sizes = comm_sizes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "\n### {op}: {} problems, communicator sizes {sizes}",
            problems.len()
        );
        let depth = map.depth(op).expect("an operation with problems has a map");
        let penalty = map::leave_one_out(problems, options.tolerance);
        all.mean += penalty.mean * penalty.decided as f64;
        all.decided += penalty.decided;
        all.worst = all.worst.max(penalty.worst);
        let _ = writeln!(
            out,
            "decision map (quadtree, tolerance {}): depth max {}, mean {:.2} over {} leaves; \
             leave-one-out penalty mean {}, median {}, worst {} over {} problems",
            percent(options.tolerance),
            depth.max,
            depth.mean,
            depth.leaves,
            percent(penalty.mean),
            percent(penalty.median),
            percent(penalty.worst),
            penalty.decided
        );
        let mut rows = vec![["ranks".to_string(), "bytes".into(), "codelet".into()]];
        for &comm_size in &comm_sizes {
            for (i, (from, to, codelet)) in map.ranges(op, comm_size).into_iter().enumerate() {
                let ranks = if i == 0 {
                    comm_size.to_string()
                } else {
                    String::new()
                };
                rows.push([ranks, format!("{} - {}", human(from), human(to)), codelet]);
            }
        }
        out.push_str(&table(&rows));
        let _ = writeln!(out, "{}", trial.title());
        out.push_str(&trial.rates(measured, Some(op), &options.pmax));
    }
    if by_op.len() > 1 {
        let _ = writeln!(
            out,
            "\n### all operations\ndecision maps: leave-one-out penalty mean {}, worst {} over {} \
             problems\n{}",
            percent(all.mean / all.decided.max(1) as f64),
            percent(all.worst),
            all.decided,
            trial.title()
        );
        out.push_str(&trial.rates(measured, None, &options.pmax));
    }
}

/// The prediction rates of each predictor (rows) at each pmax (columns), as a table;
/// `evaluate` takes the index of a pmax.
fn rates(pmax: &[f64], evaluate: impl Fn(usize, Predictor) -> Evaluation) -> String {
    let mut heading = vec!["predictor".to_string()];
    heading.extend(pmax.iter().map(|&p| format!("pmax {}", percent(p))));
    let mut rows = vec![heading];
    for predictor in [
        Predictor::Closest,
        Predictor::Vote,
        Predictor::Fit,
        Predictor::Map,
    ] {
        let default = if predictor == predict::DEFAULT_PREDICTOR {
            "*"
        } else {
            ""
        };
        let mut row = vec![format!("{}{default}", predictor.name())];
        for i in 0..pmax.len() {
            let e = evaluate(i, predictor);
            let share = |n: usize| format!("{:.1}", 100.0 * n as f64 / e.problems.max(1) as f64);
            row.push(format!(
                "{} / {} / {} / {}",
                share(e.within),
                share(e.predicted),
                share(e.covered),
                share(e.time_within)
            ));
        }
        rows.push(row);
    }
    let mut text = table(&rows);
    text.push_str(
        "(% of the problems: winner within pmax of the best / predicted at all / by the history \
         (the rest by the map) / predicted time within pmax of the measured; * the library's \
         predictor)\n",
    );
    text
}

fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

/// Left-aligned columns, two spaces apart.
fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// Parses `--pmax`: percentages or fractions, comma-separated (`5,10,20` or `0.05,0.1,0.2`).
pub fn fractions(list: &str) -> Result<Vec<f64>, String> {
    list.split(',')
        .map(|item| {
            let item = item.trim().trim_end_matches('%');
            let value: f64 = item
                .parse()
                .map_err(|_| format!("not a number: {item:?}"))?;
            let fraction = if value >= 1.0 { value / 100.0 } else { value };
            if fraction > 0.0 && fraction < 1.0 {
                Ok(fraction)
            } else {
                Err(format!("{item}: a window between 0 and 100 %"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::tests::{OMPI, entry};

    #[test]
    fn each_timing_gets_its_own_section() {
        // The same problems timed two ways, with opposite winners, and one of unknown timing.
        let mut entries = Vec::new();
        for k in 3..=12 {
            let bytes = 1u64 << k;
            let local = entry(
                OMPI,
                "allreduce",
                4,
                bytes,
                &[("ring", 1.0), ("linear", 2.0)],
            );
            let barrier = Entry {
                timing: Some("barrier".into()),
                ..entry(
                    OMPI,
                    "allreduce",
                    4,
                    bytes,
                    &[("ring", 2.0), ("linear", 1.0)],
                )
            };
            entries.extend([local, barrier]);
        }
        entries.push(Entry {
            timing: None,
            ..entry(OMPI, "allreduce", 4, 8, &[("ring", 1.0), ("bruck", 0.5)])
        });
        entries.push(Entry {
            op: commtune_history::PING_PONG.into(),
            timing: None,
            ..entry(OMPI, "allreduce", 4, 8, &[("native", 1.0)])
        });
        let loaded = Loaded {
            entries,
            files: 1,
            ..Loaded::default()
        };
        let options = Options {
            op: None,
            pmax: vec![0.1],
            tolerance: 0.1,
        };
        let text = text(Path::new("/h"), &loaded, None, &options);
        let headings: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
        let platform = "node# (cpu, transport shared memory)";
        assert_eq!(
            headings,
            [
                format!("## {OMPI} on {platform}, timing barrier: 10 entries, 10 problems"),
                format!("## {OMPI} on {platform}, timing local: 10 entries, 10 problems"),
                format!(
                    "## {OMPI} on {platform}, timing unknown (format 1 did not record it): \
                     1 entries, 1 problems"
                ),
            ],
            "{text}"
        );
        // Each section's map holds its own timing's winner only.
        let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
        let winners = |section: &str| -> Vec<String> {
            section
                .lines()
                .filter(|l| l.contains(" - "))
                .filter_map(|l| l.split_whitespace().last().map(str::to_string))
                .collect()
        };
        assert_eq!(winners(sections[0]), ["linear"], "{text}");
        assert_eq!(winners(sections[1]), ["ring"], "{text}");
        assert_eq!(winners(sections[2]), ["bruck"], "{text}");
    }

    #[test]
    fn windows_read_as_percent_or_fraction() {
        assert_eq!(fractions("5,10,20").unwrap(), [0.05, 0.1, 0.2]);
        assert_eq!(fractions("0.05, 10%").unwrap(), [0.05, 0.1]);
        assert!(fractions("0").is_err());
        assert!(fractions("ten").is_err());
    }
}
