//! What the history store predicts for this job's keys (LD_PRELOAD.md, "History"): every rank
//! reads the store in a background thread started at MPI_Init, keeps the entries measured with
//! this job's MPI library on this platform (`platform`: the fingerprint the writer records too)
//! and timed as this job times (COMMTUNE_TIMING: a predicted time is what the safety net
//! compares this job's measurement with), and adds the decisions this run agrees on, so that a
//! later key of an unseen size is predicted from them. A prediction is only this rank's
//! proposal: `consensus::start_checkpoint` carries it, and the checkpoint uses it when every rank
//! proposed the same (ARCHITECTURE.md, invariant 2).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use commtune_history::predict::{Knowledge, Predicted, Problem};
use commtune_history::{self as history, Estimate, How, Platform, Replaced};
use commtune_tune::classes::class_name;

use super::state::{Decision, TunerState};
use crate::clock;
use crate::codelets;
use crate::config::{Config, HistoryTarget, Mode};
use crate::keys::Entry;
use crate::runtime::{self, Process};
use crate::say::say;
use crate::sync::BackgroundRead;

/// The store's directory, if this job tunes with one (read at MPI_Init, written at finalize).
pub fn store(config: &Config) -> Option<PathBuf> {
    if config.mode != Mode::Tune {
        return None;
    }
    match &config.history {
        HistoryTarget::Off => None,
        HistoryTarget::Path(path) => Some(path.clone()),
        HistoryTarget::Default => history::default_dir(|name| std::env::var(name).ok()),
    }
}

/// How a key's winner was found, as the store says it: a search of a calibration job
/// (`commtune calibrate`, COMMTUNE_CALIBRATE) is a calibration.
pub(crate) fn how(decided: How, config: &Config) -> How {
    match decided {
        How::Search if config.calibrate => How::Calibrate,
        how => how,
    }
}

/// The store to predict from: the job's store, except in a calibration (COMMTUNE_CALIBRATE),
/// which must measure every codelet at every size, not predict from the sizes it measured.
pub(crate) fn source(config: &Config) -> Option<PathBuf> {
    store(config).filter(|_| !config.calibrate)
}

static KNOWLEDGE: BackgroundRead<Knowledge> = BackgroundRead::new();

/// How long MPI_Init waits for the store's read: a small store (the common case) is read by the
/// time it returns, so no call of the application waits for it; a large one goes on in the
/// background.
pub(crate) const INIT_PATIENCE: Duration = Duration::from_millis(5);

/// At MPI_Init: starts reading the store, and waits for it up to `INIT_PATIENCE`. A read not done
/// by then goes on in the background, and the first checkpoint that finds a call ready waits for
/// the rest of it (it is local: it cannot deadlock). Not waiting there would starve the reader on
/// a machine whose cores the ranks' busy polling fills, and a short run would then never be
/// predicted.
pub fn start(process: &'static Process) {
    let read = source(runtime::config()).map(|dir| move || read(process, &dir));
    KNOWLEDGE.start("commtune-history", INIT_PATIENCE, read);
}

/// What the store `dir` holds for this job, analysed.
fn read(process: &Process, dir: &Path) -> Knowledge {
    let config = runtime::config();
    let start = Instant::now();
    let loaded = history::load(dir);
    if process.rank == 0
        && let Some(warning) = loaded.warning(dir)
    {
        say!("{warning}");
    }
    let read = start.elapsed();
    let platform = platform(process);
    let all = loaded.entries.len();
    let timing = config.tuning.timing.name();
    // Besides this timing's entries, the decisions jobs of this timing reached with another
    // one, for their exact problems (`with_other_timings`).
    let (entries, others): (Vec<history::Entry>, Vec<history::Entry>) = loaded
        .entries
        .into_iter()
        .filter(|e| e.mpi == process.mpi && e.platform == platform)
        .partition(|e| history::predict::compatible(e, &process.mpi, &platform, timing));
    let knowledge = Knowledge::new(&entries, config.pmax).with_other_timings(others, timing);
    if process.rank == 0 && config.verbose >= 1 {
        say!(
            "commtune: history store {}: {all} entries read in {:.0} ms, {} of this MPI \
             library, platform and timing ({timing}) analysed in {:.0} ms",
            dir.display(),
            read.as_secs_f64() * 1e3,
            entries.len(),
            (start.elapsed() - read).as_secs_f64() * 1e3
        );
    }
    knowledge
}

/// Runs `with` on what this rank knows, once the store is read (None: no store).
fn known<T>(with: impl FnOnce(&mut Knowledge) -> T) -> Option<T> {
    let read_now = || {
        let (process, dir) = (runtime::process()?, source(runtime::config())?);
        Some(read(process, &dir))
    };
    KNOWLEDGE.with(read_now, with)
}

/// This rank's prediction for a key of operation `op` on a communicator of `comm_size` ranks,
/// moving `bytes` per call, among the codelets `applicable` names.
pub fn predict(op: &str, comm_size: u32, bytes: u64, applicable: &[&str]) -> Option<Predicted> {
    let problem = Problem {
        op,
        comm_size,
        bytes,
    };
    let predicted = known(|k| k.predict(&problem, &|name| applicable.contains(&name)))??;
    // A time no call can take (interpolated from a corrupt store's entries) would make a safety
    // net that dismisses everything or nothing.
    (predicted.us.is_finite() && predicted.us > 0.0).then_some(predicted)
}

/// The decision this run agreed on (the same on every rank of the communicator) for the key of
/// `entry`, whose tuning state is `key` (`TunerState::decision`), now that production confirmed
/// it. Kept for the keys to come. One timed otherwise than the knowledge (a search
/// COMMTUNE_TIMING=auto ran with `local`, or one the self-check reopened with the other timing)
/// predicts only its exact problem, as a store's entry of that kind does (`with_other_timings`).
pub fn learn(entry: &Entry, key: &TunerState) {
    let Some(process) = runtime::process() else {
        return;
    };
    let Some(decision) = key.decision(clock::ns_per_tick() * 1e-3) else {
        return;
    };
    let asked = runtime::config().tuning.timing;
    // Made only with a store to add it to: the platform it records reads /proc/cpuinfo.
    known(|k| {
        let entry = self::entry(entry, &decision, process);
        if decision.timing == asked {
            k.add(entry);
        } else {
            k.add_other_timing(entry, asked.name());
        }
    });
}

/// The history entry of `decision`, the decided key of `entry`.
pub fn entry(entry: &Entry, decision: &Decision, process: &Process) -> history::Entry {
    let description = &entry.description;
    let names = codelets::names(entry.op);
    let estimates = decision
        .estimates
        .iter()
        .map(|(i, agreed)| Estimate {
            codelet: names[*i].to_string(),
            us: agreed.location,
            error_us: agreed.error,
        })
        .collect();
    let replaced = decision.replaced.map(|(i, us)| Replaced {
        codelet: names[i].to_string(),
        realised_us: us,
    });
    let winner = names[decision.winner];
    let recorded = recorded(process, estimates, winner, decision.realised_us, replaced);
    let asked = runtime::config().tuning.timing;
    history::Entry {
        op: entry.op.name().to_string(),
        comm_size: decision.comm_size,
        ranks_per_node: recorded.ranks_per_node,
        size_class: class_name(description.bytes_per_call),
        bytes: description.bytes_per_call,
        signature: description.signature.clone(),
        facts: description.facts.clone(),
        mpi: recorded.mpi,
        platform: recorded.platform,
        estimates: recorded.estimates,
        timing: Some(decision.timing.name().to_string()),
        reopened_from: (decision.timing != asked).then(|| asked.name().to_string()),
        realised_us: recorded.realised_us,
        winner: winner.to_string(),
        replaced: recorded.replaced,
        time: recorded.time,
        how: decision.how,
    }
}

/// What a collective entry (`entry`) and a halo entry (`halo::history::entries`) of this job
/// record alike: where and when it was measured, and the decision's times as the store keeps
/// them (`recorded`).
pub(crate) struct Recorded {
    pub mpi: String,
    pub platform: Platform,
    pub ranks_per_node: Option<u32>,
    /// Seconds since 1970 (UTC), now.
    pub time: u64,
    pub estimates: Vec<Estimate>,
    pub realised_us: Option<f64>,
    pub replaced: Option<Replaced>,
}

/// The record of a decision of `winner` with the search's `estimates` (µs), the winner's
/// `realised_us` in production and the winner the self-check `replaced`, if it did: a realised
/// time only when it is one (an empty window measures 0), and estimates that rank the codelets
/// as production did (`Replaced::correct`).
pub(crate) fn recorded(
    process: &Process,
    mut estimates: Vec<Estimate>,
    winner: &str,
    realised_us: Option<f64>,
    replaced: Option<Replaced>,
) -> Recorded {
    let realised_us = realised_us.filter(|us| us.is_finite() && *us > 0.0);
    if let Some(replaced) = &replaced {
        replaced.correct(&mut estimates, winner, realised_us);
    }
    Recorded {
        mpi: process.mpi.clone(),
        platform: platform(process),
        ranks_per_node: ranks_per_node(),
        time: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        estimates,
        realised_us,
        replaced,
    }
}

/// Ranks of MPI_COMM_WORLD on this host, as the launcher says (Open MPI's mpirun, Hydra).
fn ranks_per_node() -> Option<u32> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.parse().ok())
}

/// This machine as the history records it: the writer and every reader call this, so that an
/// entry matches exactly the jobs that would measure alike. It reads only this process's
/// environment and files: no communication, and the same on every rank of a cluster's nodes.
pub(crate) fn platform(process: &Process) -> Platform {
    static PLATFORM: OnceLock<Platform> = OnceLock::new();
    PLATFORM
        .get_or_init(|| {
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let one_host = ranks_per_node().map(|local| local == process.size);
            Platform {
                host: history::host_pattern(&runtime::host_name()),
                cpu: history::cpu_model(&cpuinfo),
                transport: transport(one_host),
            }
        })
        .clone()
}

/// Variables that choose the MPI libraries' network transport.
const TRANSPORT_VARIABLES: [&str; 7] = [
    "OMPI_MCA_pml",
    "OMPI_MCA_btl",
    "OMPI_MCA_mtl",
    "UCX_TLS",
    "FI_PROVIDER",
    "MPIR_CVAR_CH4_NETMOD",
    "MPIR_CVAR_NEMESIS_NETMOD",
];

/// The transport as far as it can be told cheaply: shared memory when every rank is on one
/// host; else what the environment chose (e.g. `OMPI_MCA_pml=ucx`), else `unknown` (the MPI
/// library picks at run time and does not say).
fn transport(one_host: Option<bool>) -> String {
    if one_host == Some(true) {
        return "shared memory".to_string();
    }
    let chosen: Vec<String> = TRANSPORT_VARIABLES
        .iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
            Some(format!("{name}={value}"))
        })
        .collect();
    if chosen.is_empty() {
        "unknown".to_string()
    } else {
        chosen.join(" ")
    }
}
