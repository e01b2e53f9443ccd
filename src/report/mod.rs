//! The end-of-run report: every rank's keys (their measurements from `keys`, their tuning from
//! the tuner or the halo tuning) gathered to rank 0 on a private communicator at MPI_Finalize,
//! merged, symbolized, written as JSON and summarised on stderr; and the history store of what
//! searches decided (`history`).

mod history;

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::time::Duration;

use commtune_history::halo::HaloEntry;
use commtune_report::{Aborted, KeyData, Op, RankData, Report, TuningData};

use crate::config::{Config, Mode, ReportTarget};
use crate::keys::Entry;
use crate::runtime::Process;
use crate::say::{self, say};
use crate::site::Symbolizer;
use crate::{clock, codelets, halo, keys, mpi, runtime, tuner};

/// Sites shown in the text summary.
const SUMMARY_SITES: usize = 10;

fn rank_data(process: &Process) -> RankData {
    let ns_per_tick = clock::ns_per_tick();
    RankData {
        rank: process.rank,
        host: runtime::host_name(),
        run_ns: clock::monotonic_ns().saturating_sub(process.start_ns),
        keys: keys::entries()
            .into_iter()
            .map(|entry| {
                let names = codelets::names(entry.op);
                entry.data(ns_per_tick, &names, tuning(entry, &names, ns_per_tick))
            })
            .filter(|k| k.calls > 0)
            .collect::<Vec<KeyData>>(),
    }
}

/// What the tuner did with `entry`'s calls, when they were tuned.
fn tuning(entry: &Entry, names: &[&str], ns_per_tick: f64) -> Option<TuningData> {
    let config = runtime::config();
    if config.mode != Mode::Tune || config.forced(entry.op).is_some() || entry.is_folded() {
        return None;
    }
    match entry.op {
        Op::Halo => Some(halo::tuning_report(entry, ns_per_tick)),
        _ => tuner::report(entry, names, ns_per_tick),
    }
}

/// What each rank sends rank 0 at MPI_Finalize: its report data, and its halo decisions for the
/// history store (each rank decides its halo episodes alone, `halo::history`).
type Contribution = (RankData, Vec<HaloEntry>);

/// Every rank's data as it arrived on rank 0, to publish once MPI is finalized.
pub struct Gathered(Vec<Vec<u8>>);

impl Gathered {
    /// Decodes, merges, symbolizes and writes the report: after MPI_Finalize, so that rank 0
    /// does not reach it long after the other ranks (MPICH 4.0.2 over UCX's TCP transport then
    /// hung in MPI_Finalize now and then: rank 0 flushing its connections while the others
    /// waited for it).
    pub fn publish(self, process: &Process, config: &Config) {
        let (ranks, halo): (Vec<RankData>, Vec<Vec<HaloEntry>>) = self
            .0
            .iter()
            .filter_map(|bytes| serde_json::from_slice::<Contribution>(bytes).ok())
            .unzip();
        publish(&ranks, process, config, None);
        history::record(process, config, &halo.concat());
    }
}

/// Collective over MPI_COMM_WORLD (called from MPI_Finalize on every rank): on rank 0, the data
/// of every rank.
pub fn gather(process: &Process) -> Option<Gathered> {
    let mine: Contribution = (
        rank_data(process),
        halo::history::entries(process, halo::decided),
    );
    let mine = match serde_json::to_vec(&mine) {
        Ok(bytes) => bytes,
        Err(e) => {
            say!(
                "commtune: rank {}: cannot encode the report data: {e}",
                process.rank
            );
            Vec::new()
        }
    };
    let Some(comm) = mpi::comm_dup(mpi::comm_world()) else {
        say!("commtune: cannot create the report communicator; no report");
        return None;
    };
    let gathered = mpi::gather_bytes(comm, &mine);
    // The ranks leave together for MPI_Finalize (see `Gathered::publish`).
    mpi::barrier(comm);
    mpi::comm_free(comm);
    gathered.map(Gathered)
}

/// Tag of the at-exit notice on the private duplicate of MPI_COMM_WORLD.
const EXIT_TAG: i32 = 0x6578;
/// How long a rank that exits without MPI_Finalize waits for rank 0's report at most.
const EXIT_PATIENCE: Duration = Duration::from_secs(10);

/// The fallback when MPI_Finalize was not seen: only this rank's data, from rank 0. Launchers
/// end a job as soon as one process exits without MPI_Finalize (MPICH's Hydra killed rank 0
/// while it wrote, in half the runs), so the other ranks wait, a bounded time, for rank 0's
/// notice that it has written, on the private duplicate of MPI_COMM_WORLD made at MPI_Init.
pub fn write_at_exit(process: &Process, config: &Config) {
    let world = mpi::is_active()
        .then(|| crate::comms::of(mpi::comm_world()).existing_private())
        .flatten();
    if process.rank == 0 {
        publish(&[rank_data(process)], process, config, None);
        if let Some(world) = world {
            world.notify_others(EXIT_TAG, Duration::from_secs(1));
        }
    } else if let Some(world) = world {
        world.await_notice(0, EXIT_TAG, EXIT_PATIENCE);
    }
}

/// MPI_Abort on this rank, whichever it is: its own data, marked with the abort.
pub fn write_aborted(process: &Process, config: &Config, code: c_int) {
    let aborted = Aborted {
        rank: process.rank,
        code,
    };
    publish(&[rank_data(process)], process, config, Some(aborted));
}

fn publish(ranks: &[RankData], process: &Process, config: &Config, aborted: Option<Aborted>) {
    let mut symbolizer = Symbolizer::default();
    let report = commtune_report::merge(ranks, &process.mpi, process.size, aborted, |site| {
        symbolizer.locate(site)
    });
    say::text(commtune_report::summary(&report, SUMMARY_SITES));
    if let Some(path) = report_path(&config.report) {
        match write(&report, &path) {
            Ok(()) => say!("commtune: report written to {}", path.display()),
            Err(e) => say!(
                "commtune: cannot write the report to {}: {e}",
                path.display()
            ),
        }
    }
}

fn write(report: &Report, path: &Path) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    place(&json, path)
}

/// Writes `contents` to `path` through a temporary file renamed into place: a writer cut short
/// by MPI_Abort, or two ranks aborting at once, never leave a torn report. What is not a regular
/// file (a device such as /dev/null, a FIFO) is written as it is, since a rename would replace
/// it (root may replace /dev/null itself with a file, which every program's discarded output
/// then fills and every reader of /dev/null reads); a symbolic link is followed, so that the
/// file it names is replaced, not the link.
fn place(contents: &[u8], path: &Path) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::write(path, contents);
    }
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temporary, contents)?;
    std::fs::rename(&temporary, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

/// The configured path; by default `commtune-<job id>.json` with the batch system's job id, or
/// the process id of rank 0 outside a batch job.
fn report_path(target: &ReportTarget) -> Option<PathBuf> {
    match target {
        ReportTarget::Disabled => None,
        ReportTarget::Path(path) => Some(path.clone()),
        ReportTarget::Default => {
            let id = ["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID"]
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
                .unwrap_or_else(|| std::process::id().to_string());
            Some(PathBuf::from(format!("commtune-{id}.json")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::place;
    use std::os::unix::fs::FileTypeExt;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("commtune-place-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_report_replaces_a_regular_file_whole() {
        let dir = scratch("file");
        let path = dir.join("report.json");
        std::fs::write(&path, "an older and longer report").unwrap();
        place(b"{}", &path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_report_through_a_symbolic_link_replaces_the_file_it_names() {
        let dir = scratch("link");
        let (file, link) = (dir.join("real.json"), dir.join("link.json"));
        std::fs::write(&file, "old").unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        place(b"{}", &link).unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A FIFO stands for every file that is not a regular one (/dev/null among them, which a test
    /// must not risk): it is written, not replaced.
    #[test]
    fn a_report_to_a_fifo_is_written_into_it() {
        let dir = scratch("fifo");
        let fifo = dir.join("report.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        place(b"{}", &fifo).unwrap();
        // Checked first: a FIFO renamed over would leave its reader waiting for ever.
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "{kind:?}");
        assert_eq!(reader.join().unwrap(), "{}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
