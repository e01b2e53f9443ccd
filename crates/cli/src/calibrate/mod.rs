//! `commtune calibrate`: a sampling sweep that measures every applicable codelet of each
//! operation at log-spaced sizes, then at the geometric midpoints where the winner changes, plus
//! point-to-point latency and bandwidth, and keeps it all in the history store.
//!
//! The measuring is the library's own: the calibration program (program.rs) calls each
//! (operation, size) on a communicator of its own often enough for a brute-force search
//! (COMMTUNE_SEARCH=brute, COMMTUNE_BUDGET=1) to decide, and the library writes the decisions
//! as history entries at MPI_Finalize (COMMTUNE_CALIBRATE=on marks them `calibrate`), with the
//! platform fingerprint and MPI version a later tuned run computes alike. Each launcher run
//! writes into a staging directory inside the store and its file is renamed into the store when
//! the run ends, so what finished is kept whatever happens later, and a rerun skips what the
//! store already has for this platform and timing (`plan::comparable`): that is how a
//! calibration resumes.
//!
//! The first run (the probe) runs the ping-pong and the first point: its entry gives this
//! platform's fingerprint (what "already calibrated here" compares), its ping-pong the shape
//! of the cost model behind the ETA and the time budget.

mod plan;
mod program;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use commtune_history::{self as history, Entry, Estimate, How};
use commtune_tune::Timing;
use commtune_tune::classes::class_name;
use commtune_tune::settings::{SAMPLES, Settings, TIMINGS};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Failure;
use crate::flavour::Flavour;
use crate::launcher;

pub const ABOUT: &str = "Measure every codelet at log-spaced sizes and keep the results in the \
history store.

Runs the bundled calibration program (compiled once with the MPI's compiler wrapper) under the \
launcher given after `--`, with the library preloaded searching every codelet of each \
operation (COMMTUNE_SEARCH=brute) at --points log-spaced sizes of --sizes, then at the \
geometric midpoints where the winner changes by more than 5 % (down to sizes 1.25x apart). It also times a \
ping-pong between rank 0 and the last rank. Every result goes to the history store as an entry \
with \"how\":\"calibrate\", which later tuned runs on the same platform and with the same \
COMMTUNE_TIMING can use. A rerun skips what the store already has for this platform, MPI and \
COMMTUNE_TIMING: after Ctrl-C or --time-budget, run the same command again to continue. Prints \
the decision per operation at the end. Sizes are bytes per call as the history counts them: an \
allreduce's vector, an alltoall's or allgatherv's total received.";

pub const EXAMPLES: &str = "Examples:
  commtune calibrate -- mpirun -np 4
  commtune calibrate --ops allreduce --sizes 1K..1M --points 12 -- mpiexec.mpich -n 2
  commtune calibrate --time-budget 10m --dir /shared/commtune -- srun -n 64";

#[derive(clap::Args)]
pub struct Args {
    /// Operations to calibrate (allreduce, alltoall, allgatherv)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allreduce,alltoall,allgatherv",
        value_name = "LIST"
    )]
    ops: Vec<String>,

    /// Bytes per call, LOW..HIGH, with K, M or G (binary)
    #[arg(long, default_value = "8..4M", value_name = "LOW..HIGH")]
    sizes: String,

    /// Log-spaced sizes per operation before refinement
    #[arg(long, default_value_t = 20, value_name = "N")]
    points: u32,

    /// Start no work that would not finish within this time (e.g. 90s, 10m, 1h); keep what
    /// finished
    #[arg(long, value_name = "DURATION")]
    time_budget: Option<humantime::Duration>,

    /// The store (default: $COMMTUNE_HISTORY, else $XDG_STATE_HOME/commtune/history, else
    /// ~/.local/state/commtune/history)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// The launcher's MPI, when its name and --version cannot tell
    #[arg(long, value_enum, value_name = "MPI")]
    mpi: Option<Flavour>,

    /// The launcher and its arguments (mpirun -np 4, mpiexec.mpich -n 4, srun -n 64)
    #[arg(last = true, value_name = "LAUNCHER")]
    command: Vec<String>,
}

/// A launcher run stops taking points once its expected time passes this: Ctrl-C loses at most
/// the run under way (the library writes at MPI_Finalize).
const RUN_SECONDS: f64 = 15.0;

/// Calls per point: two searches' instances (every codelet, at most 8 per operation, each
/// COMMTUNE_SAMPLES times; the self-check may reopen the first search, which it did for one
/// point in twenty on shared memory, and the second search times blocks of two calls with
/// `period`) plus warm-up, the first checkpoint, the self-check's windows and the runner-up's
/// trial window before a reopening (`check::first_check`, 18 calls each).
fn calls_per_point(samples: u32) -> u32 {
    (8 + 2 * 8) * samples + 60
}

/// Samples per codelet: COMMTUNE_SAMPLES if the user set it, else 32, eight times the library's
/// default: a calibration runs once, and its noise is what limits every prediction from it.
/// Leave-one-out prediction within 10 % (`commtune map`, 40 points, shared memory, 2 ranks,
/// two or three calibrations each): Open MPI 93 % with 8 samples, 96 % with 16 and 32; MPICH
/// 90 to 92 % with 8 and 16, 93 to 96 % with 32 (LD_PRELOAD.md, "Calibration"). A value the
/// library would not accept is an error here, not a default as in the library: a calibration
/// runs for minutes, and one with samples the user did not mean is wasted.
fn samples(value: Option<OsString>) -> Result<u32, String> {
    let Some(value) = value else {
        return Ok(32);
    };
    let accepted = value.to_str().map(str::trim).and_then(|v| v.parse().ok());
    accepted.filter(|s| SAMPLES.contains(s)).ok_or_else(|| {
        format!(
            "COMMTUNE_SAMPLES={value:?} is not valid (accepted: an integer from {} to {})",
            SAMPLES.start(),
            SAMPLES.end()
        )
    })
}

/// How the library times the searches: COMMTUNE_TIMING if the user set it, else the library's
/// default. Calibrate passes it to the library, and counts only entries so timed as done (a
/// tuned run predicts only from entries of its own timing). Under `auto` every size is timed
/// with `barrier`, which the library is then asked for: the map and the predictions interpolate
/// between sizes, which only times measured alike allow. A value the library would not accept
/// is an error, as for `samples`.
fn timing(value: Option<OsString>) -> Result<Timing, String> {
    let Some(value) = value else {
        return Ok(Settings::default().timing);
    };
    value
        .to_str()
        .and_then(|v| Settings::default().with_timing(v.trim()))
        .map(|settings| settings.timing)
        .ok_or_else(|| {
            format!(
                "COMMTUNE_TIMING={value:?} is not valid (accepted: {})",
                TIMINGS.join(", ")
            )
        })
}

/// Launcher runs a size gets before calibrate gives up on it.
const TRIES: u32 = 2;

fn usage(message: impl Into<String>) -> Failure {
    Failure::new(2, message)
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let ops = plan::ops(&args.ops).map_err(usage)?;
    let range = plan::size_range(&args.sizes).map_err(usage)?;
    if args.points == 0 {
        return Err(usage("--points must be at least 1"));
    }
    let samples = samples(std::env::var_os("COMMTUNE_SAMPLES")).map_err(usage)?;
    let timing = timing(std::env::var_os("COMMTUNE_TIMING")).map_err(usage)?;
    if args.command.is_empty() {
        return Err(usage(
            "calibrate needs the launcher after `--`, e.g. `commtune calibrate -- mpirun -np 4`",
        ));
    }
    let first = &args.command[0];
    if launcher::classify_names(&launcher::names(first, launcher::which(first).as_deref()))
        == launcher::NameClass::Program
    {
        return Err(usage(format!(
            "`{first}` is not a launcher: calibrate runs its own program under one (mpirun, \
             mpiexec, srun), e.g. `commtune calibrate -- mpirun -np 4`"
        )));
    }
    let detection = launcher::detect(&args.command, args.mpi).map_err(usage)?;
    for warning in &detection.warnings {
        eprintln!("commtune: warning: {warning}");
    }
    let store = crate::history::dir(args.dir.clone()).map_err(usage)?;
    let library = crate::find_library(detection.flavour).map_err(usage)?;
    program::on_interrupt().map_err(|m| Failure::new(1, m))?;
    let program = program::compile(detection.flavour).map_err(|m| Failure::new(1, m))?;
    if program::interrupted() {
        return Err(Failure::new(130, "interrupted: nothing was calibrated"));
    }
    let job = program::Job {
        launcher: detection.launcher,
        flavour: detection.flavour,
        command: &args.command,
        library: &library,
        program: &program,
        samples,
        timing,
    };
    let mut calibration = Calibration::probe(&job, &store, &ops, range)?;
    let stop = calibration.sweep(
        &job,
        &ops,
        range,
        args.points,
        args.time_budget.map(Into::into),
    );
    calibration.bar.finish_and_clear();
    let mut summary = calibration.summary(&ops, range);
    if let Stop::Budget(left) = stop {
        summary.push_str(&format!(
            "stopped by the time budget with {left} points left: run the same command again to \
             continue\n"
        ));
    }
    crate::emit(&summary)?;
    match stop {
        Stop::Done | Stop::Budget(_) => Ok(()),
        Stop::Interrupted => Err(Failure::new(
            130,
            "interrupted: what finished is kept; run the same command again to continue",
        )),
        Stop::Failed(message) => Err(Failure::new(1, message)),
    }
}

/// Why a sweep ended.
enum Stop {
    Done,
    /// The next run would not fit in the time budget; points left.
    Budget(usize),
    Interrupted,
    Failed(String),
}

/// A launcher run's history file, in a staging directory of the store until it is kept.
struct Staged {
    dir: PathBuf,
    entries: Vec<Entry>,
}

impl Staged {
    /// Renames the run's files into the store (the same file system: atomic).
    fn keep(&self, store: &Path) -> Result<(), String> {
        let files = std::fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot list {}: {e}", self.dir.display()))?;
        for file in files.filter_map(Result::ok) {
            let name = file.file_name();
            if name.to_string_lossy().ends_with(".jsonl") {
                std::fs::rename(file.path(), store.join(&name))
                    .map_err(|e| format!("cannot add to the store {}: {e}", store.display()))?;
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Calibration {
    store: PathBuf,
    /// An entry measured by this calibration: its MPI, platform, ranks define "here".
    here: Entry,
    /// The timing of the searches: only decisions so timed count.
    timing: Timing,
    cost: plan::Cost,
    /// (operation, bytes) the store has for here, and the runs that decided nothing for one.
    done: BTreeSet<(String, u64)>,
    undecided: BTreeMap<(String, u64), u32>,
    /// Points measured by this command, and the launcher runs.
    measured: usize,
    runs: usize,
    started: Instant,
    bar: ProgressBar,
}

impl Calibration {
    /// The first run: the ping-pong over the range and the first point; what is already there.
    fn probe(
        job: &program::Job,
        store: &Path,
        ops: &[&'static str],
        (low, high): (u64, u64),
    ) -> Result<Calibration, Failure> {
        let bar = ProgressBar::new_spinner().with_message("probing: ping-pong and a first point");
        bar.enable_steady_tick(Duration::from_millis(200));
        let started = Instant::now();
        let pingpong_sizes: Vec<u64> = std::iter::successors(Some(low), |s| Some(s * 2))
            .take_while(|s| *s < high)
            .chain([high])
            .collect();
        // An allreduce's size needs no communicator size, which is not known yet.
        let first = plan::realizable("allreduce", low, 1);
        let mut pingpong = Vec::new();
        let mut ranks = 0;
        let mut point_seconds = 0.0;
        let staged = launch(
            job,
            store,
            0,
            &pingpong_sizes,
            &[("allreduce", first)],
            |line| match line {
                program::Line::Ranks(n) => ranks = n,
                program::Line::Pingpong(bytes, us, error) => pingpong.push((bytes, us, error)),
                program::Line::Point(_, _, seconds) => point_seconds += seconds,
            },
        );
        if program::interrupted() {
            bar.finish_and_clear();
            return Err(Failure::new(
                130,
                "interrupted during the probe: nothing was calibrated",
            ));
        }
        let staged = staged.map_err(|m| {
            bar.finish_and_clear();
            Failure::new(1, m)
        })?;
        let Some(here) = staged.entries.iter().find(|e| e.op == "allreduce").cloned() else {
            bar.finish_and_clear();
            return Err(Failure::new(
                1,
                format!(
                    "the probe's allreduce of {first} bytes on {ranks} ranks wrote no history \
                     entry: its search did not decide (is the library preloaded into the ranks?)"
                ),
            ));
        };
        let loaded = history::load(store);
        if let Some(warning) = loaded.warning(store) {
            bar.suspend(|| eprintln!("{warning}"));
        }
        let mine = plan::comparable(&loaded.entries, &here, job.timing);
        let done = plan::points(&mine);
        let first_point = ("allreduce".to_string(), first);
        // Not when the self-check reopened its search with the other timing.
        let decided = plan::points(&plan::comparable(&staged.entries, &here, job.timing))
            .contains(&first_point);
        let mut calibration = Calibration {
            store: store.to_path_buf(),
            cost: plan::Cost::new(
                pingpong.iter().map(|p| (p.0, p.1)).collect(),
                (started.elapsed().as_secs_f64() - point_seconds).max(0.1),
            ),
            here,
            timing: job.timing,
            done,
            undecided: BTreeMap::new(),
            measured: 0,
            runs: 1,
            started,
            bar,
        };
        calibration.cost.learn(first, point_seconds);
        if ops.contains(&"allreduce") && !calibration.done.contains(&first_point) {
            staged.keep(store).map_err(|m| Failure::new(1, m))?;
            if decided {
                calibration.done.insert(first_point);
                calibration.measured += 1;
            }
        }
        if !mine.iter().any(|e| e.op == history::PING_PONG) {
            calibration
                .keep_pingpong(&pingpong)
                .map_err(|m| Failure::new(1, m))?;
        }
        Ok(calibration)
    }

    /// The ping-pong as history entries of op `p2p`: one per size, its one-way time as the
    /// `native` estimate, with this calibration's MPI and platform.
    fn keep_pingpong(&self, pingpong: &[(u64, f64, f64)]) -> Result<(), String> {
        if pingpong.is_empty() {
            return Ok(());
        }
        let time = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let ranks = self.here.comm_size;
        let entries: Vec<Entry> = pingpong
            .iter()
            .map(|&(bytes, us, error_us)| Entry {
                op: history::PING_PONG.to_string(),
                comm_size: ranks,
                ranks_per_node: self.here.ranks_per_node,
                size_class: class_name(bytes),
                bytes,
                signature: format!("MPI_Send/MPI_Recv rank 0 <-> rank {}", ranks - 1),
                facts: format!("size={ranks}"),
                mpi: self.here.mpi.clone(),
                platform: self.here.platform.clone(),
                estimates: vec![Estimate {
                    codelet: "native".to_string(),
                    us,
                    error_us,
                }],
                timing: None,
                reopened_from: None,
                realised_us: None,
                winner: "native".to_string(),
                replaced: None,
                time: time.as_secs(),
                how: How::Calibrate,
            })
            .collect();
        let name = history::file_name("p2p", std::process::id(), time.as_nanos());
        history::write(&self.store, &name, &entries)
            .map(|_| ())
            .map_err(|e| format!("cannot add to the store {}: {e}", self.store.display()))
    }

    /// The log-spaced pass, then refinement passes, in launcher runs that fit the budget.
    fn sweep(
        &mut self,
        job: &program::Job,
        ops: &[&'static str],
        range: (u64, u64),
        points: u32,
        budget: Option<Duration>,
    ) -> Stop {
        let ranks = self.here.comm_size;
        let mut todo: Vec<(&'static str, u64)> = ops
            .iter()
            .flat_map(|op| {
                plan::log_spaced(op, range, points, ranks)
                    .into_iter()
                    .map(move |bytes| (*op, bytes))
            })
            .collect();
        self.bar.disable_steady_tick();
        self.bar.set_style(
            ProgressStyle::with_template(
                "calibrating [{bar:30}] {percent:>3}% {elapsed} elapsed, ETA {eta}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        self.bar.set_position(0);
        loop {
            todo.retain(|(op, bytes)| {
                let point = (op.to_string(), *bytes);
                !self.done.contains(&point) && self.tries(&point) < TRIES
            });
            // Cheap points first, the operations interleaved: a budget keeps the most sizes.
            todo.sort_by_key(|(op, bytes)| (*bytes, ops.iter().position(|o| o == op)));
            // An undecided midpoint is both a retry and, between the same neighbours, the
            // refinement's midpoint again: measured twice in one run, it would be decided twice.
            todo.dedup();
            if todo.is_empty() {
                return Stop::Done;
            }
            while !todo.is_empty() {
                if program::interrupted() {
                    return Stop::Interrupted;
                }
                let expected: f64 = todo.iter().map(|p| self.cost.point(p.1)).sum();
                self.bar
                    .set_length(self.bar.position() + (expected * 1000.0) as u64);
                let left = budget.map(|b| b.as_secs_f64() - self.started.elapsed().as_secs_f64());
                let run = self.next_run(&todo, left);
                if run.is_empty() {
                    return Stop::Budget(todo.len());
                }
                let measured = self.measure(job, &run);
                if program::interrupted() {
                    // Ctrl-C may also come between two runs, or reach the job before its
                    // launcher could take it: then that run finished, and is kept.
                    return Stop::Interrupted;
                }
                if let Err(message) = measured {
                    return Stop::Failed(message);
                }
                todo.drain(..run.len());
            }
            todo = self.refinement(ops, range);
            todo.extend(self.retries());
        }
    }

    /// The first points of `todo` for one launcher run: as many as fit in RUN_SECONDS (at
    /// least one) and in the `left` seconds of the budget (maybe none).
    fn next_run(
        &self,
        todo: &[(&'static str, u64)],
        left: Option<f64>,
    ) -> Vec<(&'static str, u64)> {
        let mut total = self.cost.launch;
        let mut run = Vec::new();
        for point in todo {
            let cost = self.cost.point(point.1);
            let over_run = !run.is_empty() && total + cost > RUN_SECONDS;
            let over_budget = left.is_some_and(|left| total + cost > left);
            if over_run || over_budget {
                break;
            }
            total += cost;
            run.push(*point);
        }
        run
    }

    /// One launcher run of `points`; what it decided joins the store.
    fn measure(
        &mut self,
        job: &program::Job,
        points: &[(&'static str, u64)],
    ) -> Result<(), String> {
        let mut finished = Vec::new();
        let (bar, cost) = (&self.bar, &self.cost);
        let staged = launch(job, &self.store, self.runs, &[], points, |line| {
            if let program::Line::Point(op, bytes, seconds) = line {
                bar.inc((cost.point(bytes) * 1000.0) as u64);
                bar.set_message(format!("{op} {bytes} B"));
                finished.push((bytes, seconds));
            }
        });
        self.runs += 1;
        let staged = staged?;
        staged.keep(&self.store)?;
        for (bytes, seconds) in finished {
            self.cost.learn(bytes, seconds);
        }
        let decided = plan::points(&plan::comparable(&staged.entries, &self.here, self.timing));
        for (op, bytes) in points {
            let point = (op.to_string(), *bytes);
            if decided.contains(&point) {
                self.measured += 1;
                self.done.insert(point);
            } else {
                *self.undecided.entry(point).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    fn tries(&self, point: &(String, u64)) -> u32 {
        self.undecided.get(point).copied().unwrap_or(0)
    }

    /// The sizes whose searches did not settle yet, to try once more.
    fn retries(&self) -> Vec<(&'static str, u64)> {
        self.undecided
            .iter()
            .filter(|(point, tries)| **tries < TRIES && !self.done.contains(*point))
            .filter_map(|((op, bytes), _)| {
                let op = plan::OPS.iter().find(|o| **o == op.as_str())?;
                Some((*op, *bytes))
            })
            .collect()
    }

    /// The midpoints where neighbouring calibrated sizes of an operation have different winners.
    fn refinement(
        &self,
        ops: &[&'static str],
        (low, high): (u64, u64),
    ) -> Vec<(&'static str, u64)> {
        let loaded = history::load(&self.store);
        let mine = plan::comparable(&loaded.entries, &self.here, self.timing);
        ops.iter()
            .flat_map(|op| {
                let entries: BTreeMap<u64, &Entry> = plan::latest(&mine, op)
                    .into_iter()
                    .filter(|(bytes, _)| (low..=high).contains(bytes))
                    .collect();
                plan::midpoints(op, &entries, self.here.comm_size)
                    .into_iter()
                    .map(move |bytes| (*op, bytes))
            })
            .collect()
    }

    /// What the store now says for here over the range: the decision per operation and the
    /// point-to-point latency and bandwidth.
    fn summary(&self, ops: &[&'static str], (low, high): (u64, u64)) -> String {
        let loaded = history::load(&self.store);
        let mine = plan::comparable(&loaded.entries, &self.here, self.timing);
        let mut out = format!(
            "calibrated {} new points in {} launcher runs, {:.0} s; store {}\n{} ranks ({} per node), {}, {} ({}, {}), timing {}\n",
            self.measured,
            self.runs,
            self.started.elapsed().as_secs_f64(),
            self.store.display(),
            self.here.comm_size,
            self.here
                .ranks_per_node
                .map_or_else(|| "?".to_string(), |r| r.to_string()),
            self.here.mpi.lines().next().unwrap_or_default(),
            self.here.platform.host,
            self.here.platform.cpu,
            self.here.platform.transport,
            self.timing.name(),
        );
        for op in ops {
            let entries: BTreeMap<u64, &Entry> = plan::latest(&mine, op)
                .into_iter()
                .filter(|(bytes, _)| (low..=high).contains(bytes))
                .collect();
            out.push_str(&plan::decision_table(op, &entries));
        }
        let p2p = plan::latest(&mine, history::PING_PONG);
        let one_way = |(bytes, e): (&u64, &&Entry)| Some((*bytes, e.estimates.first()?.us));
        if let (Some((small, latency)), Some((large, time))) = (
            p2p.iter().next().and_then(one_way),
            p2p.iter().next_back().and_then(one_way),
        ) {
            out.push_str(&format!(
                "p2p rank 0 <-> rank {}: latency {latency:.2} us ({small} B), bandwidth {:.0} MB/s ({large} B)\n",
                self.here.comm_size - 1,
                large as f64 / time,
            ));
        }
        let given_up: Vec<String> = self
            .undecided
            .iter()
            .filter(|(point, tries)| **tries >= TRIES && !self.done.contains(*point))
            .map(|((op, bytes), _)| format!("{op} {bytes} B"))
            .collect();
        if !given_up.is_empty() {
            out.push_str(&format!(
                "no decision timed {} (the search did not settle in {TRIES} launcher runs): {}\n",
                self.timing.name(),
                given_up.join(", ")
            ));
        }
        out
    }
}

/// One launcher run of the program: the ping-pong over `pingpong` sizes, then `points`, the
/// library's entries staged in `<store>/.calibrate-<pid>-<run>`.
fn launch(
    job: &program::Job,
    store: &Path,
    run: usize,
    pingpong: &[u64],
    points: &[(&str, u64)],
    seen: impl FnMut(program::Line),
) -> Result<Staged, String> {
    let dir = store.join(format!(".calibrate-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut staged = Staged {
        dir,
        entries: Vec::new(),
    };
    let list = |sizes: &[u64]| {
        if sizes.is_empty() {
            "-".to_string()
        } else {
            sizes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    let args: Vec<String> = [calls_per_point(job.samples).to_string(), list(pingpong)]
        .into_iter()
        .chain(points.iter().map(|(op, bytes)| format!("{op}:{bytes}")))
        .collect();
    job.run(&args, &staged.dir, seen)?;
    let loaded = history::load(&staged.dir);
    if let Some(warning) = loaded.warning(&staged.dir) {
        return Err(warning);
    }
    staged.entries = loaded.entries;
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_is_the_users_or_the_librarys_default() {
        assert_eq!(timing(None), Ok(Settings::default().timing));
        assert_eq!(timing(Some("local".into())), Ok(Timing::Local));
        assert_eq!(timing(Some(" period ".into())), Ok(Timing::Period));
        let error = timing(Some("wall".into())).unwrap_err();
        assert!(
            error.starts_with("COMMTUNE_TIMING=\"wall\" is not valid"),
            "{error}"
        );
    }
}
