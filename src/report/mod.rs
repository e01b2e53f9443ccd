//! The end-of-run report: every rank's keys gathered to rank 0 on a private communicator at
//! MPI_Finalize, merged, symbolized, written as JSON and summarised on stderr.

use std::path::PathBuf;
use std::time::Duration;

use commtune_report::{RankData, Report};

use crate::config::{Config, ReportTarget};
use crate::runtime::Process;
use crate::site::Symbolizer;
use crate::{clock, keys, mpi};

/// Sites shown in the text summary.
const SUMMARY_SITES: usize = 10;

fn rank_data(process: &Process) -> RankData {
    RankData {
        rank: process.rank,
        run_ns: mpi::now_ns().saturating_sub(process.start_ns),
        keys: keys::all(clock::ns_per_tick()),
    }
}

/// Collective over MPI_COMM_WORLD (called from MPI_Finalize on every rank).
pub fn gather_and_write(process: &Process, config: &Config) {
    let mine = match serde_json::to_vec(&rank_data(process)) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!(
                "commtune: rank {}: cannot encode the report data: {e}",
                process.rank
            );
            Vec::new()
        }
    };
    let Some(comm) = mpi::comm_dup(mpi::comm_world()) else {
        eprintln!("commtune: cannot create the report communicator; no report");
        return;
    };
    let gathered = mpi::gather_bytes(comm, &mine);
    mpi::comm_free(comm);
    let Some(gathered) = gathered else {
        return;
    };
    let ranks: Vec<RankData> = gathered
        .iter()
        .filter_map(|bytes| serde_json::from_slice(bytes).ok())
        .collect();
    publish(&ranks, process, config);
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
        .then(|| mpi::existing_private_comm(mpi::comm_world()))
        .flatten();
    if process.rank == 0 {
        publish(&[rank_data(process)], process, config);
        if let Some(world) = world {
            world.notify_others(EXIT_TAG, Duration::from_secs(1));
        }
    } else if let Some(world) = world {
        world.await_notice(0, EXIT_TAG, EXIT_PATIENCE);
    }
}

fn publish(ranks: &[RankData], process: &Process, config: &Config) {
    let mut symbolizer = Symbolizer::default();
    let report = commtune_report::merge(ranks, &process.mpi, process.size, |site| {
        symbolizer.locate(site)
    });
    eprint!("{}", commtune_report::summary(&report, SUMMARY_SITES));
    if let Some(path) = report_path(&config.report) {
        match write(&report, &path) {
            Ok(()) => eprintln!("commtune: report written to {}", path.display()),
            Err(e) => eprintln!(
                "commtune: cannot write the report to {}: {e}",
                path.display()
            ),
        }
    }
}

fn write(report: &Report, path: &PathBuf) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(path, json)
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
