//! The history store (COMMTUNE_HISTORY; the format is `commtune_history`'s): after MPI_Finalize,
//! rank 0 of a tuned job adds one file with what this job decided: its searches' decisions and
//! the predictions its self-check confirmed; and one file of every rank's halo decisions
//! (`commtune_history::halo`, gathered with the report: `halo::history`). It never fails the job: a problem is one line on
//! stderr. Every rank reads the store at MPI_Init (`tuner::knowledge`).

use std::time::SystemTime;

use commtune_history as history;
use commtune_history::halo::HaloEntry;
use commtune_report::Op;
use rustc_hash::FxHashSet;

use crate::config::Config;
use crate::runtime::{self, Process};
use crate::say::say;
use crate::tuner::knowledge;
use crate::{keys, tuner};

/// After MPI_Finalize, on rank 0: adds one entry per decided collective key and the ranks'
/// `halo` entries, each kind's file if it has any.
pub fn record(process: &Process, config: &Config, halo: &[HaloEntry]) {
    let Some(dir) = knowledge::store(config) else {
        return;
    };
    let entries = entries(process);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = history::file_name(&runtime::host_name(), std::process::id(), nanos);
    let written = [
        (!entries.is_empty()).then(|| history::write(&dir, &name, &entries)),
        (!halo.is_empty()).then(|| history::halo::write(&dir, &name, halo)),
    ];
    // One line even when both files fail (the same directory).
    if let Some(Err(e)) = written.into_iter().flatten().find(Result::is_err) {
        say!(
            "commtune: warning: cannot add to the history store {}: {e}",
            dir.display()
        );
    }
}

/// One entry per decided key (keys of several sites that share a tuner: once).
fn entries(process: &Process) -> Vec<history::Entry> {
    let config = runtime::config();
    let mut seen = FxHashSet::default();
    let mut entries = Vec::new();
    for entry in keys::entries() {
        if entry.op == Op::Halo || config.forced(entry.op).is_some() || entry.is_folded() {
            continue;
        }
        let Some(tuner::Decided {
            tuner,
            mut decision,
        }) = tuner::decided(entry)
        else {
            continue;
        };
        if !seen.insert(tuner) {
            continue;
        }
        decision.how = knowledge::how(decision.how, config);
        entries.push(knowledge::entry(entry, &decision, process));
    }
    entries
}
