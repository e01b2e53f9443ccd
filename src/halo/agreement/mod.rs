//! Agreement on the `neighbor` codelet: the only place where ranks talk about halo episodes.
//!
//! A halo episode is not a collective, so no point of it is one where every rank can wait for
//! every other. The application's own collective calls on the episode's communicator are
//! (MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv and MPI_Barrier, which the library intercepts; a
//! portable program must work whether a collective synchronises or not). At some of them, the
//! same ones on every rank (`Communicator::due`), the ranks reduce their proposals: the episode
//! each last closed on the communicator once it ran twice in a row at its site, with its identity
//! (site and signature ordinal) and instance count. If every rank proposes the same one at the
//! same instance, they exchange their message lists, pair sends with receives (`edges`), build
//! the graph, and switch at the same instance: the first that no rank has begun.
//!
//! Instances are counted by their messages, not by their key: an episode's key names the call
//! that completed it, which may differ between ranks and between instances (a Testany loop here,
//! a Testsome loop there), while every rank posts its side of the exchange once per instance. A
//! rank counts the episodes it closed on the communicator per message list, and the agreed
//! episode's instances from there on, whatever key they closed as. Under tuning the
//! trial alternates the collective with each rank's own codelet in pairs of instances until both
//! have COMMTUNE_HALO_SAMPLES samples; at a later agreement point the slowest rank's estimates of
//! the two are compared, and every rank keeps or drops the collective from the same instance. Each
//! communicator agrees on one episode at most; after a decision it stops checking.
//!
//! This module owns each communicator's agreement state and its agreement points;
//! `candidates` what a rank may propose, `proposal` the agreement itself, `trial` what follows.

mod candidates;
mod proposal;
mod trial;

pub use candidates::{closed, eligibility};
pub use trial::{
    broken, chosen, goes_on, sample, schedule_beginning_with, schedule_for, still_posting,
};

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use commtune_report::Op;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::codelets::halo::NEIGHBOR;
use crate::codelets::halo::neighbor::{Expected, Schedule};
use crate::config::Mode;
use crate::keys::Entry;
use crate::mpi::{self, HandleBits, MPI_Comm};
use crate::sync::lock;
use crate::{comms, runtime};

use proposal::propose;
use trial::evaluate;

/// Consecutive instances of an episode before a rank proposes it.
const STEADY: u64 = 2;
/// Agreement points are the application's collective calls number 1, 2, 4, 8, then every 16th.
const MAX_INTERVAL: u64 = 16;
/// Why a rank whose own messages pair gives up.
const PEERS_DIFFER: &str = "another rank's messages do not pair with its peers'";
/// The tag of the message-list exchange on the private communicator.
const LISTS_TAG: c_int = 0x6e62;
/// Message lists counted per communicator at most (bounded memory; a list first seen beyond
/// them is never proposed).
const MAX_LISTS: usize = 4096;

/// An episode on a communicator that could run as one collective, the latest at its site.
struct Candidate {
    entry: &'static Entry,
    identity: u64,
    steady: u64,
    messages: Vec<Expected>,
    /// Its messages' hash, which counts its instances.
    list: u64,
}

/// The agreement's state of one communicator (kept in its `comms` record).
#[derive(Default)]
struct CommAgreement {
    /// The number of the collective call being handled (in the record's count).
    collectives: u64,
    next_check: u64,
    interval: u64,
    /// By site; the site of the latest closed episode is what this rank proposes.
    candidates: HashMap<u64, Candidate>,
    /// Closed episodes per message list (`candidates::messages_hash`), for the first
    /// `MAX_LISTS` lists.
    instances: HashMap<u64, u64, FxBuildHasher>,
    latest: Option<u64>,
    /// The agreed episode under trial.
    trial: Option<&'static Entry>,
    /// No more agreement points (a decision was taken, or the communicator cannot have one).
    settled: bool,
    /// What the latest agreement point found, for the report.
    outcome: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Trial,
    Chosen,
    Rejected,
}

/// An agreed episode on this rank.
struct AgreedEpisode {
    entry: &'static Entry,
    schedule: Arc<Schedule>,
    /// Its messages' hash, and its instances this rank closed.
    list: u64,
    instances: u64,
    /// The first instance that may run the collective, and the first the decision applies to
    /// (before it, a trial alternates the collective with the ranks' own codelets in pairs of
    /// instances, so that both are measured in the same stretch of the run with every rank in
    /// the same mode).
    from: u64,
    decided_from: u64,
    phase: Phase,
    /// The trial's samples of the collective and of the rank's own codelet.
    samples: Vec<f64>,
    own_samples: Vec<f64>,
    broken: bool,
    /// Its communicator was freed.
    freed: bool,
}

/// Keyed by the entry's address: entries live for the whole process.
static USES: LazyLock<DashMap<usize, AgreedEpisode, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// Whether ranks may agree on `neighbor` (the same on every rank: it depends on the knobs and on
/// which MPI libraries are loaded). Asked at every collective, so a plain load once known.
#[inline]
pub fn may_agree() -> bool {
    const UNKNOWN: u8 = 0;
    const NO: u8 = 1;
    const YES: u8 = 2;
    static KNOWN: AtomicU8 = AtomicU8::new(UNKNOWN);
    match KNOWN.load(Ordering::Relaxed) {
        NO => false,
        YES => true,
        _ => {
            let config = runtime::config();
            let forced = config.forced(Op::Halo);
            let asked = forced == Some(NEIGHBOR)
                || (config.mode == Mode::Tune
                    && forced.is_none()
                    && config.halo_neighbor
                    && !config.excluded(Op::Halo, NEIGHBOR));
            let may = asked && mpi::sees_every_call();
            KNOWN.store(if may { YES } else { NO }, Ordering::Relaxed);
            may
        }
    }
}

fn forced() -> bool {
    runtime::config().forced(Op::Halo) == Some(NEIGHBOR)
}

impl CommAgreement {
    /// Collective call `number` of the communicator: whether it is an agreement point.
    fn due(&mut self, number: u64) -> bool {
        self.collectives = number;
        if self.settled || self.collectives < self.next_check {
            return false;
        }
        self.interval = (self.interval * 2).clamp(1, MAX_INTERVAL);
        self.next_check = self.collectives + self.interval;
        true
    }
}

/// What the agreement reads of this rank's episodes, from the halo layer that tracks and tunes
/// them.
#[derive(Clone, Copy)]
pub struct Episodes {
    /// Whether the calling thread's stream has an episode in progress (which may be an instance
    /// of any; `episode`).
    pub open: fn() -> bool,
    /// Whether this rank decided its own codelet for an episode key (under tuning, ranks propose
    /// an episode only then).
    pub settled: fn(&Entry) -> bool,
}

/// The application called a collective on `comm` (every rank of it does, in the same order);
/// `tuned`: the tuner runs it, and counts it in the communicator's collective calls (else this
/// does). Every collective call is counted while ranks may agree, even one MPI refused to tell
/// the library is freed: a rank that stopped counting would miss the agreement points its peers
/// reach.
#[inline]
pub fn at_collective(comm: MPI_Comm, episodes: Episodes, tuned: bool) {
    if may_agree() {
        count_collective(comm, episodes, tuned);
    }
}

#[cold]
fn count_collective(comm: MPI_Comm, episodes: Episodes, tuned: bool) {
    let bits = comm.bits();
    let record = comms::of(comm);
    let number = record.collectives.load(Ordering::Relaxed) + 1;
    if !tuned {
        record.collectives.store(number, Ordering::Relaxed);
    }
    let (due, trial) = {
        let mut c = state_of(record);
        (c.due(number), c.trial)
    };
    if !due {
        return;
    }
    if mpi::is_intercomm(comm) || mpi::comm_size(comm) < 2 {
        settle(
            bits,
            "its communicator has one rank, or is an intercommunicator",
        );
        return;
    }
    let Ok(private) = record.private(comm) else {
        settle(bits, comms::NO_PRIVATE);
        return;
    };
    let agreed = match trial {
        None => propose(bits, &private, episodes),
        Some(entry) => evaluate(bits, entry, &private, episodes),
    };
    if let Err(code) = agreed {
        settle(bits, &format!("MPI error {code} during the agreement"));
    }
}

/// The agreement's state of the communicator of `record`, made on first use.
fn state_of(record: &'static comms::Communicator) -> MutexGuard<'static, CommAgreement> {
    let state: &'static (dyn Any + Send + Sync) = *record
        .neighbor
        .get_or_init(|| Box::leak(Box::new(Mutex::new(CommAgreement::default()))));
    lock(
        state
            .downcast_ref()
            .expect("a communicator's neighbor slot holds the agreement's state only"),
    )
}

/// The agreement's state of the application's communicator `comm`, made on first use.
fn communicator(comm: MPI_Comm) -> MutexGuard<'static, CommAgreement> {
    state_of(comms::of(comm))
}

/// The agreement's state of the communicator handle `bits`, if it has one.
fn state(bits: usize) -> Option<MutexGuard<'static, CommAgreement>> {
    comms::of_bits(bits)
        .filter(|record| record.neighbor.get().is_some())
        .map(state_of)
}

fn settle(bits: usize, outcome: &str) {
    if let Some(mut c) = state(bits) {
        c.settled = true;
        c.outcome = Some(outcome.to_string());
    }
}

fn set_outcome(bits: usize, outcome: String) {
    if let Some(mut c) = state(bits) {
        c.outcome = Some(outcome);
    }
}

/// The application freed a communicator (`comms` hook): its graph too (every rank is inside
/// MPI_Comm_free), and its agreed episodes never run the collective again (a new communicator
/// may reuse the handle).
pub fn forget(bits: usize) {
    let Some(mut c) = state(bits) else {
        return;
    };
    explain(&c);
    *c = CommAgreement::default();
    drop(c);
    let mut graphs = Vec::new();
    for mut u in USES.iter_mut() {
        if u.schedule.comm().is_some_and(|c| c.bits() == bits) && !u.freed {
            u.freed = true;
            graphs.push(u.schedule.graph());
        }
    }
    graphs.into_iter().for_each(mpi::comm_free);
}

/// Before the report: each communicator's episodes that never ran the collective say why.
pub fn finalizing() {
    comms::all()
        .into_iter()
        .filter(|record| record.neighbor.get().is_some())
        .for_each(|record| explain(&state_of(record)));
}

/// Notes on `c`'s episodes that never ran the collective why they did not.
fn explain(c: &CommAgreement) {
    let other = c
        .candidates
        .values()
        .any(|k| USES.contains_key(&k.entry.id()));
    let why = c.outcome.clone().unwrap_or_else(|| {
        if other {
            return "the ranks agreed on another episode of its communicator (one at most)".into();
        }
        "the application made no MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv or MPI_Barrier on \
         the episode's communicator after the episode repeated (ranks agree only there)"
            .into()
    });
    for k in c.candidates.values() {
        if !USES.contains_key(&k.entry.id()) {
            k.entry
                .note(format!("halo codelet neighbor was not agreed: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_points_thin_out_to_every_16th_collective() {
        let mut c = CommAgreement::default();
        let due: Vec<u64> = (1..=70).filter(|&n| c.due(n)).collect();
        assert_eq!(due, [1, 2, 4, 8, 16, 32, 48, 64]);
        c.settled = true;
        assert!((71..171).all(|n| !c.due(n)));
    }
}
