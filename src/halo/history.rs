//! Halo decisions across runs (LD_PRELOAD.md, "History"; the format is
//! `commtune_history::halo`'s). Every rank reads the store's halo entries in a background thread
//! started at MPI_Init and keeps its own: the same rank of a job of the same size, measured with
//! the same MPI library on the same platform and timed as this job times, the newest per
//! episode; where this timing measured nothing, a decision a job of this timing reached with the
//! other one (`halo::latest`), which the class then verifies with that timing. The halo tuner
//! (`rank_tuner`) asks for a class's exact episode at the end of its warm-up. Halo decisions are
//! each rank's alone, so nothing here is agreed; a rank reads the same files in the same order,
//! and so predicts the same, whenever it reads.
//!
//! At MPI_Finalize each rank hands the entries of its decided classes (`entries`, from
//! `rank_tuner::decided`) to the
//! report's gather (one message per rank on the report's private communicator, which carries
//! them anyway), and rank 0 writes every rank's after MPI_Finalize (`report::history`).

use std::collections::HashMap;
use std::path::Path;

use commtune_history::halo::{self, Episode, HaloEntry};
use commtune_history::{Estimate, How, Replaced};
use commtune_tune::classes::class_name;

use crate::runtime::{self, Process};
use crate::say::say;
use crate::sync::BackgroundRead;
use crate::tuner::knowledge;

type Recorded = HashMap<Episode, HaloEntry>;

static STORE: BackgroundRead<Recorded> = BackgroundRead::new();

/// At MPI_Init: starts reading this rank's halo entries in the background, and waits for it as
/// the collectives' read does (`knowledge::INIT_PATIENCE`: busy-polling ranks would starve a
/// reader left alone, and the class that asks at the end of its warm-up would wait inside an
/// exchange). A calibration predicts nothing, as for collectives.
pub fn start(process: &'static Process) {
    let read = knowledge::source(runtime::config()).map(|dir| move || read(process, &dir));
    STORE.start("commtune-halo-history", knowledge::INIT_PATIENCE, read);
}

/// This rank's entries of the store `dir`.
fn read(process: &Process, dir: &Path) -> Recorded {
    let loaded = halo::load(dir);
    // A directory that cannot be listed is the collective reader's one line already.
    if process.rank == 0
        && !loaded.unreadable()
        && let Some(warning) = loaded.warning(dir)
    {
        say!("{warning}");
    }
    let mine: Vec<HaloEntry> = loaded
        .entries
        .into_iter()
        .filter(|e| e.episode.rank == process.rank && e.episode.comm_size == process.size)
        .collect();
    let timing = runtime::config().halo_tuning.timing.name();
    halo::latest(mine, &process.mpi, &knowledge::platform(process), timing)
}

/// What the store recorded for this rank's `episode` (waits for the read if it is not done:
/// local, it cannot deadlock).
pub fn recorded(episode: &Episode) -> Option<HaloEntry> {
    let read_now = || {
        let (process, dir) = (runtime::process()?, knowledge::source(runtime::config())?);
        Some(read(process, &dir))
    };
    STORE.with(read_now, |recorded| recorded.get(episode).cloned())?
}

/// This rank's decided halo classes (`decided`) as history entries (none without a store).
pub fn entries(process: &Process, decided: impl FnOnce() -> Vec<Decided>) -> Vec<HaloEntry> {
    if knowledge::store(runtime::config()).is_none() {
        return Vec::new();
    }
    let asked = runtime::config().halo_tuning.timing;
    decided()
        .into_iter()
        .map(|d| {
            let estimates = d
                .estimates
                .into_iter()
                .map(|e| Estimate {
                    codelet: e.name,
                    us: e.estimate_us,
                    error_us: e.error_us,
                })
                .collect();
            let recorded =
                knowledge::recorded(process, estimates, d.winner, d.realised_us, d.replaced);
            HaloEntry {
                size_class: class_name(d.episode.bytes),
                episode: d.episode,
                ranks_per_node: recorded.ranks_per_node,
                signature: d.signature,
                mpi: recorded.mpi,
                platform: recorded.platform,
                estimates: recorded.estimates,
                timing: d.timing.name().to_string(),
                reopened_from: (d.timing != asked).then(|| asked.name().to_string()),
                realised_us: recorded.realised_us,
                winner: d.winner.to_string(),
                replaced: recorded.replaced,
                time: recorded.time,
                how: knowledge::how(d.how, runtime::config()),
            }
        })
        .collect()
}

/// What one of this rank's classes decided, for its entry (`rank_tuner::decided`).
pub struct Decided {
    pub episode: Episode,
    pub signature: String,
    /// The deciding search's estimates (µs); for a confirmed prediction, the winner's predicted
    /// time alone.
    pub estimates: Vec<commtune_report::CodeletEstimate>,
    pub timing: commtune_tune::Timing,
    pub realised_us: Option<f64>,
    pub winner: &'static str,
    /// The search's winner the self-check replaced with `winner`, its runner-up.
    pub replaced: Option<Replaced>,
    pub how: How,
}
