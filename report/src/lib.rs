//! commtune's report: what each rank sends to rank 0, how rank 0 merges it into the JSON report,
//! and the text summary printed at the end of a run and by `commtune report`.
//!
//! No MPI here: the preload library fills `RankData`, the CLI only reads `Report`.

mod compare;
mod html;
mod merge;
mod text;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use compare::{Comparison, compare};
pub use html::html;
pub use merge::merge;
pub use text::summary;

/// The report format's version. Policy: a change that adds fields bumps it, and every added
/// field has a default, so a reader accepts every version up to its own (an older file simply
/// lacks the newer figures, and the summary says what it cannot show); a file of a later
/// version is refused with a message saying so (`check_version`).
///
/// - 1: the first format.
/// - 2: time split into measured and estimated parts with an uncertainty (`time.estimated_s`,
///   `time.error_s`, `time.timed_calls`, `time.share_error`), shares capped at each rank's run
///   time (`share_in_calls`), savings measured in the run (`tuning.saving`, replacing the
///   estimate `tuning.saved_s`), `aborted` for a report written at MPI_Abort.
/// - 3: each rank's host and run time (`ranks`), each rank's time per site
///   (`ranks.time_by_rank_s`), halo episodes' messages per rank (`rank_signatures`), the
///   tuner's timeline of a key (`tuning.timeline`).
/// - 4: the self-check of a decision, predicted against realised time (`tuning.check`).
/// - 5: a key started from the history's prediction, verified by the safety net
///   (`tuning.prediction`).
/// - 6: a prediction's time read from the realised production times the history recorded, with
///   the searches' estimate of it (`tuning.prediction.estimate_us`).
/// - 7: the safety net's trial of an alternative after a predicted winner missed
///   (`tuning.prediction.trial`), and the outcome `kept`.
/// - 8: where a saving's replaced codelet was timed (`tuning.saving.replaced_in`).
/// - 9: the predicted winner's window after a trial its alternative won
///   (`tuning.prediction.trial.winner_after_us`).
/// - 10: how a key's searches timed their samples (`tuning.search_timing`), and what one of
///   the tuner's own collectives took in calls of the key (`tuning.collective_over_call`).
/// - 11: the self-check's realised time of the rank that waited least
///   (`tuning.check.least_rank_us`).
///
/// The JSON Schema `SCHEMA` (report/report.schema.json) describes every version: it is tested
/// against reports of each (report/tests/schema.rs), where a report with every field present
/// fails when a field is added here and not there.
pub const VERSION: u32 = 11;

/// The JSON Schema of the report, every version (report/report.schema.json).
pub const SCHEMA: &str = include_str!("../report.schema.json");

/// Whether a report of format `version` can be read by this build (see `VERSION`).
pub fn check_version(version: u32) -> Result<(), String> {
    if version <= VERSION {
        Ok(())
    } else {
        Err(format!(
            "report format version {version} is newer than this commtune reads ({VERSION}): \
             use the commtune that wrote it"
        ))
    }
}

/// Reads a report file of any version this build reads (see `VERSION`), with messages naming
/// the file.
pub fn read(path: &std::path::Path) -> Result<Report, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    // The version first: a later format may not parse as this one.
    #[derive(Deserialize)]
    struct Versioned {
        version: u32,
    }
    let versioned: Versioned =
        serde_json::from_str(&text).map_err(|e| format!("{name} is not a commtune report: {e}"))?;
    check_version(versioned.version).map_err(|e| format!("{name}: {e}"))?;
    let report: Report =
        serde_json::from_str(&text).map_err(|e| format!("{name} is not a commtune report: {e}"))?;
    Ok(report)
}

/// The operation a key belongs to.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Allreduce,
    Alltoall,
    Allgatherv,
    Halo,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Allreduce => "allreduce",
            Op::Alltoall => "alltoall",
            Op::Allgatherv => "allgatherv",
            Op::Halo => "halo",
        }
    }
}

/// A Python caller (mpi4py programs).
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug)]
pub struct PythonFrame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

/// Where a call came from, as every rank can name it.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug)]
pub struct SiteData {
    /// Identical on every rank for the same source location.
    pub id: u64,
    /// Path of the object file (or Python file).
    pub object: String,
    /// Link-time address of the return address in `object` (line number for Python).
    pub address: u64,
    pub python: Option<PythonFrame>,
}

/// One key (site × operation × signature) as measured on one rank.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct KeyData {
    pub op: Op,
    pub site: SiteData,
    /// What identifies the key across ranks besides the site: the signature of a collective,
    /// or `episode <n>` (n-th distinct episode of the site on that rank) for halo exchanges,
    /// whose peers differ from rank to rank.
    pub merge_key: String,
    /// Human-readable signature on this rank.
    pub signature: String,
    pub calls: u64,
    pub bytes: u64,
    /// Calls timed, and their total time.
    pub timed: u64,
    pub measured_ns: u64,
    /// The untimed calls' time, extrapolated from the timed ones (production calls of a tuned
    /// key are timed one in eight), and the half-width of its 95 % interval.
    pub estimated_ns: u64,
    pub estimate_error_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Time distribution: (bucket value in ns, count), increasing values.
    pub histogram: Vec<(u64, u64)>,
    /// Calls per codelet that ran them.
    pub codelets: BTreeMap<String, u64>,
    /// Halo episodes a codelet was to run but that it left as they were (counted as native in
    /// `codelets`), per codelet.
    #[serde(default)]
    pub unchanged: BTreeMap<String, u64>,
    /// Remarks, e.g. why a forced codelet did not run.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The tuner's state of this key (COMMTUNE_MODE=tune).
    #[serde(default)]
    pub tuning: Option<TuningData>,
    /// Halo episodes: mean time from one completion of the key to the next (an iteration).
    #[serde(default)]
    pub period_ns: Option<u64>,
}

/// What the tuner did with a key. Decisions are agreed, so this is the same on every rank.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TuningData {
    /// warmup, search, production or untuned.
    pub phase: String,
    /// Why the key is not (yet) tuned, or how its search ended.
    pub reason: Option<String>,
    /// The codelet production runs.
    pub winner: Option<String>,
    /// Instances spent searching, all searches together.
    pub search_instances: u64,
    /// Searches run (more than one when drift reopened the search).
    pub searches: u32,
    /// Rounds of the latest search.
    pub rounds: u32,
    /// The latest search's agreed estimates per codelet.
    pub codelets: Vec<CodeletEstimate>,
    /// What the key ran when, on the rank that reported it (version 3): searches, their
    /// samples, decisions and drift checks, at most `TIMELINE_EVENTS` of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Event>,
    /// Events left out of `timeline` past its limit (version 3).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeline_dropped: u64,
    /// Version 1 only: a saving estimated from the search's estimates, (native - winner) x
    /// production calls, which could claim time the run never saved. Superseded by `saving`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_s: Option<f64>,
    /// The time the winner saved in this run, as measured (None: native kept, not in
    /// production, too few timed calls to tell, or a winner whose production missed the
    /// search's time: see `check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saving: Option<Saving>,
    /// The latest self-check of a decision: the search's prediction against the winner's
    /// realised production time (version 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<SelfCheck>,
    /// The history's prediction the key started with, and what the safety net found
    /// (version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<HistoryPrediction>,
    /// How the key's searches timed their samples (version 10): `local`, `barrier` or `period`.
    /// Under COMMTUNE_TIMING=auto, `local` where one of the tuner's small collectives took at
    /// least half a call of the key (`collective_over_call`), else `barrier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_timing: Option<String>,
    /// What one of the tuner's small collectives (a barrier) took in calls of the key when its
    /// search started, the least of the ranks' (version 10; 0: not timed, as with
    /// COMMTUNE_BUDGET=1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_over_call: Option<f64>,
}

/// A key that started in production with the winner the history store predicted, verified by
/// a window of timed calls (the safety net): the measured time per call, the maximum over
/// ranks, within COMMTUNE_PMAX of the predicted time confirms it. Beyond it, an alternative
/// runs a window (`trial`, version 7): one that does not do clearly better keeps the
/// prediction (the machine, not the winner, is slower than when the history measured it);
/// otherwise, or with no alternative to try, the prediction is dismissed and the key is
/// searched.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HistoryPrediction {
    /// How it was predicted: closest (the nearest entry; the same problem, where it was
    /// measured), vote (entries near enough, weighted by 1/distance), fit (every codelet's times
    /// fitted along the message size) or map (the decision map).
    pub predictor: String,
    /// The entries it came from.
    pub from: Vec<HistorySource>,
    pub winner: String,
    /// The predicted time per call of the winner, and the measured one (None: not verified yet).
    pub predicted_us: f64,
    pub measured_us: Option<f64>,
    /// When `predicted_us` came from the winner's realised production times that the history
    /// recorded: the same time as the searches estimated it (production calls wait for no
    /// barrier, so they take longer than search samples). None: from the estimates (version 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_us: Option<f64>,
    /// COMMTUNE_PMAX: the share by which the measured time may exceed the predicted time.
    pub pmax: f64,
    /// verifying, confirmed, kept (missed, but its trial's alternative did no better) or
    /// dismissed (the key was searched).
    pub outcome: String,
    /// Search instances the prediction saved: the instances the key's search would run at most
    /// (its schedule's size, `commtune_tune::sampling::search_instances`); 0 when dismissed.
    pub saved_instances: u64,
    /// The alternative the safety net tried after the winner missed, and its measured time per
    /// call (version 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<PredictionTrial>,
}

/// What the safety net tried after a predicted winner missed its predicted time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PredictionTrial {
    pub codelet: String,
    pub measured_us: f64,
    /// Where the alternative beat the winner's window before the trial: the winner's time per
    /// call in its window after it, which the alternative had to beat too (version 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner_after_us: Option<f64>,
}

impl HistoryPrediction {
    /// One line: what was predicted from which entries, and what the safety net found.
    pub fn describe(&self) -> String {
        let from: Vec<String> = self
            .from
            .iter()
            .map(|s| format!("{} ranks {} B ({})", s.comm_size, s.bytes, s.how))
            .collect();
        let measured = self.measured_us.map_or_else(
            || "not measured yet".to_string(),
            |m| format!("measured {}", text::micros(m)),
        );
        let basis = self.estimate_us.map_or_else(
            || "from search estimates".to_string(),
            |e| format!("from realised production, estimated {}", text::micros(e)),
        );
        let trial = self.trial.as_ref().map_or_else(String::new, |t| {
            let after = t.winner_after_us.map_or_else(String::new, |us| {
                format!(", then {} measured {}", self.winner, text::micros(us))
            });
            format!(
                ", then {} measured {}{after}",
                t.codelet,
                text::micros(t.measured_us)
            )
        });
        format!(
            "history predicted {} at {} {basis} ({} of {}), {measured}{trial}: {} \
             (COMMTUNE_PMAX={}), {} search calls saved",
            self.winner,
            text::micros(self.predicted_us),
            self.predictor,
            from.join(", "),
            self.outcome,
            self.pmax,
            self.saved_instances
        )
    }
}

/// A history entry a prediction came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HistorySource {
    pub comm_size: u32,
    pub bytes: u64,
    /// How the entry's winner was found: search, calibrate or prediction_confirmed.
    pub how: String,
}

/// A decision checked against production: the first window of production calls after a
/// search decided, timed as the search timed its samples, reduced over ranks as its estimates
/// were (the maximum).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SelfCheck {
    /// The search's agreed estimate of the winner, and its realised time per call.
    pub predicted_us: f64,
    pub realised_us: f64,
    /// The best other codelet of the search, and its estimate.
    pub runner_up: Option<String>,
    pub runner_up_us: Option<f64>,
    /// (Version 6) The runner-up's realised time per call in a trial window of production,
    /// run when the winner missed its prediction or won a close race: the decision is wrong
    /// only if it beats the winner's `realised_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up_realised_us: Option<f64>,
    /// (Version 11) The winner's realised time per call on the rank where it was least:
    /// `realised_us` is the slowest rank's, which includes waiting in the call for ranks that
    /// arrive later (the application's imbalance, which samples after a barrier leave out),
    /// and the rank that waits least, the one that usually arrives last, has the least of it: a
    /// rough indicator of what the collective itself takes. Collective decisions searched with
    /// `local` or `barrier` timing only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub least_rank_us: Option<f64>,
    /// How the search timed its samples (local, barrier, period).
    pub timing: String,
    /// kept (the decision stands), reopened (searched again with the other timing) or
    /// runner_up (replaced by the runner-up its trial measured faster); native in reports of
    /// older builds, whose second wrong decision fell back to native.
    pub verdict: String,
}

/// What a tuned key's winner saved in this run, from what was measured in it: the winner's
/// production calls times the difference between the mean call time of the codelet it replaced
/// (native, timed where `replaced_in` says) and the winner's mean production call time (its
/// timed calls).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Saving {
    /// The codelet the winner replaced, its mean call time, and where it was timed.
    pub replaced: String,
    pub replaced_us: f64,
    #[serde(default)]
    pub replaced_in: Baseline,
    /// The winner's mean production call time.
    pub winner_us: f64,
    /// Production calls of the winner (per rank; in the report, the mean over ranks).
    pub calls: u64,
    /// Seconds saved (negative: the winner cost time), and the 95 % interval.
    pub saved_s: f64,
    pub low_s: f64,
    pub high_s: f64,
}

/// Where a saving's replaced codelet was timed; ordered so that keys or ranks timed both ways
/// together are `Search` (the least).
#[derive(Serialize, Deserialize, Clone, Copy, Default, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// In the search's calls (reports before version 8 all are).
    #[default]
    Search,
    /// In production calls, as the application runs them: before the search and in trials.
    Production,
}

impl Baseline {
    /// Where, in words: "in the search", "in production".
    pub fn describe(self) -> &'static str {
        match self {
            Baseline::Search => "in the search",
            Baseline::Production => "in production",
        }
    }
}

impl Saving {
    /// Whether the interval excludes zero: a saving (or a loss) was measured.
    pub fn measurable(&self) -> bool {
        self.low_s > 0.0 || self.high_s < 0.0
    }
}

/// Events kept per key: a search has at most COMMTUNE_SAMPLES samples of each codelet, and a
/// long run's drift checks would grow without bound.
pub const TIMELINE_EVENTS: usize = 1024;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One step of a tuned key's life. `call` is the key's call number (1: its first call), counted
/// over every site tuned with it (collectives from several lines with one operation and size);
/// calls before the first search are warm-up, calls after a decision production.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A search starts (`search`: 1 for the first, more after drift reopened it).
    Search { call: u64, search: u32 },
    /// A search call timed as a sample of `codelet`, in microseconds on this rank.
    Sample { call: u64, codelet: String, us: f64 },
    /// The search ended: production runs `winner` from the next call.
    Decision { call: u64, winner: String },
    /// A drift check: the winner's recent median over its first window's (mean over ranks),
    /// and whether the search reopened.
    Drift {
        call: u64,
        ratio: f64,
        reopened: bool,
    },
}

impl Event {
    pub fn call(&self) -> u64 {
        match self {
            Event::Search { call, .. }
            | Event::Sample { call, .. }
            | Event::Decision { call, .. }
            | Event::Drift { call, .. } => *call,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CodeletEstimate {
    pub name: String,
    pub estimate_us: f64,
    pub error_us: f64,
}

/// Everything one rank sends to rank 0 at MPI_Finalize.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RankData {
    pub rank: u32,
    /// The host the rank ran on.
    #[serde(default)]
    pub host: String,
    /// Wall time from MPI_Init to MPI_Finalize on this rank.
    pub run_ns: u64,
    pub keys: Vec<KeyData>,
}

/// The job ended through MPI_Abort: the report holds what the calling rank had.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aborted {
    pub rank: u32,
    /// The error code given to MPI_Abort.
    pub code: i32,
}

/// A rank of the run (version 3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankInfo {
    pub rank: u32,
    pub host: String,
    /// Wall time from MPI_Init to MPI_Finalize (or the abort, or exit), seconds.
    pub run_s: f64,
}

/// One rank's messages of a halo episode.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankSignature {
    pub rank: u32,
    pub signature: String,
}

/// Ranks whose halo messages a site lists at most.
pub const RANK_SIGNATURES: usize = 64;

/// A source location resolved on rank 0.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug, Default)]
pub struct Location {
    /// `file:line (function)`, or `object+0xaddress` without debug information.
    pub text: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub function: Option<String>,
}

/// The JSON report.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Report {
    pub version: u32,
    /// The MPI library (name and version).
    pub mpi: String,
    pub nprocs: u32,
    /// Ranks whose data is in the report (fewer than nprocs when MPI_Finalize was not seen).
    pub ranks_reporting: u32,
    /// Longest rank's wall time from MPI_Init to MPI_Finalize, seconds.
    pub run_time_s: f64,
    /// The share of the ranks' run time spent in intercepted calls: each rank's time in calls
    /// (at most its run time) summed over ranks, over the ranks' run times summed (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_in_calls: Option<f64>,
    /// Set when the job ended through MPI_Abort (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<Aborted>,
    /// The ranks reporting, in rank order (version 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankInfo>,
    /// Keys, most time first.
    pub sites: Vec<SiteReport>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct SiteReport {
    pub op: Op,
    pub location: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub function: Option<String>,
    pub object: String,
    pub address: String,
    pub signature: String,
    /// Calls per rank (the largest count when ranks differ; see `ranks.calls`).
    pub calls: u64,
    /// Bytes per rank over all calls (the largest when ranks differ; see `ranks.bytes`).
    pub bytes: u64,
    pub time: TimeStats,
    /// The codelet that ran most of the calls.
    pub codelet: String,
    pub codelets: BTreeMap<String, u64>,
    /// Remarks from any rank, e.g. why a forced codelet did not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the tuner did (COMMTUNE_MODE=tune).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningData>,
    /// Halo episodes: the mean iteration period (from one completion of the episode to the
    /// next), the slowest rank's; `time` is the episode itself (first post to last completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_us: Option<f64>,
    pub ranks: RankSpread,
    /// Halo episodes: each rank's messages (they differ in peers), for the first
    /// `RANK_SIGNATURES` ranks (version 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_signatures: Vec<RankSignature>,
}

/// The distribution of one call's duration over all calls on all ranks.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct TimeStats {
    /// Sum over calls on the slowest rank, seconds: measured, plus the untimed calls' time
    /// estimated from the timed ones (at most the rank's run time).
    pub total_s: f64,
    /// The estimated part of `total_s`, and the half-width of its 95 % interval (version 2).
    #[serde(default)]
    pub estimated_s: f64,
    #[serde(default)]
    pub error_s: f64,
    /// Calls timed on all ranks, from which the quantiles come (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_calls: Option<u64>,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Time in this key over run time, summed over ranks, each rank's time at most its run
    /// time; `share_error`: the half-width of its 95 % interval from estimated parts.
    pub share: f64,
    #[serde(default)]
    pub share_error: f64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct Range<T> {
    pub min: T,
    pub max: T,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct RankSpread {
    /// Ranks that made this call.
    pub count: u32,
    pub calls: Range<u64>,
    pub bytes: Range<u64>,
    pub time_s: Range<f64>,
    /// Each rank's time in the site, seconds, in the order of the report's `ranks`; null for a
    /// rank that never made the call (version 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_by_rank_s: Vec<Option<f64>>,
}
