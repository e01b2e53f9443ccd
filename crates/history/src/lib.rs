//! The history store: what the searches of finished jobs decided, so that later jobs (and users)
//! can see which codelet won where. Pure: no MPI. The library's rank 0 writes one file per job at
//! MPI_Finalize; readers merge every file of the directory.
//!
//! Format: a directory of files `<host>-<pid>-<nanoseconds>-<n>.jsonl`, each written whole to a
//! hidden temporary name (`.<name>.tmp`) in the same directory and renamed into place, so that a
//! reader never sees a file being written and jobs finishing at once never write the same file
//! (no lock: shared cluster file systems lock badly, and a rename within a directory is atomic
//! on every POSIX file system). A file's first line is the version header
//! `{"commtune_history":2}`; every further line is one `Entry` as JSON. Halo decisions are in
//! files of their own, `.halo` (`halo`), which readers of these files never list.
//!
//! Versions: a new version marks a change that an older reader would misread (version 2 added
//! each entry's `timing`: a reader that ignored it would compare times measured in different
//! ways), so an older commtune skips the newer files. This crate reads every version from
//! `OLDEST` (an entry of version 1 has no `timing`). Fields an older reader may ignore without
//! misreading the rest add no version: `realised_us` (an older reader predicts from the
//! estimates alone, as it always did) and `replaced` (a decision the self-check changed: its
//! estimates already rank the entry's winner first, see `Replaced`, so an older reader predicts
//! it too).
//!
//! Reading never fails nor blocks: a file that cannot be read, is not a regular file, has no
//! header or a foreign version is skipped whole, a line that is not an entry (a truncated file's last line, say) is skipped
//! alone, and all of it together makes one warning line (`Loaded::warning`).

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub mod halo;
pub mod map;
pub mod predict;

/// The collectives whose decisions the store holds, as entries name them.
pub const OPERATIONS: [&str; 3] = ["allreduce", "alltoall", "allgatherv"];

/// The version of the format this crate writes.
pub const VERSION: u32 = 2;

/// The oldest version this crate reads.
pub const OLDEST: u32 = 1;

/// The files of a store: collective entries (`COLLECTIVES`) and halo entries (`halo`).
struct Kind {
    /// How a file's name ends.
    suffix: &'static str,
    /// The name of the header's one field, whose value is the version.
    header: &'static str,
    oldest: u32,
    version: u32,
}

/// Collective entries: `.jsonl` files whose first line is `{"commtune_history":2}`.
const COLLECTIVES: Kind = Kind {
    suffix: ".jsonl",
    header: "commtune_history",
    oldest: OLDEST,
    version: VERSION,
};

/// How an entry's winner was found.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The online search decided it.
    Search,
    /// A calibration run measured every codelet.
    Calibrate,
    /// A prediction from the history, confirmed by the self-check.
    PredictionConfirmed,
}

impl How {
    pub fn name(self) -> &'static str {
        match self {
            How::Search => "search",
            How::Calibrate => "calibrate",
            How::PredictionConfirmed => "prediction_confirmed",
        }
    }
}

/// Where an entry was measured: enough to tell machines apart, nothing that names a node.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Platform {
    /// Rank 0's host name with its trailing digits replaced by `#` (`node017` → `node#`).
    pub host: String,
    /// The CPU model of rank 0's host (/proc/cpuinfo), or `unknown`.
    pub cpu: String,
    /// The network transport the MPI library was told to use, as far as the environment says
    /// (e.g. `OMPI_MCA_pml=ucx`), or `unknown`.
    pub transport: String,
}

/// As `commtune map`'s headings and `commtune export` name a platform:
/// `node# (AMD EPYC 7763, transport shared memory)`.
impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} ({}, transport {})",
            self.host, self.cpu, self.transport
        )
    }
}

/// One codelet's agreed estimate (the same on every rank): typical time per call and its
/// standard error, in microseconds. Stored as `["ring",12.5,0.25]`, to the nanosecond: a
/// search's entry has up to eight, and the store's size is what reading it costs.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(from = "(String, f64, f64)", into = "(String, f64, f64)")]
pub struct Estimate {
    pub codelet: String,
    pub us: f64,
    pub error_us: f64,
}

impl From<(String, f64, f64)> for Estimate {
    fn from((codelet, us, error_us): (String, f64, f64)) -> Estimate {
        Estimate {
            codelet,
            us,
            error_us,
        }
    }
}

impl From<Estimate> for (String, f64, f64) {
    fn from(e: Estimate) -> (String, f64, f64) {
        // Beyond 1e305 µs the rounding would overflow to infinity, which JSON cannot hold.
        let ns = |us: f64| {
            Some((us * 1e3).round() / 1e3)
                .filter(|r| r.is_finite())
                .unwrap_or(us)
        };
        (e.codelet, ns(e.us), ns(e.error_us))
    }
}

/// One decided collective key of one job.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// `allreduce`, `alltoall`, `allgatherv`.
    pub op: String,
    pub comm_size: u32,
    /// Ranks on rank 0's host in MPI_COMM_WORLD (the job's, not the communicator's), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_per_node: Option<u32>,
    /// The size class of `bytes` (`commtune_tune::classes`), e.g. `64 B-96 B`.
    pub size_class: String,
    /// Bytes per call, exactly, of the key's first call.
    pub bytes: u64,
    /// The call's signature: counts, datatypes, reduction operation.
    pub signature: String,
    /// What codelet requirements read (communicator size, commutativity, large counts, ...).
    pub facts: String,
    /// The MPI library's version string.
    pub mpi: String,
    pub platform: Platform,
    /// Every codelet that ran in the search, in the order the search tried them.
    pub estimates: Vec<Estimate>,
    /// How the estimates were timed, as COMMTUNE_TIMING names it (`local`, `barrier`,
    /// `period`): times of different timings measure different things and do not compare.
    /// None in entries of version 1, which did not record it (see `UNKNOWN_TIMING`), and in
    /// ping-pong samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    /// The timing the job asked for (COMMTUNE_TIMING) when `timing` is another: its self-check
    /// found the search of the asked timing misled and searched again with this one, or under
    /// COMMTUNE_TIMING=auto (asked: `barrier`) the key's calls were short enough to search it
    /// with `local` (or a prediction of such an entry was confirmed). A later job that asks for
    /// the same timing predicts the exact problem from it
    /// (`predict::Knowledge::with_other_timings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopened_from: Option<String>,
    /// The winner's realised production time per call in microseconds (the maximum over ranks
    /// of the mean of a window of calls), when the job measured it: the self-check that kept
    /// a search's decision, the runner-up's trial that replaced its winner (`replaced`), or the
    /// safety net that confirmed a prediction. Production calls have no barrier before them, so
    /// they take longer than the search's samples (skew): this is what a later job's safety net
    /// measures, while `estimates` compare the codelets with each other. None when the job did
    /// not measure it, and in entries written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realised_us: Option<f64>,
    pub winner: String,
    /// The search's winner that the self-check replaced with `winner`, its runner-up, when it
    /// did (`estimates` are then corrected, see `Replaced`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Replaced>,
    /// Seconds since 1970 (UTC) when the job wrote the entry.
    pub time: u64,
    pub how: How,
}

/// A search's winner that the self-check replaced with the codelet it tried (the entry's winner:
/// the runner-up, or the best codelet that paces where the winner's window had a tail), or
/// that the lead checks replaced: it missed its estimate in production, and the other did
/// clearly better there (`commtune_tune::check`). Collective and halo entries alike.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Replaced {
    pub codelet: String,
    /// Its realised production time per call (µs) before the trial; the entry's `realised_us`
    /// is the runner-up's in its trial.
    pub realised_us: f64,
}

impl Replaced {
    /// Corrects a search's `estimates` (whose `winner`, the runner-up, realised `realised_us`
    /// in its trial) to rank the codelets as production did: the replaced codelet's estimate
    /// becomes its realised time scaled by the runner-up's estimate over the runner-up's
    /// realised time. Production's excess over the samples that every codelet shares (skew:
    /// production calls wait for no barrier) divides out, and what stays is the replaced
    /// codelet's own miss (its tail, say), in the estimates' terms, so that they still compare
    /// with other jobs' estimates and the runner-up's realised ratio stays its own. Without
    /// usable times, or where the corrected time would not rank behind the runner-up, the
    /// replaced codelet's estimate is left out: the self-check found it wrong. So is any other
    /// codelet's estimate under the runner-up's, which production never measured (a runner-up
    /// that paces, tried before a bursting codelet estimated faster, or one the lead checks
    /// followed): its samples were taken as the replaced winner's were, which misled. Every
    /// reader of the estimates (an older one too) then predicts the runner-up. The other
    /// codelets' estimates, and every error, stay the search's.
    pub fn correct(&self, estimates: &mut Vec<Estimate>, winner: &str, realised_us: Option<f64>) {
        let Some(at) = estimates.iter().position(|e| e.codelet == self.codelet) else {
            return;
        };
        let runner_up = winner_estimate(estimates, winner).map(|e| e.us);
        let corrected = runner_up
            .zip(realised_us)
            .map(|(estimate, realised)| self.realised_us * estimate / realised)
            .filter(|&us| us.is_finite() && runner_up.is_some_and(|r| us > r));
        match corrected {
            Some(us) => estimates[at].us = us,
            None => {
                estimates.remove(at);
            }
        }
        if let Some(runner_up) = runner_up {
            estimates.retain(|e| e.codelet == winner || e.us > runner_up);
        }
    }
}

/// The estimate of `winner` among `estimates`, if the search measured it (collective and halo
/// entries alike).
pub fn winner_estimate<'a>(estimates: &'a [Estimate], winner: &str) -> Option<&'a Estimate> {
    estimates.iter().find(|e| e.codelet == winner)
}

/// The timing of a decision that did not record one (format version 1). Its writers timed as
/// COMMTUNE_TIMING said (`local` by default then, any timing by choice) and recorded a search
/// the self-check had reopened with `period` timing alike, so the entry could have been timed any
/// way: it is compared with no entry of a known timing.
pub const UNKNOWN_TIMING: &str = "unknown";

/// The operation of a calibration's ping-pong entries (one-way time per size, as `native`):
/// samples of the network, not a decision among codelets.
pub const PING_PONG: &str = "p2p";

impl Entry {
    /// Whether the entry is a collective's decision among codelets (not a ping-pong sample).
    pub fn is_decision(&self) -> bool {
        self.op != PING_PONG
    }

    /// How a decision's estimates were timed: `timing`, else `UNKNOWN_TIMING`.
    pub fn timing_name(&self) -> &str {
        self.timing.as_deref().unwrap_or(UNKNOWN_TIMING)
    }

    /// The winner's estimate, if the search measured it.
    pub fn winner_estimate(&self) -> Option<&Estimate> {
        winner_estimate(&self.estimates, &self.winner)
    }

    /// The winner's realised production time over its estimate, if both were measured (and
    /// usable: finite and positive).
    pub fn realised_ratio(&self) -> Option<f64> {
        let ratio = self.realised_us? / self.winner_estimate()?.us;
        (ratio.is_finite() && ratio > 0.0).then_some(ratio)
    }
}

/// The default store: `$XDG_STATE_HOME/commtune/history`, else
/// `$HOME/.local/state/commtune/history` (per user; on a cluster usually a shared file
/// system, which one file per job suits). None without either variable.
pub fn default_dir(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let absolute = |v: Option<String>| v.filter(|v| v.starts_with('/')).map(PathBuf::from);
    absolute(var("XDG_STATE_HOME"))
        .or_else(|| absolute(var("HOME")).map(|h| h.join(".local/state")))
        .map(|state| state.join("commtune/history"))
}

/// A name no other job's file has: the host, the process id, the time in nanoseconds and a
/// counter (several writes of one process).
pub fn file_name(host: &str, pid: u32, nanos: u128) -> String {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = host.trim_start_matches('.');
    format!("{host}-{pid}-{nanos}-{n}.jsonl")
}

/// Writes `entries` as the new file `name` of `dir` (made if missing): whole, to a temporary
/// name first, then renamed. Returns the file's path.
pub fn write(dir: &Path, name: &str, entries: &[Entry]) -> io::Result<PathBuf> {
    write_kind(&COLLECTIVES, dir, name, entries)
}

/// Writes `entries` as the new file `name` of kind `kind` (see `write`).
fn write_kind<T: Serialize>(
    kind: &Kind,
    dir: &Path,
    name: &str,
    entries: &[T],
) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut text = serde_json::to_vec(&serde_json::json!({ kind.header: kind.version }))?;
    text.push(b'\n');
    for entry in entries {
        serde_json::to_writer(&mut text, entry)?;
        text.push(b'\n');
    }
    let path = dir.join(name);
    let temporary = dir.join(format!(".{name}.tmp"));
    let written = fs::File::create(&temporary).and_then(|mut f| f.write_all(&text));
    written
        .and_then(|()| fs::rename(&temporary, &path))
        .inspect_err(|_| {
            let _ = fs::remove_file(&temporary);
        })?;
    Ok(path)
}

/// Everything a directory held, merged, and what was skipped.
#[derive(Debug)]
pub struct Loaded<T = Entry> {
    pub entries: Vec<T>,
    /// Files read whole.
    pub files: usize,
    /// Files skipped whole (unreadable, no header, a foreign version) and lines skipped.
    pub skipped_files: usize,
    pub skipped_lines: usize,
    /// The first problem met, to name in the warning; the directory itself could not be
    /// listed if `files` and `skipped_files` are both 0.
    pub first_problem: Option<String>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Loaded {
            entries: Vec::new(),
            files: 0,
            skipped_files: 0,
            skipped_lines: 0,
            first_problem: None,
        }
    }
}

impl<T> Loaded<T> {
    /// One line saying what was ignored, if anything was.
    pub fn warning(&self, dir: &Path) -> Option<String> {
        let first = self.first_problem.as_deref()?;
        let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
        let what = match (self.skipped_files, self.skipped_lines) {
            (0, 0) => "the store".to_string(),
            (f, 0) => plural(f, "file"),
            (0, l) => plural(l, "line"),
            (f, l) => format!("{} and {}", plural(f, "file"), plural(l, "line")),
        };
        Some(format!(
            "commtune: warning: history store {}: ignored {what} ({first})",
            dir.display()
        ))
    }

    /// The directory could not be listed (it exists but is not a readable directory).
    pub fn unreadable(&self) -> bool {
        self.files == 0 && self.skipped_files == 0 && self.first_problem.is_some()
    }

    fn problem(&mut self, what: String) {
        self.first_problem.get_or_insert(what);
    }
}

/// Every entry of every file in `dir`, in file name order. A missing directory is an empty
/// store; nothing here fails (see `Loaded`).
pub fn load(dir: &Path) -> Loaded {
    load_kind(&COLLECTIVES, dir)
}

/// Every entry of every file of kind `kind` in `dir` (see `load`).
fn load_kind<T: DeserializeOwned>(kind: &Kind, dir: &Path) -> Loaded<T> {
    let mut loaded = Loaded::default();
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return loaded,
        Err(e) => {
            loaded.problem(format!("cannot list the directory: {e}"));
            return loaded;
        }
    };
    let mut names: Vec<PathBuf> = listing
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| is_store_file(path, kind.suffix))
        .collect();
    names.sort();
    for path in names {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        // A pipe would block the reader (and the first checkpoint that waits for it) forever,
        // a device such as /dev/zero fill the memory.
        if fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
            loaded.skipped_files += 1;
            loaded.problem(format!("{name}: not a regular file"));
            continue;
        }
        match fs::read(&path) {
            Ok(bytes) => match parse(kind, &bytes, &mut loaded.entries) {
                Ok((0, _)) => loaded.files += 1,
                Ok((bad, first)) => {
                    loaded.files += 1;
                    loaded.skipped_lines += bad;
                    loaded.problem(format!("{name}: {first}"));
                }
                Err(why) => {
                    loaded.skipped_files += 1;
                    loaded.problem(format!("{name}: {why}"));
                }
            },
            Err(e) => {
                loaded.skipped_files += 1;
                loaded.problem(format!("{name}: {e}"));
            }
        }
    }
    loaded
}

/// A finished file of the store whose name ends with `suffix` (not a temporary one, not
/// another program's).
fn is_store_file(path: &Path, suffix: &str) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy());
    name.is_some_and(|n| !n.starts_with('.') && n.ends_with(suffix))
}

/// Appends the entries of one file of kind `kind` to `into`; the lines skipped and why the
/// first was, or why the whole file is.
fn parse<T: DeserializeOwned>(
    kind: &Kind,
    bytes: &[u8],
    into: &mut Vec<T>,
) -> Result<(usize, String), String> {
    let mut lines = bytes.split(|b| *b == b'\n');
    let header = lines.next().unwrap_or_default();
    // Other fields of the header are ignored, as a newer version may add some.
    let version = serde_json::from_slice::<serde_json::Value>(header)
        .ok()
        .and_then(|h| u32::try_from(h.get(kind.header)?.as_u64()?).ok());
    let (oldest, newest) = (kind.oldest, kind.version);
    match version {
        Some(v) if (oldest..=newest).contains(&v) => {}
        Some(v) => {
            return Err(format!(
                "format version {v}, this commtune reads {oldest} to {newest}"
            ));
        }
        None if bytes.is_empty() => return Err("empty".to_string()),
        None => return Err("not a commtune history file (no version line)".to_string()),
    }
    let (mut bad, mut first) = (0, String::new());
    for (i, line) in lines.enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(entry) => into.push(entry),
            Err(e) => {
                if bad == 0 {
                    first = format!("line {}: {e}", i + 2);
                }
                bad += 1;
            }
        }
    }
    Ok((bad, first))
}

/// Rank 0's host name as a pattern shared by the nodes of a cluster: the first label, its
/// trailing digits replaced by `#` (`node017.cluster` → `node#`).
pub fn host_pattern(host: &str) -> String {
    let label = host.split('.').next().unwrap_or_default();
    let stem = label.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() < label.len() {
        format!("{stem}#")
    } else {
        stem.to_string()
    }
}

/// The CPU model named in the text of /proc/cpuinfo, or `unknown`.
pub fn cpu_model(cpuinfo: &str) -> String {
    ["model name", "Model", "cpu model", "cpu"]
        .iter()
        .find_map(|field| {
            cpuinfo.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                (name.trim() == *field && !value.trim().is_empty())
                    .then(|| value.split_whitespace().collect::<Vec<_>>().join(" "))
            })
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// `seconds` since 1970 as a UTC date and time, `2026-11-24 08:06`.
pub fn date(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let minutes = seconds % 86_400 / 60;
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        minutes / 60,
        minutes % 60
    )
}

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
