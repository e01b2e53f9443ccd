//! The online tuner (COMMTUNE_MODE=tune): for each repeating collective key it finds the fastest
//! applicable codelet while the application runs and uses it from then on.
//!
//! Every rank must run the same codelet for the same instance of a collective (ARCHITECTURE.md,
//! invariant 2). The MPI standard makes all ranks call the collectives of a communicator in the
//! same order, so each rank counts them (`CommTunerState::instance`) and gets the same count. Every
//! decision is taken at an instance index all ranks compute alike, from one reduction on the
//! private communicator:
//! - checkpoints, at instances spaced by shared, deterministic intervals: each rank proposes the
//!   key it is at if that key has repeated (COMMTUNE_WARMUP); the reduction is finished
//!   `checkpoints::FINISH_AFTER` instances later, and if all ranks proposed the same key, its
//!   search (or its prediction from the history) starts there. Keys whose ranks disagree (different sites or signatures) are
//!   never tuned. One key per communicator is searched at a time.
//! - round ends: after each round of the search schedule the per-rank estimates are reduced
//!   (maximum over ranks) and the search policy prunes or decides.
//! - drift checks, every COMMTUNE_DRIFT_INTERVAL instances of a key in production.
//!
//! The search schedule and the instances of a key then advance alike on every rank: the tuner
//! assumes, as every tuner of SPMD programs does, that ranks which agreed to be at a key keep
//! calling it in step.

mod consensus;
mod drift;
pub mod knowledge;
mod search;
mod state;
mod trace;

use std::any::Any;
use std::ffi::c_int;
use std::ops::Deref;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use commtune_report::TuningData;
use commtune_tune::check;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::codelets::{self, Operation};
use crate::keys::{Entry, Key, Measured};
use crate::mpi::{self, Comm};
use crate::sync::lock;
use crate::{clock, comms, runtime};

use self::drift::drift_check;
use self::search::{checkpoint, end_stalled_search, finish_checkpoint, search_step};
use self::state::{CommTuner, Linked, Phase, Place, Tuner, TunerLink, comm_tuner};
#[cfg(test)]
pub use self::state::{DISMISSED, KEPT};
pub use self::state::{
    Decision, VERIFYING, confirmed_estimate, forget as comm_freed, prediction_stands,
    safety_net_holds, safety_net_settles, verifying,
};

/// What to run for one call and how to measure it.
struct Step {
    codelet: usize,
    barrier: Option<Comm>,
    measure: Measure,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// A call of a search (the `Sampler` knows which of them give samples).
    Search,
    /// Timed for the report.
    Timed,
    /// Timed for the report as one of the calls in eight that stand for the untimed ones.
    Sample,
    /// Timed for the report and for the drift window of a key in production.
    Window,
    /// Counted only.
    Counted,
}

impl Measure {
    /// What the key's report makes of the call's time.
    fn kind(self) -> Measured {
        match self {
            Measure::Search => Measured::Search,
            Measure::Sample => Measured::Sample,
            Measure::Timed | Measure::Window | Measure::Counted => Measured::Other,
        }
    }
}

impl Step {
    fn native(measure: Measure) -> Step {
        Step {
            codelet: codelets::NATIVE,
            barrier: None,
            measure,
        }
    }
}

/// A call off the settled path: the call and its local key, and where it is (`Place`: the key's
/// entry, the tuner of its agreed identity, its communicator, the communicator's instance `n`
/// and the key's call number `k`), which its fields read through.
struct SlowCall<'c, C> {
    call: &'c C,
    key: &'static Key,
    place: Place,
}

impl<C> Deref for SlowCall<'_, C> {
    type Target = Place;

    fn deref(&self) -> &Place {
        &self.place
    }
}

/// How call `k` of a settled key is measured, with the window before its next drift check
/// starting at call `window_at`: the window is timed whole, otherwise one call in eight (every
/// call when COMMTUNE_TRACE records them, so that none is estimated).
fn sampled(k: u64, window_at: u64) -> Measure {
    if k >= window_at {
        Measure::Window
    } else if k % check::SAMPLE_EVERY == 1 {
        // The first call too: a key called fewer than eight times still has a time.
        Measure::Sample
    } else if trace::on() {
        Measure::Timed
    } else {
        Measure::Counted
    }
}

/// Runs one call of a key whose entry is `entry` (its raw identity includes the communicator, so
/// the key's link to its communicator's slot never changes).
/// Inlined into each entry point: when this change's drift checks grew the crate, LLVM stopped
/// inlining it by itself, and the settled allreduce took 25 more instructions a call (callgrind,
/// `scripts/bench-instructions`: 332 over native against 307).
#[inline]
pub fn run<C: Operation>(call: &C, key: &'static Key, entry: &'static Entry) -> c_int {
    let link = link_of(key);
    let slot = *link.comm.get_or_init(|| comm_tuner(call.comm()));
    let epoch = slot.record.epoch.load(Ordering::Relaxed);
    let tuner = match link.current.get() {
        Some(l) if l.tuner.epoch == epoch && l.agree_hash == key.agree_hash() => l.tuner,
        _ => linked(key, link, entry, slot, epoch),
    };
    // The application may call a communicator's collectives from one thread at a time only,
    // so these counters have one writer: a load and a store, no locked read-modify-write.
    let n = slot.record.collectives.load(Ordering::Relaxed);
    slot.record.collectives.store(n + 1, Ordering::Relaxed);
    let k = tuner.instances.load(Ordering::Relaxed) + 1;
    tuner.instances.store(k, Ordering::Relaxed);
    let settled = tuner.settled.load(Ordering::Relaxed);
    let drift_at = tuner.drift_at.load(Ordering::Relaxed);
    // The settled path: every input is the same on every rank at this instance.
    let step = if settled != 0
        && k < drift_at
        && (slot.searching.load(Ordering::Relaxed) || n < slot.next_check.load(Ordering::Relaxed))
    {
        Step {
            codelet: settled as usize - 1,
            barrier: None,
            measure: sampled(k, tuner.window_at.load(Ordering::Relaxed)),
        }
    } else {
        slow_step(&SlowCall {
            call,
            key,
            place: Place {
                entry,
                tuner,
                slot,
                n,
                k,
            },
        })
    };
    let timed = step.measure != Measure::Counted;
    let start = if timed { clock::now() } else { 0 };
    // The call's own time leaves out the barrier of barrier timing: the report compares it
    // with production calls, which have none.
    let call_start = match step.barrier {
        Some(comm) => {
            let _ = comm.barrier();
            clock::now()
        }
        None => start,
    };
    codelets::inject_delay(call, step.codelet, k);
    let rc = codelets::execute(call, step.codelet);
    if timed {
        let end = clock::now();
        entry.record(
            end.saturating_sub(call_start),
            step.codelet,
            step.measure.kind(),
        );
        measured(tuner, &step, start, call_start, end);
        if trace::on() {
            let kind = match step.measure {
                Measure::Search => trace::Kind::Search,
                _ if tuner.settled.load(Ordering::Relaxed) != 0 => trace::Kind::Production,
                _ => trace::Kind::Warmup,
            };
            trace::record::<C>(trace::Instance {
                entry,
                agree_hash: key.agree_hash(),
                k,
                codelet: step.codelet as u8,
                kind,
                start,
                call_start,
                end,
            });
        }
    } else {
        entry.count(step.codelet);
    }
    rc
}

/// MPI_Finalize (every rank is in it): completes the checkpoints still in flight, which MPI
/// must not be left holding.
pub fn finalizing() {
    for record in comms::records() {
        if let Some(slot) = record
            .tuner
            .get()
            .and_then(|s| s.downcast_ref::<CommTuner>())
        {
            drop(lock(&slot.state).started.take());
        }
    }
}

/// What the tuner keeps with `key`: made at its first tuned call.
#[inline]
fn link_of(key: &'static Key) -> &'static TunerLink {
    let link: &'static (dyn Any + Send + Sync) = *key
        .tuner
        .get_or_init(|| Box::leak(Box::new(TunerLink::default())));
    link.downcast_ref()
        .expect("a key's tuner slot holds the tuner's link only")
}

/// The tuners that report each entry (by address), set off the settled path.
static REPORTED: LazyLock<DashMap<usize, &'static Tuner, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// The tuner of `key`'s agreed identity on its communicator in epoch `epoch`, linked to the key
/// (and to its entry, for the report, unless the entry holds calls of many identities).
#[cold]
fn linked(
    key: &Key,
    link: &TunerLink,
    entry: &'static Entry,
    slot: &CommTuner,
    epoch: u64,
) -> &'static Tuner {
    trace::arm();
    let agree_hash = key.agree_hash();
    let now = slot.record.collectives.load(Ordering::Relaxed);
    let tuner = lock(&slot.state).key(agree_hash, epoch, now);
    link.current
        .set(Box::leak(Box::new(Linked { agree_hash, tuner })));
    if !entry.is_folded() {
        REPORTED.insert(entry.id(), tuner);
    }
    tuner
}

/// The report's view of `entry`'s tuning (`names`: its operation's codelets), if a tuner ran it.
pub fn report(entry: &Entry, names: &[&str], ns_per_tick: f64) -> Option<TuningData> {
    let tuner = *REPORTED.get(&entry.id())?;
    Some(tuner.report(names, ns_per_tick))
}

/// What a key decided (`decided`).
pub struct Decided {
    /// Identifies the tuner: keys of several sites may share one.
    pub tuner: usize,
    pub decision: Decision,
}

/// What `entry`'s key decided, if it is in production after a search or a confirmed
/// prediction (for the history store; read after MPI_Finalize, off every call's path).
pub fn decided(entry: &Entry) -> Option<Decided> {
    let tuner = *REPORTED.get(&entry.id())?;
    let decision = tuner.decided(clock::ns_per_tick() * 1e-3)?;
    Some(Decided {
        tuner: std::ptr::from_ref(tuner) as usize,
        decision,
    })
}

/// Books a timed call (entered at `start`, run from `call_start` after its barrier to `end`)
/// into the key's search or drift window.
fn measured(tuner: &Tuner, step: &Step, start: u64, call_start: u64, end: u64) {
    let key = &mut *lock(&tuner.state);
    // A production sample stands for the calls left untimed around it (a traced run times
    // those too): the key's time, the budget's denominator, is the same traced or not.
    let weight = match step.measure {
        Measure::Sample if !trace::on() => check::SAMPLE_EVERY,
        _ => 1,
    };
    key.ticks += weight * end.saturating_sub(start);
    key.slowest_call = key.slowest_call.max(end.saturating_sub(start));
    match (&mut key.phase, step.measure) {
        (Phase::Searching(s), Measure::Search) => {
            s.ran(call_start, end, end.saturating_sub(start));
        }
        (Phase::Production(p), Measure::Window) => {
            p.window_start.get_or_insert(call_start);
            p.window.push(end.saturating_sub(call_start));
        }
        (Phase::Warmup, _) => key.tail.push(end.saturating_sub(start)),
        _ => {}
    }
}

/// A call off the settled path: warm-up, checkpoints, search steps, drift checks.
fn slow_step<C: Operation>(at: &SlowCall<C>) -> Step {
    let (slot, tuner, n, k) = (at.slot, at.tuner, at.n, at.k);
    let mut comm = lock(&slot.state);
    // Before the key's lock: the checkpoint may have been this key's.
    finish_checkpoint(&mut comm, n);
    let mut key = lock(&tuner.state);
    let tunable = *comm.tunable.get_or_insert_with(|| {
        // Whether it is tunable depends only on what every rank sees alike. (Every communicator
        // is watched through its `comms` record, tunable or not: when it is freed, its handle
        // may come back for a communicator of another size on some ranks only.)
        let user = at.call.comm();
        if mpi::comm_size(user) > 1 && !mpi::is_intercomm(user) {
            Ok(())
        } else {
            Err("a communicator of one rank or an intercommunicator")
        }
    });
    if let Err(reason) = tunable {
        slot.disable(&mut comm, reason);
        key.reason = Some(reason);
        tuner.settle(&mut key, 0, Phase::Untuned, u64::MAX);
        return Step::native(sampled(k, u64::MAX));
    }
    end_stalled_search(slot, &mut comm, tuner, n);
    if comm.is_active(tuner) {
        slot.set_active(&mut comm, Some((tuner, n)));
        return search_step(at, &mut comm, &mut key);
    }
    if comm.active.is_some()
        && matches!(key.phase, Phase::Warmup)
        && k >= runtime::config().tuning.warmup
    {
        key.waited += 1;
    }
    if comm.active.is_none() && n >= slot.next_check.load(Ordering::Relaxed) {
        checkpoint(at, &mut comm, &mut key);
    }
    if k >= tuner.drift_at.load(Ordering::Relaxed)
        && comm.active.is_none()
        && let Some(step) = drift_check(at, &mut comm, &mut key)
    {
        return step;
    }
    let window_at = tuner.window_at.load(Ordering::Relaxed);
    match &key.phase {
        Phase::Production(p) => Step {
            codelet: p.running(),
            barrier: None,
            measure: sampled(k, window_at),
        },
        Phase::Untuned => Step::native(sampled(k, window_at)),
        _ => Step::native(Measure::Timed),
    }
}
