//! What a calibration measures and what it found, without MPI: the operations and sizes asked
//! for, the sizes each launcher run samples (log-spaced, then refined where the winner changes),
//! the cost model behind the ETA and the time budget, and the decision table printed at the end.

use std::collections::{BTreeMap, BTreeSet};

use commtune_history::Entry;
use commtune_tune::Timing;
use commtune_tune::classes::class_name;

pub use commtune_history::OPERATIONS as OPS;

/// Refinement stops where two neighbouring sizes are closer than this factor: below the size
/// classes' 1.5 (the library tunes per class) a finer winner boundary is noise.
pub const RESOLUTION: f64 = 1.25;

/// The operations of `--ops`, checked, in the order given, each once.
pub fn ops(list: &[String]) -> Result<Vec<&'static str>, String> {
    let mut chosen = Vec::new();
    for name in list {
        let op = OPS.iter().find(|op| **op == name.trim()).ok_or_else(|| {
            format!(
                "--ops: unknown operation `{name}` (calibrate knows {})",
                OPS.join(", ")
            )
        })?;
        if !chosen.contains(op) {
            chosen.push(*op);
        }
    }
    if chosen.is_empty() {
        return Err("--ops: no operation given".to_string());
    }
    Ok(chosen)
}

/// One size: a number with an optional binary unit, `8`, `64K`, `4M`, `1G` (K = 1024 bytes).
fn size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit
        .trim()
        .trim_end_matches(['B', 'b'])
        .trim_end_matches('i')
    {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `--sizes LOW..HIGH`: bytes per call, 1 <= LOW <= HIGH <= 1 GiB.
pub fn size_range(text: &str) -> Result<(u64, u64), String> {
    let bad = |why: &str| format!("--sizes {text}: {why} (e.g. --sizes 8..4M)");
    let (low, high) = text
        .split_once("..")
        .ok_or_else(|| bad("expected LOW..HIGH"))?;
    let (low, high) = match (size(low), size(high)) {
        (Some(l), Some(h)) => (l, h),
        _ => return Err(bad("sizes are numbers with an optional K, M or G")),
    };
    if low == 0 || low > high {
        return Err(bad("LOW must be at least 1 and at most HIGH"));
    }
    if high > 1 << 30 {
        return Err(bad("HIGH is at most 1G"));
    }
    Ok((low, high))
}

/// The bytes per call the program can run for `op` near `bytes` on `ranks` ranks: an
/// allreduce's vector is doubles, an alltoall's or allgatherv's total is one block per rank.
/// Never less than one double or one byte per rank.
pub fn realizable(op: &str, bytes: u64, ranks: u32) -> u64 {
    let unit = if op == "allreduce" {
        8
    } else {
        u64::from(ranks.max(1))
    };
    ((bytes + unit / 2) / unit * unit).max(unit)
}

/// `points` sizes log-spaced over [low, high], each made realizable, each once, ascending.
pub fn log_spaced(op: &str, (low, high): (u64, u64), points: u32, ranks: u32) -> Vec<u64> {
    let n = points.max(1);
    let ratio = high as f64 / low as f64;
    let mut sizes: Vec<u64> = (0..n)
        .map(|i| {
            let t = if n == 1 {
                0.0
            } else {
                f64::from(i) / f64::from(n - 1)
            };
            let bytes = (low as f64 * ratio.powf(t)).round() as u64;
            realizable(op, bytes, ranks)
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Refinement looks only where a neighbour's winner would cost more than this share over the
/// winner: elsewhere the codelets are within noise of each other and either choice will do.
pub const SIGNIFICANT: f64 = 0.05;

/// How much slower than `entry`'s winner `codelet` measured there (None: not measured).
fn penalty(entry: &Entry, codelet: &str) -> Option<f64> {
    let us = |name: &str| Some(entry.estimates.iter().find(|e| e.codelet == name)?.us);
    let (best, other) = (us(&entry.winner)?, us(codelet)?);
    (best > 0.0).then(|| other / best - 1.0)
}

/// Where the winners of neighbouring sizes (`entries`: size → entry of one operation) differ
/// and swapping them costs more than `SIGNIFICANT` at either size, the geometric midpoint of
/// the two, made realizable, unless the two are within `RESOLUTION` of each other or the
/// midpoint is one of them.
pub fn midpoints(op: &str, entries: &BTreeMap<u64, &Entry>, ranks: u32) -> Vec<u64> {
    let sizes: Vec<(&u64, &&Entry)> = entries.iter().collect();
    sizes
        .windows(2)
        .filter_map(|pair| {
            let ((&a, low), (&b, high)) = (pair[0], pair[1]);
            let matters = |at: &Entry, other: &Entry| {
                penalty(at, &other.winner).is_none_or(|p| p > SIGNIFICANT)
            };
            let changes = low.winner != high.winner && (matters(low, high) || matters(high, low));
            if !changes || (b as f64) < a as f64 * RESOLUTION {
                return None;
            }
            let middle = realizable(op, ((a as f64) * (b as f64)).sqrt().round() as u64, ranks);
            (middle > a && middle < b).then_some(middle)
        })
        .collect()
}

/// Ping-pong samples (bytes, one-way µs) interpolated in log-log space, clamped at the ends:
/// the shape of a point's cost over sizes, which the cost model scales.
pub fn interpolate(samples: &[(u64, f64)], bytes: u64) -> Option<f64> {
    let (first, last) = (samples.first()?, samples.last()?);
    if bytes <= first.0 {
        return Some(first.1);
    }
    if bytes >= last.0 {
        return Some(last.1 * bytes as f64 / last.0 as f64);
    }
    let i = samples.iter().position(|s| s.0 >= bytes)?;
    let ((x0, y0), (x1, y1)) = (samples[i - 1], samples[i]);
    let t = ((bytes as f64).ln() - (x0 as f64).ln()) / ((x1 as f64).ln() - (x0 as f64).ln());
    Some((y0.ln() + t * (y1.ln() - y0.ln())).exp())
}

/// How long points take: the ping-pong's shape times a factor learnt from the points done.
#[derive(Debug)]
pub struct Cost {
    shape: Vec<(u64, f64)>,
    /// Seconds measured and shape units of the points done.
    seconds: f64,
    units: f64,
    /// Seconds a launcher run costs besides its points (starting and ending the job).
    pub launch: f64,
}

impl Cost {
    /// `pingpong`: (bytes, one-way µs), ascending; `launch`: a run's fixed cost in seconds.
    pub fn new(pingpong: Vec<(u64, f64)>, launch: f64) -> Cost {
        Cost {
            shape: pingpong,
            seconds: 0.0,
            units: 0.0,
            launch,
        }
    }

    fn units(&self, bytes: u64) -> f64 {
        // Without samples, a cost growing with the bytes as on a 1 GB/s link with 1 µs latency.
        interpolate(&self.shape, bytes).unwrap_or(1.0 + bytes as f64 / 1000.0)
    }

    /// A point of `bytes` took `seconds`.
    pub fn learn(&mut self, bytes: u64, seconds: f64) {
        self.seconds += seconds;
        self.units += self.units(bytes);
    }

    /// The expected seconds of a point of `bytes` (a guess of 0.05 s per unit of a 1 µs
    /// message until a point has been measured).
    pub fn point(&self, bytes: u64) -> f64 {
        let per_unit = if self.units > 0.0 {
            self.seconds / self.units
        } else {
            0.05
        };
        per_unit * self.units(bytes)
    }
}

/// The calibration entries that count for a calibration here with `timing` (`like`: an entry
/// measured here: same MPI, platform, communicator size and ranks per node): its ping-pong
/// samples (timed by the program, whatever the library's timing) and its decisions timed
/// `timing`. A decision timed otherwise (an earlier calibration with another COMMTUNE_TIMING,
/// or a search the self-check reopened with the other timing) is no point done: a tuned run
/// predicts only from entries of its own timing.
pub fn comparable<'a>(entries: &'a [Entry], like: &Entry, timing: Timing) -> Vec<&'a Entry> {
    entries
        .iter()
        .filter(|e| {
            e.how == commtune_history::How::Calibrate
                && e.mpi == like.mpi
                && e.platform == like.platform
                && e.comm_size == like.comm_size
                && e.ranks_per_node == like.ranks_per_node
                && (!e.is_decision() || e.timing.as_deref() == Some(timing.name()))
        })
        .collect()
}

/// The (operation, bytes) points `entries` measured.
pub fn points(entries: &[&Entry]) -> BTreeSet<(String, u64)> {
    entries.iter().map(|e| (e.op.clone(), e.bytes)).collect()
}

/// Each size's latest entry of `op` among `entries`.
pub fn latest<'a>(entries: &[&'a Entry], op: &str) -> BTreeMap<u64, &'a Entry> {
    let mut by_size: BTreeMap<u64, &Entry> = BTreeMap::new();
    for entry in entries.iter().filter(|e| e.op == op) {
        let newer = by_size
            .get(&entry.bytes)
            .is_none_or(|e| e.time <= entry.time);
        if newer {
            by_size.insert(entry.bytes, entry);
        }
    }
    by_size
}

/// The decision of one operation over its sizes: one line of ranges, then a table of each
/// size's winner, its time and its margin over native.
pub fn decision_table(op: &str, entries: &BTreeMap<u64, &Entry>) -> String {
    let mut out = format!("{op}: {} sizes\n", entries.len());
    if entries.is_empty() {
        return out;
    }
    let mut ranges: Vec<(u64, u64, &str)> = Vec::new();
    for (bytes, entry) in entries {
        match ranges.last_mut() {
            Some(last) if last.2 == entry.winner => last.1 = *bytes,
            _ => ranges.push((*bytes, *bytes, &entry.winner)),
        }
    }
    let ranges: Vec<String> = ranges
        .iter()
        .map(|(low, high, winner)| {
            if low == high {
                format!("{winner} at {low} B")
            } else {
                format!("{winner} from {low} to {high} B")
            }
        })
        .collect();
    out.push_str(&format!("  decision: {}\n", ranges.join(", ")));
    out.push_str(&format!(
        "  {:>10}  {:<15}  {:<20}  {:>12}  {:>12}  {:>7}\n",
        "bytes", "size class", "winner", "winner us", "native us", "margin"
    ));
    for (bytes, entry) in entries {
        let time = |codelet: &str| {
            entry
                .estimates
                .iter()
                .find(|e| e.codelet == codelet)
                .map(|e| e.us)
        };
        let (winner, native) = (time(&entry.winner), time("native"));
        let shown = |us: Option<f64>| us.map_or_else(|| "-".to_string(), |us| format!("{us:.1}"));
        let margin = match (winner, native) {
            (Some(w), Some(n)) if n > 0.0 => format!("{:.1}%", (n - w) / n * 100.0),
            _ => "-".to_string(),
        };
        out.push_str(&format!(
            "  {bytes:>10}  {:<15}  {:<20}  {:>12}  {:>12}  {margin:>7}\n",
            class_name(*bytes),
            entry.winner,
            shown(winner),
            shown(native)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use commtune_history::{Estimate, How, Platform};

    #[test]
    fn operations_are_checked() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ops(&list(&["alltoall", "allreduce", "alltoall"])).unwrap(),
            ["alltoall", "allreduce"]
        );
        let error = ops(&list(&["allreduce", "bcast"])).unwrap_err();
        assert!(error.contains("unknown operation `bcast`"), "{error}");
        assert!(ops(&[]).is_err());
    }

    #[test]
    fn size_ranges() {
        assert_eq!(size_range("8..4M"), Ok((8, 4 << 20)));
        assert_eq!(size_range("1K..64KiB"), Ok((1024, 65536)));
        assert_eq!(size_range("16..16"), Ok((16, 16)));
        for bad in ["8-4M", "0..8", "4M..8", "8..4X", "x..8", "8..2G"] {
            assert!(size_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_are_log_spaced_and_realizable() {
        let sizes = log_spaced("allreduce", (8, 4 << 20), 20, 2);
        assert_eq!(sizes.len(), 20);
        assert_eq!((sizes[0], sizes[19]), (8, 4 << 20));
        assert!(sizes.iter().all(|s| s % 8 == 0));
        for pair in sizes.windows(2) {
            let ratio = pair[1] as f64 / pair[0] as f64;
            assert!((1.5..2.6).contains(&ratio), "{pair:?}");
        }
        // Three ranks: totals are whole blocks, and tiny sizes merge.
        let sizes = log_spaced("alltoall", (1, 12), 6, 3);
        assert_eq!(sizes, [3, 6, 12]);
        assert_eq!(log_spaced("allgatherv", (1000, 1000), 1, 4), [1000]);
    }

    #[test]
    fn midpoints_where_winners_change_and_it_matters() {
        let entries = [
            entry("allreduce", 8, "native", 1.0, 2.0, 1),
            entry("allreduce", 64, "native", 2.0, 3.0, 1),
            entry("allreduce", 512, "ring", 20.0, 10.0, 1),
            entry("allreduce", 600, "native", 10.0, 10.3, 1),
            entry("allreduce", 4096, "ring", 10.0, 9.8, 1),
            entry("allreduce", 65536, "native", 100.0, 101.0, 1),
        ];
        let by_size = entries.iter().map(|e| (e.bytes, e)).collect();
        // 64..512: midpoint 181 → 184 (doubles); 512..600 is within the resolution; from 600
        // on native and ring are within 2 % of each other.
        assert_eq!(midpoints("allreduce", &by_size, 2), [184]);
    }

    #[test]
    fn interpolation_is_log_log() {
        let samples = [(8, 1.0), (8192, 100.0)];
        assert_eq!(interpolate(&samples, 4), Some(1.0));
        let middle = interpolate(&samples, 256).unwrap();
        assert!((middle - 10.0).abs() < 1e-9, "{middle}");
        assert_eq!(interpolate(&samples, 16384), Some(200.0));
        assert_eq!(interpolate(&[], 16), None);
    }

    #[test]
    fn cost_learns_a_factor() {
        let mut cost = Cost::new(vec![(8, 1.0), (8192, 100.0)], 0.5);
        cost.learn(8, 0.2);
        assert!((cost.point(8192) - 20.0).abs() < 1e-9);
    }

    fn entry(op: &str, bytes: u64, winner: &str, native: f64, best: f64, time: u64) -> Entry {
        Entry {
            op: op.into(),
            comm_size: 2,
            ranks_per_node: Some(2),
            size_class: class_name(bytes),
            bytes,
            signature: String::new(),
            facts: "size=2".into(),
            mpi: "Open MPI".into(),
            platform: Platform {
                host: "vm".into(),
                cpu: "cpu".into(),
                transport: "shared memory".into(),
            },
            estimates: vec![
                Estimate {
                    codelet: "native".into(),
                    us: native,
                    error_us: 0.1,
                },
                Estimate {
                    codelet: "ring".into(),
                    us: best,
                    error_us: 0.1,
                },
            ],
            timing: Some("local".into()),
            reopened_from: None,
            realised_us: None,
            winner: winner.into(),
            replaced: None,
            time,
            how: How::Calibrate,
        }
    }

    #[test]
    fn table_has_ranges_and_margins() {
        let entries = [
            entry("allreduce", 8, "native", 1.0, 2.0, 1),
            entry("allreduce", 64, "native", 2.0, 3.0, 1),
            entry("allreduce", 4096, "native", 50.0, 50.0, 1),
            entry("allreduce", 4096, "ring", 50.0, 40.0, 2),
            entry("alltoall", 64, "native", 2.0, 3.0, 1),
        ];
        let mut other = entry("allreduce", 16, "ring", 9.0, 1.0, 3);
        other.platform.transport = "unknown".into();
        let all: Vec<Entry> = entries.iter().cloned().chain([other]).collect();
        let mine = comparable(&all, &entries[0], Timing::Local);
        assert_eq!(mine.len(), 5);
        let table = decision_table("allreduce", &latest(&mine, "allreduce"));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "allreduce: 3 sizes");
        assert_eq!(
            lines[1],
            "  decision: native from 8 to 64 B, ring at 4096 B"
        );
        assert!(lines[4].contains("64 B-96 B"), "{table}");
        assert!(
            lines[5].contains("ring") && lines[5].ends_with("20.0%"),
            "{table}"
        );
    }

    #[test]
    fn points_of_another_timing_are_not_done() {
        let local = entry("allreduce", 8, "native", 1.0, 2.0, 1);
        let barrier = Entry {
            timing: Some("barrier".into()),
            ..entry("allreduce", 64, "ring", 3.0, 2.0, 1)
        };
        // A store written before timings were recorded (format 1).
        let unknown = Entry {
            timing: None,
            ..entry("allreduce", 512, "ring", 3.0, 2.0, 1)
        };
        let pingpong = Entry {
            op: commtune_history::PING_PONG.into(),
            timing: None,
            ..entry("allreduce", 8, "native", 1.0, 1.0, 1)
        };
        let all = [local.clone(), barrier, unknown, pingpong];
        let done = |timing| points(&comparable(&all, &local, timing));
        let point = |op: &str, bytes| (op.to_string(), bytes);
        assert_eq!(
            done(Timing::Local),
            BTreeSet::from([point("allreduce", 8), point("p2p", 8)])
        );
        assert_eq!(
            done(Timing::Barrier),
            BTreeSet::from([point("allreduce", 64), point("p2p", 8)])
        );
        // Its decision table shows only the points of its timing.
        let mine = comparable(&all, &local, Timing::Barrier);
        let table = decision_table("allreduce", &latest(&mine, "allreduce"));
        assert!(
            table.starts_with("allreduce: 1 sizes\n  decision: ring at 64 B\n"),
            "{table}"
        );
    }
}
