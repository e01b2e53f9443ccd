//! `commtune simulate`: replays the traced keys (COMMTUNE_TRACE files) under a grid of settings
//! with `commtune_tune::simulate`, one line per configuration. No MPI: text in, text out.

use std::fmt::Write;

use commtune_tune::check::Verdict;
use commtune_tune::settings::TIMINGS;
use commtune_tune::simulate::{self, FILTERS, Model, Outcome, SEARCHES};
use commtune_tune::{Filter, Search, Settings};

/// The grid's values (empty: all the simulator's grid has), the run's length and replicas.
pub struct Options {
    pub searches: Vec<Search>,
    /// COMMTUNE_TIMING's values.
    pub timings: Vec<&'static str>,
    pub filters: Vec<Filter>,
    pub blocks: Vec<u32>,
    pub samples: Vec<u32>,
    pub calls: u64,
    pub replicas: u64,
}

/// Parses the comma lists of the command line.
pub fn options(
    searches: &[String],
    timings: &[String],
    filters: &[String],
    blocks: &[u32],
    samples: &[u32],
    calls: u64,
    replicas: u64,
) -> Result<Options, String> {
    fn pick<T: Copy>(
        names: &[String],
        all: &[T],
        name: fn(T) -> &'static str,
        knob: &str,
    ) -> Result<Vec<T>, String> {
        if names.is_empty() {
            return Ok(all.to_vec());
        }
        names
            .iter()
            .map(|n| {
                all.iter().copied().find(|v| name(*v) == n).ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|v| name(*v)).collect();
                    format!("--{knob}: unknown `{n}` (known: {})", known.join(", "))
                })
            })
            .collect()
    }
    let check = |values: &[u32], all: &[u32], knob: &str, max: u32| -> Result<Vec<u32>, String> {
        match values.iter().find(|v| **v == 0 || **v > max) {
            Some(v) => Err(format!("--{knob}: {v} is not in 1..={max}")),
            None if values.is_empty() => Ok(all.to_vec()),
            None => Ok(values.to_vec()),
        }
    };
    Ok(Options {
        searches: pick(searches, &SEARCHES, simulate::search_name, "search")?,
        timings: pick(timings, &TIMINGS, |name| name, "timing")?,
        filters: pick(filters, &FILTERS, simulate::filter_name, "filter")?,
        blocks: check(blocks, &simulate::BLOCKS, "block", 64)?,
        samples: check(samples, &simulate::SAMPLES, "samples", 1000)?,
        calls: calls.max(1),
        replicas: replicas.max(1),
    })
}

/// The report of every key in `files` (name, text) under every configuration of `options`.
pub fn text(files: Vec<(String, String)>, options: &Options) -> Result<String, String> {
    let traces = files
        .into_iter()
        .map(|(name, text)| {
            let trace = commtune_tune::trace::parse(&text).map_err(|e| format!("{name}: {e}"))?;
            Ok((name, trace))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let models = Model::build(&simulate::group_runs(traces))?;
    if models.is_empty() {
        return Err("no key with native's steady state in these traces".into());
    }
    let grid = simulate::grid(
        &options.searches,
        &options.timings,
        &options.filters,
        &options.blocks,
        &options.samples,
    );
    let mut out = String::new();
    let mut regrets: Vec<Vec<f64>> = vec![Vec::new(); grid.len()];
    for model in &models {
        describe(&mut out, model, options.calls);
        let _ = writeln!(
            out,
            "    {:<10} {:<7} {:<9} {:>5} {:>7}  {:<22} {:>8} {:>7} {:>12} {:>12}  check",
            "search",
            "timing",
            "filter",
            "block",
            "samples",
            "decision",
            "searched",
            "regret",
            "predicted_us",
            "realised_us"
        );
        for (at, settings) in grid.iter().enumerate() {
            let outcomes = simulate::replays(model, settings, options.calls, options.replicas);
            let regret = median(outcomes.iter().map(|o| o.regret).collect());
            regrets[at].push(regret);
            line(&mut out, model, settings, &outcomes, regret);
        }
        out.push('\n');
    }
    if models.len() > 1 {
        summary(&mut out, &grid, &regrets, models.len());
    }
    Ok(out)
}

fn describe(out: &mut String, m: &Model, calls: u64) {
    let (best, cost) = m.best();
    let _ = writeln!(
        out,
        "{} {} B, {} ranks (key {:016x}, {} run{}): oracle {} at {:.1} us per call, {calls} calls",
        m.op,
        m.bytes,
        m.ranks,
        m.key,
        m.runs,
        if m.runs == 1 { "" } else { "s" },
        m.name(best),
        cost * 1e-3
    );
    let _ = writeln!(
        out,
        "    {:<20} {:>10} {:>9} {:>9} {:>7} {:>9} {:>10}",
        "codelet", "steady_us", "switch_x", "second_x", "steady", "switches", "barriered"
    );
    let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}"));
    for c in &m.codelets {
        let _ = writeln!(
            out,
            "    {:<20} {:>10.1} {:>9} {:>9} {:>7} {:>9} {:>10}",
            c.name,
            c.cost() * 1e-3,
            ratio(c.after_switch(0)),
            ratio(c.after_switch(1)),
            c.steady.len(),
            c.switches.len(),
            c.barriered.len() + c.barriered_switches.len()
        );
    }
    let _ = writeln!(
        out,
        "    a reduction costs {:.1} us (slowest rank), a barrier {:.1} us; {:.1} % of instances \
         disturbed, {} stalls left out{}{}",
        m.consensus.iter().copied().max().unwrap_or(0) as f64 * 1e-3,
        m.barrier as f64 * 1e-3,
        m.disturbed * 100.0,
        m.stalls,
        if m.tailed.is_empty() {
            String::new()
        } else {
            format!("; tails of their own: {}", m.tailed.join(", "))
        },
        if m.missing.is_empty() {
            String::new()
        } else {
            format!(
                "; not modelled (no steady instance): {}",
                m.missing.join(", ")
            )
        }
    );
}

fn is_default(s: &Settings) -> bool {
    let d = Settings::default();
    (
        s.search,
        s.timing,
        simulate::filter_name(s.filter),
        s.block,
        s.samples,
    ) == (
        d.search,
        d.timing,
        simulate::filter_name(d.filter),
        d.block,
        d.samples,
    )
}

fn settings_columns(s: &Settings) -> String {
    format!(
        "{} {:<10} {:<7} {:<9} {:>5} {:>7}",
        if is_default(s) { '*' } else { ' ' },
        simulate::search_name(s.search),
        s.timing_name(),
        simulate::filter_name(s.filter),
        s.block,
        s.samples
    )
}

fn line(out: &mut String, m: &Model, s: &Settings, outcomes: &[Outcome], regret: f64) {
    let decision = most_common(outcomes.iter().map(|o| o.decision));
    let decided = outcomes.iter().filter(|o| o.decision == decision).count();
    let searched = median(outcomes.iter().map(|o| o.searched as f64).collect());
    let predicted: Vec<f64> = outcomes.iter().filter_map(|o| o.predicted_ns).collect();
    let predicted = if predicted.is_empty() {
        "-".to_string()
    } else {
        format!("{:.1}", median(predicted) * 1e-3)
    };
    let realised = median(outcomes.iter().map(|o| o.realised_ns).collect()) * 1e-3;
    let check = most_common(outcomes.iter().map(|o| o.check.map_or("-", Verdict::name)));
    let _ = writeln!(
        out,
        "  {}  {:<22} {:>8} {:>7.3} {:>12} {:>12.1}  {check}",
        settings_columns(s),
        format!("{} {decided}/{}", m.name(decision), outcomes.len()),
        searched,
        regret,
        predicted,
        realised
    );
}

/// Median regret over keys per configuration, then per value of each knob (over keys and the
/// other knobs' values).
fn summary(out: &mut String, grid: &[Settings], regrets: &[Vec<f64>], keys: usize) {
    let _ = writeln!(
        out,
        "median regret over {keys} keys (worst key in brackets), best first:"
    );
    let mut order: Vec<usize> = (0..grid.len()).collect();
    let medians: Vec<f64> = regrets.iter().map(|r| median(r.clone())).collect();
    order.sort_by(|a, b| medians[*a].total_cmp(&medians[*b]));
    for at in order {
        let worst = regrets[at].iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  {}  {:.3} ({worst:.3})",
            settings_columns(&grid[at]),
            medians[at]
        );
    }
    let _ = writeln!(
        out,
        "\nmedian regret by knob value (over keys and the other knobs):"
    );
    let by = |name: &str, value: &dyn Fn(&Settings) -> String, out: &mut String| {
        let mut values: Vec<String> = grid.iter().map(value).collect();
        values.dedup();
        values.sort();
        values.dedup();
        let cells: Vec<String> = values
            .iter()
            .map(|v| {
                let all: Vec<f64> = grid
                    .iter()
                    .zip(regrets)
                    .filter(|(s, _)| value(s) == *v)
                    .flat_map(|(_, r)| r.iter().copied())
                    .collect();
                format!("{v} {:.3}", median(all))
            })
            .collect();
        let _ = writeln!(out, "  {name:<8} {}", cells.join("   "));
    };
    by("search", &|s| simulate::search_name(s.search).into(), out);
    by("timing", &|s| s.timing_name().into(), out);
    by("filter", &|s| simulate::filter_name(s.filter).into(), out);
    by("block", &|s| s.block.to_string(), out);
    by("samples", &|s| s.samples.to_string(), out);
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

fn most_common<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> T {
    let items: Vec<T> = items.collect();
    let count = |x: &T| items.iter().filter(|y| *y == x).count();
    // Ties go to the first seen: the lowest seed's.
    let mut best = items[0];
    for x in &items {
        if count(x) > count(&best) {
            best = *x;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(prefix: &str) -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
            .map(|p| {
                (
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn one_line_per_configuration_and_the_default_marked() {
        let options = options(
            &[],
            &["barrier".into()],
            &["robust".into()],
            &[1, 2],
            &[4],
            500,
            2,
        )
        .unwrap();
        let out = text(data("shm-allreduce-64k"), &options).unwrap();
        assert!(out.starts_with("allreduce 65536 B, 2 ranks"), "{out}");
        let lines: Vec<&str> = out.lines().filter(|l| l.contains(" robust ")).collect();
        assert_eq!(lines.len(), 6, "3 policies x 2 blocks: {out}");
        let marked: Vec<&&str> = lines.iter().filter(|l| l.starts_with("  *")).collect();
        assert_eq!(marked.len(), 1, "{out}");
        assert!(marked[0].contains("attributes barrier robust        1       4"));
        assert_eq!(out, text(data("shm-allreduce-64k"), &options).unwrap());
    }

    #[test]
    fn bad_options_and_traces_are_named() {
        let bad = options(&["greedy".into()], &[], &[], &[], &[], 10, 1);
        assert!(bad.err().unwrap().contains("--search: unknown `greedy`"));
        assert!(options(&[], &[], &[], &[0], &[], 10, 1).is_err());
        let all = options(&[], &[], &[], &[], &[], 10, 1).unwrap();
        let err = text(vec![("x.0.tsv".into(), "nonsense".into())], &all).unwrap_err();
        assert!(err.starts_with("x.0.tsv: not a commtune trace"), "{err}");
    }
}
