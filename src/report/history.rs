//! The history store (COMMTUNE_HISTORY; the format is `commtune_history`'s). Rank 0 of a tuned
//! job reads it on a thread of its own from MPI_Init on, so that MPI_Init does not wait and a
//! damaged store is reported (one line) while the job runs; and after MPI_Finalize it adds one
//! file with what this job's searches decided. Neither ever fails the job: a problem is one
//! line on stderr.

use std::os::unix::thread::JoinHandleExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use commtune_history::{self as history, Estimate, How, Platform};
use commtune_report::{Op, RankData};
use commtune_tune::classes::class_name;
use rustc_hash::FxHashSet;

use super::host_name;
use crate::config::{Config, HistoryTarget, Mode};
use crate::runtime::Process;
use crate::say::say;
use crate::{clock, codelets, keys, tuner};

/// The thread reading the store, joined before the store is written; it returns whether the
/// directory itself could not be read (and said so: writing there then fails without a second
/// line).
static LOADER: Mutex<Option<JoinHandle<bool>>> = Mutex::new(None);

/// The store's directory, if this job reads and writes one.
fn dir(config: &Config) -> Option<PathBuf> {
    if config.mode != Mode::Tune {
        return None;
    }
    match &config.history {
        HistoryTarget::Off => None,
        HistoryTarget::Path(path) => Some(path.clone()),
        HistoryTarget::Default => history::default_dir(|name| std::env::var(name).ok()),
    }
}

/// At MPI_Init, on rank 0: reads the store in the background (nothing uses its entries yet;
/// COMMTUNE_VERBOSE=1 says how many there are and how long reading took).
pub fn start_loading(process: &Process, config: &'static Config) {
    let Some(dir) = dir(config).filter(|_| process.rank == 0) else {
        return;
    };
    let mpi = process.mpi.clone();
    let reader = std::thread::Builder::new()
        .name("commtune-history".into())
        .spawn(move || {
            run_when_idle();
            let start = Instant::now();
            let loaded = history::load(&dir);
            if let Some(warning) = loaded.warning(&dir) {
                say!("{warning}");
            }
            if config.verbose >= 1 {
                let here = platform(None);
                let alike = loaded
                    .entries
                    .iter()
                    .filter(|e| {
                        e.mpi == mpi && e.platform.host == here.host && e.platform.cpu == here.cpu
                    })
                    .count();
                say!(
                    "commtune: history {}: {} entries ({alike} of this MPI and platform) read in \
                     {:.1} ms",
                    dir.display(),
                    loaded.entries.len(),
                    start.elapsed().as_secs_f64() * 1e3
                );
            }
            loaded.unreadable()
        });
    if let (Ok(reader), Ok(mut slot)) = (reader, LOADER.lock()) {
        *slot = Some(reader);
    }
}

/// The calling thread (the reader) runs only on cores nothing else wants (SCHED_IDLE): reading a
/// large store (10^5 entries take about 0.2 s) takes no time from MPI_Init or the application,
/// whose ranks may poll. A failure leaves the policy as it was, which is harmless.
fn run_when_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads `param` during the call; pid 0 is the calling
    // thread.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// MPI_Finalize is about to wait for the reader: an ordinary share of the CPU again
/// (SCHED_OTHER), so that a node kept busy by other jobs cannot hold the end of the job up.
fn run_as_usual(reader: &JoinHandle<bool>) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: the thread is not joined yet, so its pthread_t is valid (POSIX keeps it until
    // pthread_join, whether or not the thread has ended); the call only reads `param`.
    let _ =
        unsafe { libc::pthread_setschedparam(reader.as_pthread_t(), libc::SCHED_OTHER, &param) };
}

/// After MPI_Finalize, on rank 0 (`ranks`: every rank's report data): adds one entry per key
/// whose search decided, if there is any.
pub fn record(ranks: &[RankData], process: &Process, config: &Config) {
    let reader = LOADER.lock().ok().and_then(|mut slot| slot.take());
    let unreadable = reader.is_some_and(|reader| {
        if !reader.is_finished() {
            run_as_usual(&reader);
        }
        reader.join().unwrap_or(false)
    });
    let Some(dir) = dir(config) else {
        return;
    };
    let entries = entries(ranks, process);
    if entries.is_empty() {
        return;
    }
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = history::file_name(&host_name(), std::process::id(), nanos);
    if let Err(e) = history::write(&dir, &name, &entries)
        && !unreadable
    {
        say!(
            "commtune: warning: cannot add to the history store {}: {e}",
            dir.display()
        );
    }
}

/// One entry per decided key (keys of several sites that share a tuner: once).
fn entries(ranks: &[RankData], process: &Process) -> Vec<history::Entry> {
    let config = crate::runtime::config();
    let host = host_name();
    let hosts: FxHashSet<&str> = ranks.iter().map(|r| r.host.as_str()).collect();
    let ranks_per_node = ranks.iter().filter(|r| r.host == host).count();
    let platform = platform(Some(hosts.len()));
    let time = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let us = clock::ns_per_tick() * 1e-3;
    let mut seen = FxHashSet::default();
    let mut entries = Vec::new();
    for entry in keys::entries() {
        if entry.op == Op::Halo || config.forced(entry.op).is_some() || entry.is_folded() {
            continue;
        }
        let Some(decided) = tuner::decided(entry) else {
            continue;
        };
        if !seen.insert(decided.tuner) {
            continue;
        }
        let names = codelets::names(entry.op);
        let description = &entry.description;
        entries.push(history::Entry {
            op: entry.op.name().to_string(),
            comm_size: comm_size(&description.facts).unwrap_or(0),
            ranks_per_node: (ranks_per_node > 0).then_some(ranks_per_node as u32),
            size_class: class_name(description.bytes_per_call),
            bytes: description.bytes_per_call,
            signature: description.signature.clone(),
            facts: description.facts.clone(),
            mpi: process.mpi.clone(),
            platform: platform.clone(),
            estimates: decided
                .estimates
                .iter()
                .map(|(i, e)| Estimate {
                    codelet: names[*i].to_string(),
                    us: e.location * us,
                    error_us: e.error * us,
                })
                .collect(),
            winner: names[decided.winner].to_string(),
            time,
            how: How::Search,
        });
    }
    entries
}

/// The communicator size in a key's facts (`codelets::Facts::agreed` begins `size=N`).
fn comm_size(facts: &str) -> Option<u32> {
    facts
        .split_whitespace()
        .find_map(|word| word.strip_prefix("size=")?.parse().ok())
}

/// This machine (`hosts`: how many hosts the job's ranks ran on, when known).
fn platform(hosts: Option<usize>) -> Platform {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    Platform {
        host: history::host_pattern(&host_name()),
        cpu: history::cpu_model(&cpuinfo),
        transport: transport(hosts),
    }
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
fn transport(hosts: Option<usize>) -> String {
    if hosts == Some(1) {
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
