//! COMMTUNE_* knobs: parsed once when the library loads. A bad name or value yields one message
//! naming the knob and what it accepts, and the default is used; nothing here can fail.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use commtune_report::Op;
use commtune_tune::settings::SAMPLES;
use commtune_tune::{Filter, Search, Settings};

/// The codelet names of each operation, in registry order (the library's registries: this module
/// only validates against them).
pub type Names = fn(Op) -> Vec<&'static str>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Every call is a plain pass-through to PMPI.
    Off,
    /// Calls run natively (or as COMMTUNE_FORCE says) and are measured for the report.
    Profile,
    /// Profile, and tune every repeating collective key.
    Tune,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReportTarget {
    /// `commtune-<job id or pid>.json` in the working directory.
    Default,
    Path(PathBuf),
    Disabled,
}

/// Where rank 0 keeps what searches decided (COMMTUNE_HISTORY, `commtune_history`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum HistoryTarget {
    /// `$XDG_STATE_HOME/commtune/history`, else `~/.local/state/commtune/history`.
    Default,
    Path(PathBuf),
    Off,
}

/// A test-only delay added inside a codelet so that tests know which codelet is fastest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Delay {
    pub op: Op,
    pub codelet: usize,
    pub duration: Duration,
    /// The delay applies from this instance of each key on (0: always), before instance `until`
    /// (u64::MAX: for ever), to one instance in `every` (1: each).
    pub after: u64,
    pub until: u64,
    pub every: u64,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    pub report: ReportTarget,
    pub verbose: u8,
    /// Forced codelet per operation (indexed by `Op as usize`; the codelet's index in the
    /// operation's registry), COMMTUNE_FORCE.
    pub force: [Option<usize>; 4],
    /// Codelets the tuner never tries, COMMTUNE_EXCLUDE.
    pub exclude: Vec<(Op, usize)>,
    pub tuning: Settings,
    /// The settings of halo searches: `tuning` with COMMTUNE_HALO_BLOCK, COMMTUNE_HALO_SAMPLES
    /// and the halo's timing (`Settings::for_halo`).
    pub halo_tuning: Settings,
    pub delays: Vec<Delay>,
    /// Whether tuning may try the halo codelet `neighbor`, COMMTUNE_HALO_NEIGHBOR.
    pub halo_neighbor: bool,
    /// Where each rank writes the instances of its tuned keys (`PREFIX.RANK.tsv`),
    /// COMMTUNE_TRACE.
    pub trace: Option<PathBuf>,
    /// The history store, COMMTUNE_HISTORY.
    pub history: HistoryTarget,
    /// Whether the job is a calibration (`commtune calibrate`): its history entries say so,
    /// COMMTUNE_CALIBRATE.
    pub calibrate: bool,
    /// How far a predicted winner's measured time may exceed its predicted time before the
    /// prediction is dismissed, as a fraction, COMMTUNE_PMAX.
    pub pmax: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Tune,
            report: ReportTarget::Default,
            verbose: 0,
            force: [None; 4],
            exclude: Vec::new(),
            tuning: Settings::default(),
            halo_tuning: Settings::default().for_halo(HALO_BLOCK, HALO_SAMPLES),
            delays: Vec::new(),
            halo_neighbor: false,
            trace: None,
            history: HistoryTarget::Default,
            calibrate: false,
            pmax: 0.1,
        }
    }
}

impl Config {
    /// The codelet COMMTUNE_FORCE names for `op`, as an index in its registry.
    pub fn forced(&self, op: Op) -> Option<usize> {
        self.force[op as usize]
    }

    pub fn excluded(&self, op: Op, codelet: usize) -> bool {
        self.exclude.contains(&(op, codelet))
    }

    /// The injected delay of `codelet` of `op` at instance `instance` of a key.
    pub fn delay(&self, op: Op, codelet: usize, instance: u64) -> Option<Duration> {
        self.delays
            .iter()
            .find(|d| {
                d.op == op
                    && d.codelet == codelet
                    && (d.after..d.until).contains(&instance)
                    && (instance - d.after).is_multiple_of(d.every)
            })
            .map(|d| d.duration)
    }
}

/// Episodes per sample of a halo search. Blocks of 8 gave every rank of the 1 Gbit/s rig the
/// same ranking of the codelets where blocks of 4 did not, until the codelets that burst shared
/// their tails (`Sampler::estimates_sharing_tails`): since, blocks of 4 rank alike, and their
/// shorter first round lets do no harm start the search at exchange 41 instead of 81. On the
/// rig (64 KiB faces, 4 hosts, medians of alternating runs), 400 exchanges took 1.13 times forced
/// `pairwise` with blocks of 4, 1.22 with blocks of 8, and 1.29 with blocks of 8 before the
/// tails were shared (12 runs each); 2000 exchanges 1.02, 1.03 and 1.11 (4 runs each). On
/// shared memory (2 ranks, 5 and 4 runs), blocks of 4 with shared tails took 1.03 times native
/// (Open MPI) and 1.94 times forced `pack` (MPICH), blocks of 8 before 1.08 and 2.86.
const HALO_BLOCK: u32 = 4;
/// Samples per codelet of a halo search: its blocks are long, and 2 already decided alike on
/// every rank.
const HALO_SAMPLES: u32 = 2;

/// One knob as users see it (LD_PRELOAD.md documents the same table; a unit test checks).
pub struct Knob {
    pub name: &'static str,
    pub default: &'static str,
    pub accepted: &'static str,
}

const fn knob(name: &'static str, default: &'static str, accepted: &'static str) -> Knob {
    Knob {
        name,
        default,
        accepted,
    }
}

pub const KNOBS: &[Knob] = &[
    knob("COMMTUNE_MODE", "tune", "off, profile, tune"),
    knob(
        "COMMTUNE_REPORT",
        "commtune-<jobid or pid>.json",
        "a file path, or none",
    ),
    knob("COMMTUNE_VERBOSE", "0", "0, 1, 2"),
    knob(
        "COMMTUNE_FORCE",
        "(none)",
        "op=codelet,... with op allreduce, alltoall or allgatherv (see `commtune codelets`)",
    ),
    knob(
        "COMMTUNE_EXCLUDE",
        "(none)",
        "op=codelet,... (native cannot be excluded)",
    ),
    knob("COMMTUNE_HALO_NEIGHBOR", "off", "off, on"),
    knob("COMMTUNE_SEARCH", "attributes", "brute, attributes, racing"),
    knob("COMMTUNE_FILTER", "robust", "minfactor, iqr, robust"),
    knob("COMMTUNE_TIMING", "auto", "auto, local, barrier, period"),
    knob("COMMTUNE_SAMPLES", "4", "an integer from 1 to 1000"),
    knob("COMMTUNE_BLOCK", "1", "an integer from 1 to 64"),
    knob("COMMTUNE_HALO_BLOCK", "4", "an integer from 2 to 64"),
    knob("COMMTUNE_HALO_SAMPLES", "2", "an integer from 1 to 1000"),
    knob("COMMTUNE_WARMUP", "3", "an integer from 1 to 1000000"),
    knob("COMMTUNE_BUDGET", "0.2", "a fraction in (0, 1]"),
    knob("COMMTUNE_MIN_GAIN", "0.02", "a fraction in [0, 1)"),
    knob("COMMTUNE_MINFACTOR_B", "3", "a number > 1"),
    knob("COMMTUNE_MINFACTOR_OUTLIERS", "0.2", "a fraction in [0, 1]"),
    knob("COMMTUNE_ROBUST_NU", "5", "a number > 0"),
    knob(
        "COMMTUNE_DRIFT_INTERVAL",
        "256",
        "an integer from 16 to 1000000000",
    ),
    knob("COMMTUNE_DRIFT_THRESHOLD", "0.5", "a number > 0"),
    knob(
        "COMMTUNE_TRACE",
        "(none)",
        "a path prefix: each rank writes PREFIX.RANK.tsv",
    ),
    knob(
        "COMMTUNE_HISTORY",
        "~/.local/state/commtune/history",
        "a directory, or off",
    ),
    knob("COMMTUNE_CALIBRATE", "off", "off, on"),
    knob("COMMTUNE_PMAX", "0.1", "a number > 0 (0.1: 10 %)"),
    knob(
        "COMMTUNE_INJECT_DELAY",
        "(none)",
        "op:codelet=duration[@instance[..end][/every]],... e.g. allreduce:native=300us (test only)",
    ),
];

/// Parses the COMMTUNE_* variables among `vars`, codelets named as in `names`; returns the
/// configuration and one message per problem found.
pub fn parse<I, K, V>(vars: I, names: Names) -> (Config, Vec<String>)
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut config = Config::default();
    let mut problems = Vec::new();
    let (mut minfactor_b, mut minfactor_outliers, mut nu) = (3.0, 0.2, 5.0);
    let mut filter = "robust";
    let (mut halo_block, mut halo_samples) = (HALO_BLOCK, HALO_SAMPLES);
    for (name, value) in vars {
        let name = name.as_ref().to_string_lossy();
        let name = name.as_ref();
        if !name.starts_with("COMMTUNE_") || is_launcher_variable(name) {
            continue;
        }
        let Some(knob) = KNOBS.iter().find(|k| k.name == name) else {
            problems.push(format!(
                "commtune: unknown knob {name} ignored (known: {})",
                KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            ));
            continue;
        };
        let Some(value) = value.as_ref().to_str().map(str::trim) else {
            problems.push(not_valid(knob, &value.as_ref().to_string_lossy()));
            continue;
        };
        let t = &mut config.tuning;
        let valid = match name {
            "COMMTUNE_MODE" => set(&mut config.mode, parse_mode(value)),
            "COMMTUNE_REPORT" => set(&mut config.report, parse_report(value)),
            "COMMTUNE_VERBOSE" => set(&mut config.verbose, number(value, 0, 2)),
            "COMMTUNE_FORCE" => {
                config.force = [None; 4];
                for (op, index) in codelet_list(name, value, names, &mut problems, true) {
                    config.force[op as usize] = Some(index);
                }
                true
            }
            "COMMTUNE_EXCLUDE" => {
                config.exclude = codelet_list(name, value, names, &mut problems, false);
                true
            }
            "COMMTUNE_HALO_NEIGHBOR" => set(&mut config.halo_neighbor, on_off(value)),
            "COMMTUNE_SEARCH" => set(&mut t.search, parse_search(value)),
            "COMMTUNE_FILTER" => ["minfactor", "iqr", "robust"]
                .into_iter()
                .find(|f| *f == value)
                .map(|f| filter = f)
                .is_some(),
            "COMMTUNE_TIMING" => set(t, t.with_timing(value)),
            "COMMTUNE_SAMPLES" => set(
                &mut t.samples,
                number(value, *SAMPLES.start(), *SAMPLES.end()),
            ),
            "COMMTUNE_BLOCK" => set(&mut t.block, number(value, 1, 64)),
            "COMMTUNE_HALO_BLOCK" => set(&mut halo_block, number(value, 2, 64)),
            "COMMTUNE_HALO_SAMPLES" => set(
                &mut halo_samples,
                number(value, *SAMPLES.start(), *SAMPLES.end()),
            ),
            "COMMTUNE_WARMUP" => set(&mut t.warmup, number(value, 1, 1_000_000)),
            "COMMTUNE_BUDGET" => set(&mut t.budget, real(value, |v| v > 0.0 && v <= 1.0)),
            "COMMTUNE_MIN_GAIN" => set(&mut t.min_gain, real(value, |v| (0.0..1.0).contains(&v))),
            "COMMTUNE_MINFACTOR_B" => set(&mut minfactor_b, real(value, |v| v > 1.0)),
            "COMMTUNE_MINFACTOR_OUTLIERS" => set(
                &mut minfactor_outliers,
                real(value, |v| (0.0..=1.0).contains(&v)),
            ),
            "COMMTUNE_ROBUST_NU" => set(&mut nu, real(value, |v| v > 0.0)),
            "COMMTUNE_DRIFT_INTERVAL" => {
                set(&mut t.drift_interval, number(value, 16, 1_000_000_000))
            }
            "COMMTUNE_DRIFT_THRESHOLD" => set(&mut t.drift_threshold, real(value, |v| v > 0.0)),
            "COMMTUNE_TRACE" => set(
                &mut config.trace,
                (!value.is_empty()).then(|| Some(PathBuf::from(value))),
            ),
            "COMMTUNE_HISTORY" => set(
                &mut config.history,
                match value {
                    "" => None,
                    "off" => Some(HistoryTarget::Off),
                    path => Some(HistoryTarget::Path(PathBuf::from(path))),
                },
            ),
            "COMMTUNE_CALIBRATE" => set(&mut config.calibrate, on_off(value)),
            "COMMTUNE_PMAX" => set(&mut config.pmax, real(value, |v| v > 0.0)),
            "COMMTUNE_INJECT_DELAY" => {
                config.delays = delays(value, names, &mut problems);
                true
            }
            _ => unreachable!("every knob in KNOBS is parsed above"),
        };
        if !valid {
            problems.push(not_valid(knob, value));
        }
    }
    config.tuning.filter = match filter {
        "minfactor" => Filter::MinFactor {
            b: minfactor_b,
            max_outliers: minfactor_outliers,
        },
        "iqr" => Filter::Iqr,
        _ => Filter::Robust { nu },
    };
    config.halo_tuning = config.tuning.for_halo(halo_block, halo_samples);
    (config, problems)
}

/// The one line about a value `knob` does not accept (not UTF-8 included).
fn not_valid(knob: &Knob, value: &str) -> String {
    format!(
        "commtune: {}={value:?} is not valid (accepted: {}); using the default {}",
        knob.name, knob.accepted, knob.default
    )
}

fn on_off(value: &str) -> Option<bool> {
    match value {
        "off" => Some(false),
        "on" => Some(true),
        _ => None,
    }
}

fn set<T>(slot: &mut T, value: Option<T>) -> bool {
    value.map(|v| *slot = v).is_some()
}

fn number<T: std::str::FromStr + PartialOrd>(value: &str, min: T, max: T) -> Option<T> {
    value.parse::<T>().ok().filter(|v| *v >= min && *v <= max)
}

fn real(value: &str, valid: impl Fn(f64) -> bool) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && valid(*v))
}

fn parse_mode(value: &str) -> Option<Mode> {
    match value {
        "off" => Some(Mode::Off),
        "profile" => Some(Mode::Profile),
        "tune" => Some(Mode::Tune),
        _ => None,
    }
}

fn parse_report(value: &str) -> Option<ReportTarget> {
    match value {
        "" => None,
        "none" => Some(ReportTarget::Disabled),
        path => Some(ReportTarget::Path(PathBuf::from(path))),
    }
}

fn parse_search(value: &str) -> Option<Search> {
    match value {
        "brute" => Some(Search::Brute),
        "attributes" => Some(Search::Attributes),
        "racing" => Some(Search::Racing),
        _ => None,
    }
}

const OPERATIONS: [Op; 4] = [Op::Allreduce, Op::Alltoall, Op::Allgatherv, Op::Halo];

/// `op` and the registry index of `codelet`, or a message saying what is wrong.
fn codelet_of(op_name: &str, codelet: &str, names: Names) -> Result<(Op, usize), String> {
    let Some(op) = OPERATIONS.into_iter().find(|o| o.name() == op_name) else {
        return Err(format!(
            "unknown operation `{op_name}` (operations: allreduce, alltoall, allgatherv, halo)"
        ));
    };
    let names = names(op);
    match names.iter().position(|n| *n == codelet) {
        Some(index) => Ok((op, index)),
        None => Err(format!(
            "{op_name} has no codelet `{codelet}` (codelets: {})",
            names.join(", ")
        )),
    }
}

/// `allreduce=ring,alltoall=bruck` (COMMTUNE_FORCE: one per operation, the last wins;
/// COMMTUNE_EXCLUDE: any number, but not native). Invalid items are reported and skipped.
fn codelet_list(
    knob: &str,
    value: &str,
    names: Names,
    problems: &mut Vec<String>,
    one_per_op: bool,
) -> Vec<(Op, usize)> {
    let mut list: Vec<(Op, usize)> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = match item.split_once('=') {
            None => Err(format!("`{item}` is not op=codelet")),
            Some((op, codelet)) => codelet_of(op.trim(), codelet.trim(), names),
        };
        match parsed {
            Ok((_, 0)) if !one_per_op => problems.push(format!(
                "commtune: {knob}: native cannot be excluded; ignored"
            )),
            Ok((op, index)) => {
                if one_per_op {
                    list.retain(|(o, _)| *o != op);
                }
                list.push((op, index));
            }
            Err(why) => problems.push(format!("commtune: {knob}: {why}; ignored")),
        }
    }
    list
}

/// `allreduce:native=300us,alltoall:bruck=1ms@200,allreduce:ring=60ms@60/4`.
fn delays(value: &str, names: Names, problems: &mut Vec<String>) -> Vec<Delay> {
    let mut list = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = item
            .split_once('=')
            .and_then(|(what, when)| Some((what.split_once(':')?, when)))
            .ok_or_else(|| format!("`{item}` is not op:codelet=duration[@instance[..end][/every]]"))
            .and_then(|((op, codelet), when)| {
                let (op, codelet) = codelet_of(op.trim(), codelet.trim(), names)?;
                let (duration, from) = when.split_once('@').unwrap_or((when, "0"));
                let (range, every) = from.split_once('/').unwrap_or((from, "1"));
                let (after, until) = match range.split_once("..") {
                    Some((after, until)) => (after, Some(until)),
                    None => (range, None),
                };
                let after = after.trim().parse::<u64>().map_err(|_| bad_after(item))?;
                let until = match until {
                    Some(until) => until
                        .trim()
                        .parse::<u64>()
                        .ok()
                        .filter(|&u| u > after)
                        .ok_or_else(|| bad_until(item))?,
                    None => u64::MAX,
                };
                let every = every
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|&e| e > 0)
                    .ok_or_else(|| bad_every(item))?;
                let duration = parse_duration(duration.trim()).ok_or_else(|| bad_duration(item))?;
                Ok(Delay {
                    op,
                    codelet,
                    duration,
                    after,
                    until,
                    every,
                })
            });
        match parsed {
            Ok(delay) => list.push(delay),
            Err(why) => problems.push(format!("commtune: COMMTUNE_INJECT_DELAY: {why}; ignored")),
        }
    }
    list
}

fn bad_after(item: &str) -> String {
    format!("`{item}`: the instance after @ must be a whole number")
}

fn bad_until(item: &str) -> String {
    format!("`{item}`: the end after .. must be a whole number above the instance before it")
}

fn bad_every(item: &str) -> String {
    format!("`{item}`: the interval after / must be a whole number from 1")
}

fn bad_duration(item: &str) -> String {
    format!("`{item}`: the duration must be a number with ns, us, ms or s")
}

/// `300us`, `1.5ms`, `2s`, `500ns`, `1e-3s` (the unit is the trailing letters).
fn parse_duration(text: &str) -> Option<Duration> {
    let number_end = text
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .len();
    let (number, unit) = text.split_at(number_end);
    let value: f64 = number.trim().parse().ok()?;
    let seconds = match unit {
        "ns" => value * 1e-9,
        "us" => value * 1e-6,
        "ms" => value * 1e-3,
        "s" => value,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// Variables the `commtune` CLI sets for its own use, not knobs of the library.
fn is_launcher_variable(name: &str) -> bool {
    name.starts_with("COMMTUNE_LIB_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use commtune_tune::Timing;

    /// The registries' names, as the library's codelets module gives them.
    fn names(op: Op) -> Vec<&'static str> {
        match op {
            Op::Allreduce => vec!["native", "linear", "ring"],
            Op::Alltoall => vec!["native", "linear", "bruck"],
            Op::Allgatherv => vec!["native", "ring"],
            Op::Halo => vec!["native", "persistent", "neighbor"],
        }
    }

    fn index(op: Op, name: &str) -> usize {
        names(op).iter().position(|n| *n == name).unwrap()
    }

    fn parse<I, K, V>(vars: I) -> (Config, Vec<String>)
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        super::parse(vars, names)
    }

    #[test]
    fn defaults_without_variables() {
        let (c, problems) = parse(Vec::<(String, String)>::new());
        assert_eq!(c.mode, Mode::Tune);
        assert_eq!(c.report, ReportTarget::Default);
        assert_eq!(c.tuning, Settings::default());
        assert_eq!(c.halo_tuning.timing, Timing::Period);
        assert!(problems.is_empty());
    }

    #[test]
    fn valid_values_are_taken() {
        let (c, problems) = parse([
            ("COMMTUNE_MODE", "off"),
            ("COMMTUNE_REPORT", "/tmp/r.json"),
            ("COMMTUNE_VERBOSE", "2"),
            ("COMMTUNE_SEARCH", "brute"),
            ("COMMTUNE_FILTER", "minfactor"),
            ("COMMTUNE_MINFACTOR_B", "4"),
            ("COMMTUNE_TIMING", "period"),
            ("COMMTUNE_SAMPLES", "12"),
            ("COMMTUNE_BUDGET", "0.3"),
            ("COMMTUNE_HALO_BLOCK", "6"),
            ("COMMTUNE_HALO_SAMPLES", "3"),
            ("COMMTUNE_HALO_NEIGHBOR", "on"),
            ("COMMTUNE_TRACE", "/tmp/t"),
            ("COMMTUNE_HISTORY", "/tmp/h"),
            ("COMMTUNE_CALIBRATE", "on"),
            ("PATH", "/bin"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.mode, Mode::Off);
        assert_eq!(c.report, ReportTarget::Path("/tmp/r.json".into()));
        assert_eq!(c.verbose, 2);
        assert_eq!(c.tuning.search, Search::Brute);
        assert_eq!(
            c.tuning.filter,
            Filter::MinFactor {
                b: 4.0,
                max_outliers: 0.2
            }
        );
        assert_eq!(c.tuning.timing, Timing::Period);
        assert!(!c.tuning.auto_timing);
        assert_eq!(c.tuning.samples, 12);
        assert_eq!(c.tuning.budget, 0.3);
        assert_eq!(c.halo_tuning, c.tuning.for_halo(6, 3));
        assert!(c.halo_neighbor);
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/t")));
        assert_eq!(c.history, HistoryTarget::Path("/tmp/h".into()));
        assert!(c.calibrate);
        let (c, _) = parse([("COMMTUNE_REPORT", "none"), ("COMMTUNE_HISTORY", "off")]);
        assert_eq!(c.report, ReportTarget::Disabled);
        assert_eq!(c.history, HistoryTarget::Off);
    }

    #[test]
    fn bad_value_names_knob_and_accepted_values_and_keeps_default() {
        let (c, problems) = parse([
            ("COMMTUNE_MODE", "fast"),
            ("COMMTUNE_VERBOSE", "7"),
            ("COMMTUNE_BUDGET", "0"),
            ("COMMTUNE_HALO_BLOCK", "1"),
        ]);
        assert_eq!(c.mode, Mode::Tune);
        assert_eq!(c.verbose, 0);
        assert_eq!(c.tuning.budget, Settings::default().budget);
        assert_eq!(c.halo_tuning.block, HALO_BLOCK);
        assert_eq!(problems.len(), 4);
        assert!(
            problems[0].contains("COMMTUNE_MODE") && problems[0].contains("off, profile, tune")
        );
        assert!(problems[1].contains("COMMTUNE_VERBOSE") && problems[1].contains("0, 1, 2"));
        assert!(problems[2].contains("COMMTUNE_BUDGET") && problems[2].contains("(0, 1]"));
        assert!(problems[3].contains("COMMTUNE_HALO_BLOCK") && problems[3].contains("2 to 64"));
    }

    #[test]
    fn every_knob_is_documented_with_its_default() {
        let manual = include_str!("../LD_PRELOAD.md");
        for knob in KNOBS {
            let row = manual
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", knob.name)))
                .unwrap_or_else(|| panic!("LD_PRELOAD.md has no row for {}", knob.name));
            assert!(
                row.contains(&format!("`{}`", knob.default)),
                "{}: default",
                knob.name
            );
        }
    }

    #[test]
    fn force_names_codelets_per_operation() {
        let (c, problems) = parse([(
            "COMMTUNE_FORCE",
            "allreduce=ring, alltoall=native,allgatherv=nosuch,bcast=x,junk",
        )]);
        assert_eq!(c.forced(Op::Allreduce), Some(index(Op::Allreduce, "ring")));
        assert_eq!(c.forced(Op::Alltoall), Some(0));
        assert_eq!(c.forced(Op::Allgatherv), None);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("allgatherv has no codelet `nosuch` (codelets: native"));
        assert!(problems[1].contains("unknown operation `bcast`"));
        assert!(problems[2].contains("`junk` is not op=codelet"));
    }

    #[test]
    fn exclude_takes_several_per_operation_but_not_native() {
        let (c, problems) = parse([(
            "COMMTUNE_EXCLUDE",
            "allreduce=ring,allreduce=linear,allreduce=native",
        )]);
        assert!(c.excluded(Op::Allreduce, index(Op::Allreduce, "ring")));
        assert!(c.excluded(Op::Allreduce, index(Op::Allreduce, "linear")));
        assert!(!c.excluded(Op::Allreduce, 0));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("native cannot be excluded"));
    }

    #[test]
    fn delays_with_units_and_start_instance() {
        let (c, problems) = parse([(
            "COMMTUNE_INJECT_DELAY",
            "allreduce:native=300us,allreduce:ring=1.5ms@200,alltoall:nosuch=1ms,allreduce:linear=3",
        )]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("alltoall has no codelet `nosuch`"));
        assert!(problems[1].contains("duration must be a number with ns, us, ms or s"));
        let ring = index(Op::Allreduce, "ring");
        assert_eq!(
            c.delay(Op::Allreduce, 0, 0),
            Some(Duration::from_micros(300))
        );
        assert_eq!(c.delay(Op::Allreduce, ring, 199), None);
        assert_eq!(
            c.delay(Op::Allreduce, ring, 200),
            Some(Duration::from_micros(1500))
        );
        assert_eq!(c.delay(Op::Alltoall, 0, 0), None);
        assert_eq!(parse_duration("1e-3s"), Some(Duration::from_millis(1)));
        assert_eq!(
            parse_duration("1e30s"),
            None,
            "too long for a Duration: no panic"
        );
        assert_eq!(parse_duration("-1ms"), None);
        assert_eq!(parse_duration("5"), None);
    }

    /// The delays of allreduce's `ring` at each of `calls`, in milliseconds (each must have one).
    fn ring_delays_ms(c: &Config, calls: impl IntoIterator<Item = u64>) -> Vec<u128> {
        let ring = index(Op::Allreduce, "ring");
        calls
            .into_iter()
            .map(|k| c.delay(Op::Allreduce, ring, k).unwrap().as_millis())
            .collect()
    }

    #[test]
    fn delays_in_one_call_of_every_few_fall_back_to_the_next_item() {
        let (c, problems) = parse([(
            "COMMTUNE_INJECT_DELAY",
            "allreduce:ring=60ms@60/4,allreduce:ring=4ms,allreduce:linear=1ms@2/0",
        )]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("interval after / must be"),
            "{problems:?}"
        );
        assert_eq!(ring_delays_ms(&c, 58..=65), [4, 4, 60, 4, 4, 4, 60, 4]);
    }

    #[test]
    fn delays_with_an_end_stop_before_it() {
        let (c, problems) = parse([(
            "COMMTUNE_INJECT_DELAY",
            "allreduce:ring=8ms@10..20/5,allreduce:ring=2ms,allreduce:linear=1ms@5..5",
        )]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("the end after .."), "{problems:?}");
        let calls = [9, 10, 14, 15, 19, 20, 25];
        assert_eq!(ring_delays_ms(&c, calls), [2, 8, 2, 8, 2, 2, 2]);
    }

    #[test]
    fn value_that_is_not_utf8_is_named_and_default_kept() {
        use std::os::unix::ffi::OsStrExt;
        let bad = OsStr::from_bytes(b"tu\xffne");
        let (c, problems) = parse([
            (OsStr::new("COMMTUNE_MODE"), bad),
            (OsStr::new("COMMTUNE_REPORT"), bad),
            (OsStr::new("COMMTUNE_SAMPLES"), OsStr::new("4")),
        ]);
        assert_eq!(c.mode, Mode::Tune);
        assert_eq!(c.report, ReportTarget::Default);
        assert_eq!(c.tuning.samples, 4);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(
            problems[0],
            "commtune: COMMTUNE_MODE=\"tu\u{fffd}ne\" is not valid (accepted: off, profile, \
             tune); using the default tune"
        );
        assert!(problems[1].starts_with("commtune: COMMTUNE_REPORT=\"tu\u{fffd}ne\" is not valid"));
    }

    #[test]
    fn unknown_knob_is_named() {
        let (_, problems) = parse([("COMMTUNE_MODEE", "off"), ("COMMTUNE_LIB_MPICH", "/x")]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("unknown knob COMMTUNE_MODEE"));
    }
}
