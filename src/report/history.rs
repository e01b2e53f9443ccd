//! The history store (COMMTUNE_HISTORY; the format is `commtune_history`'s): after MPI_Finalize,
//! rank 0 of a tuned job adds one file with what this job's searches decided. It never fails
//! the job: a problem is one line on stderr. (Nothing reads the store in the library yet: the
//! prediction that will, issue 12, reads it then; `commtune history` lists it.)

use std::path::PathBuf;
use std::time::SystemTime;

use commtune_history::{self as history, Estimate, How, Platform};
use commtune_report::{Op, RankData};
use commtune_tune::classes::class_name;
use rustc_hash::FxHashSet;

use super::host_name;
use crate::config::{Config, HistoryTarget, Mode};
use crate::runtime::Process;
use crate::say::say;
use crate::{clock, codelets, keys, tuner};

/// The store's directory, if this job writes one.
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

/// After MPI_Finalize, on rank 0 (`ranks`: every rank's report data): adds one entry per key
/// whose search decided, if there is any.
pub fn record(ranks: &[RankData], process: &Process, config: &Config) {
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
    if let Err(e) = history::write(&dir, &name, &entries) {
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
            how: if config.calibrate {
                How::Calibrate
            } else {
                How::Search
            },
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
