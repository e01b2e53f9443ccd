//! The online tuner (COMMTUNE_MODE=tune): for each repeating collective key it finds the fastest
//! applicable codelet while the application runs and uses it from then on.
//!
//! Every rank must run the same codelet for the same instance of a collective (DESIGN
//! invariant 2). The MPI standard makes all ranks call the collectives of a communicator in the
//! same order, so each rank counts them (`CommTuning::instance`) and gets the same count. Every
//! decision is taken at an instance index all ranks compute alike, from one reduction on the
//! private communicator:
//! - checkpoints, at instances spaced by shared, deterministic intervals: each rank proposes the
//!   key it is at if that key has repeated (COMMTUNE_WARMUP); if all ranks propose the same key,
//!   its search starts there. Keys whose ranks disagree (different sites or signatures) are
//!   never tuned. One key per communicator is searched at a time.
//! - round ends: after each round of the search schedule the per-rank estimates are reduced
//!   (maximum over ranks) and the search policy prunes or decides.
//! - drift checks, every COMMTUNE_DRIFT_INTERVAL instances of a key in production.
//!
//! The search schedule and the instances of a key then advance alike on every rank: the tuner
//! assumes, as every tuner of SPMD programs does, that ranks which agreed to be at a key keep
//! calling it in step.

mod agree;
mod policy;
mod state;
mod stats;

use std::ffi::c_int;
use std::sync::atomic::Ordering;

pub use self::policy::{Agreed, Candidate, Next, Plan, Search};
use self::state::{
    CommSlot, CommTuning, KeyTuning, MAX_INTERVAL, MIN_INTERVAL, Phase, Production, SearchState,
    comm_slot, forget,
};
pub use self::state::{KeyTuner, LeakedCell, Mark, Timeline, TunerLink, lock, samples_of};
pub use self::stats::Filter;
use crate::codelets::{self, Operation};
use crate::keys::{Entry, Key, Measured};
use crate::mpi::{self, Comm};
use crate::say::say;
use crate::{clock, runtime};

/// How search samples are timed (COMMTUNE_TIMING).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Timing {
    /// The call's duration on this rank; the decision takes the maximum over ranks.
    Local,
    /// As `Local`, after a barrier on the private communicator (worst case; distorts overlap).
    Barrier,
    /// From one entry of the key to the next: a whole application iteration. The first sample
    /// after a codelet switch is discarded, so each codelet runs twice in a row per round.
    Period,
}

/// The tuner's knobs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Settings {
    pub search: Search,
    pub filter: Filter,
    pub timing: Timing,
    /// Samples per codelet at most (rounds of the search).
    pub samples: u32,
    /// Calls of a key before it may be tuned.
    pub warmup: u64,
    /// Largest share of a key's time the search may spend on codelets that are not the best.
    pub budget: f64,
    /// A codelet must beat native by more than this fraction of native's time.
    pub min_gain: f64,
    /// Instances of a key in production between drift checks.
    pub drift_interval: u64,
    /// Relative slow-down of the winner that counts as drift.
    pub drift_threshold: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            search: Search::Attributes,
            filter: Filter::Robust { nu: 5.0 },
            timing: Timing::Local,
            samples: 8,
            warmup: 3,
            budget: 1.0,
            min_gain: 0.02,
            drift_interval: 256,
            drift_threshold: 0.5,
        }
    }
}

/// Production calls timed for the report: one in this many.
const SAMPLE_EVERY: u64 = 8;
/// The drift watch times every one of the last calls before a drift check (never more than half
/// of the interval): a median of so many calls is steady on a noisy machine.
const DRIFT_WINDOW: u64 = 16;
/// Drift windows in a row beyond the threshold before a search reopens.
const DRIFT_STRIKES: u32 = 2;
/// Searches a key may reopen at most: drift cannot make the tuner thrash.
const MAX_REOPEN: u32 = 3;
/// Checkpoints finding different keys on different ranks before a key is given up.
const MAX_DISAGREEMENTS: u32 = 2;
/// A search whose key is not called for this many instances of its communicator ends with the
/// best codelet so far, so that the communicator's other keys get their turn.
const STALL: u64 = 4096;

/// What to run for one call and how to measure it.
struct Step {
    codelet: usize,
    barrier: Option<Comm>,
    measure: Measure,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// A search sample (local/barrier timing), or only the budget's time (period timing).
    Search { sample: bool },
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
            Measure::Search { .. } => Measured::Search,
            Measure::Sample => Measured::Sample,
            Measure::Timed | Measure::Window | Measure::Counted => Measured::Other,
        }
    }
}

impl Step {
    fn native(measure: Measure) -> Step {
        Step {
            codelet: 0,
            barrier: None,
            measure,
        }
    }
}

/// A call off the settled path: the call, its local key and the key's entry, the tuner of its
/// agreed identity, its communicator, the communicator's instance `n` and the key's call number
/// `k`.
struct At<'c, C> {
    call: &'c C,
    key: &'static Key,
    entry: &'static Entry,
    tuner: &'static KeyTuner,
    slot: &'static CommSlot,
    n: u64,
    k: u64,
}

/// How call `k` of a settled key is measured, with its next drift check at call `drift_at`:
/// the window before the check is timed whole, otherwise one call in eight.
fn sampled(k: u64, drift_at: u64) -> Measure {
    let interval = runtime::config().tuning.drift_interval;
    if k + DRIFT_WINDOW.min(interval / 2) >= drift_at {
        Measure::Window
    } else if k % SAMPLE_EVERY == 1 {
        // The first call too: a key called fewer than eight times still has a time.
        Measure::Sample
    } else {
        Measure::Counted
    }
}

/// Runs one call of a key whose entry is `entry` (its raw identity includes the communicator, so
/// the key's link to its communicator's slot never changes).
pub fn run<C: Operation>(call: &C, key: &'static Key, entry: &'static Entry) -> c_int {
    let slot = *key.tuner.comm.get_or_init(|| comm_slot(call.comm()));
    let epoch = slot.epoch.load(Ordering::Relaxed);
    let tuner = match key.tuner.current.get() {
        Some(t) if t.epoch == epoch => t,
        _ => linked(key, entry, slot, epoch),
    };
    // The application may call a communicator's collectives from one thread at a time only,
    // so these counters have one writer: a load and a store, no locked read-modify-write.
    let n = slot.instance.load(Ordering::Relaxed);
    slot.instance.store(n + 1, Ordering::Relaxed);
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
            measure: sampled(k, drift_at),
        }
    } else {
        slow_step(&At {
            call,
            key,
            entry,
            tuner,
            slot,
            n,
            k,
        })
    };
    let config = runtime::config();
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
    if !config.delays.is_empty() {
        let instance = tuner.instances.load(Ordering::Relaxed);
        if let Some(delay) = config.delay(C::OP, step.codelet, instance) {
            codelets::inject_delay(call, delay);
        }
    }
    let rc = codelets::execute(call, step.codelet);
    if timed {
        let end = clock::now();
        entry.record(
            end.saturating_sub(call_start),
            step.codelet,
            step.measure.kind(),
        );
        measured(tuner, &step, k, start, end.saturating_sub(start));
    } else {
        entry.count(step.codelet);
    }
    rc
}

/// The tuner of `key`'s agreed identity on its communicator in epoch `epoch`, linked to the key
/// (and to its entry, for the report).
#[cold]
fn linked(key: &Key, entry: &'static Entry, slot: &CommSlot, epoch: u64) -> &'static KeyTuner {
    let t = lock(&slot.state).key(key.agree_hash(), epoch);
    key.tuner.current.set(t);
    entry.report_tuner(t);
    t
}

/// Books measured call `k` into the key's search or drift window.
fn measured(tuner: &KeyTuner, step: &Step, k: u64, start: u64, ticks: u64) {
    let key = &mut *lock(&tuner.state);
    key.ticks += ticks;
    match (&mut key.phase, step.measure) {
        (Phase::Searching(s), Measure::Search { sample }) => {
            s.add_spent(step.codelet, ticks);
            if runtime::config().tuning.timing == Timing::Period {
                s.pending = Some((start, step.codelet, sample, k));
            } else if sample {
                s.samples_of(step.codelet).push(ticks as f64);
                key.timeline.push(Mark::Sample {
                    call: k,
                    codelet: step.codelet,
                    ticks: ticks as f64,
                });
            }
        }
        (Phase::Production(p), Measure::Window) => p.window.push(ticks),
        _ => {}
    }
}

/// A call off the settled path: warm-up, checkpoints, search steps, drift checks.
fn slow_step<C: Operation>(at: &At<C>) -> Step {
    let (slot, tuner, n, k) = (at.slot, at.tuner, at.n, at.k);
    let mut comm = lock(&slot.state);
    let mut key = lock(&tuner.state);
    let tunable = *comm.tunable.get_or_insert_with(|| {
        // Every communicator is watched, tunable or not: when it is freed, its handle may come
        // back for a communicator of another size on some ranks only. Whether it is tunable
        // depends only on what every rank sees alike.
        let user = at.call.comm();
        let _ = mpi::watch(user, forget);
        mpi::comm_size(user) > 1 && !mpi::is_intercomm(user)
    });
    if !tunable {
        slot.disable(&mut comm);
        key.reason = Some("a communicator of one rank or an intercommunicator");
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
        if comm.is_active(tuner) {
            return search_step(at, &mut comm, &mut key);
        }
    }
    if k >= tuner.drift_at.load(Ordering::Relaxed)
        && comm.active.is_none()
        && let Some(step) = drift_check(at, &mut comm, &mut key)
    {
        return step;
    }
    let drift_at = tuner.drift_at.load(Ordering::Relaxed);
    match &key.phase {
        Phase::Production(p) => Step {
            codelet: p.winner,
            barrier: None,
            measure: sampled(k, drift_at),
        },
        Phase::Untuned => Step::native(sampled(k, drift_at)),
        _ => Step::native(Measure::Timed),
    }
}

/// A drift check of a key in production (every rank is at the same call of it). Returns the
/// search step when the search reopens.
fn drift_check<C: Operation>(
    at: &At<C>,
    comm: &mut CommTuning,
    key: &mut KeyTuning,
) -> Option<Step> {
    let settings = runtime::config().tuning;
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    at.tuner
        .drift_at
        .store(at.k + settings.drift_interval, Ordering::Relaxed);
    let ratio = drift_ratio(p);
    let mean = agree::drift(&comm.private?, ratio).ok()?;
    if mean > 1.0 + settings.drift_threshold {
        p.strikes += 1;
    } else {
        p.strikes = 0;
    }
    trace(at.entry, || {
        format!("drift check: mean ratio {mean:.2}, strikes {}", p.strikes)
    });
    let reopen = p.strikes >= DRIFT_STRIKES && key.reopened < MAX_REOPEN;
    key.timeline.push(Mark::Drift {
        call: at.k,
        ratio: mean,
        reopened: reopen,
    });
    if !reopen {
        return None;
    }
    key.reopened += 1;
    start_search(at, comm, key).then(|| search_step(at, comm, key))
}

/// The window's median over the baseline (the first window's median).
fn drift_ratio(p: &mut Production) -> f64 {
    let mut window = std::mem::take(&mut p.window);
    if window.is_empty() {
        return 1.0;
    }
    window.sort_unstable();
    let median = window[window.len() / 2] as f64;
    match p.baseline {
        Some(base) if base > 0.0 => median / base,
        _ => {
            p.baseline = Some(median);
            1.0
        }
    }
}

/// A checkpoint: every rank is at communicator instance `n`.
fn checkpoint<C: Operation>(at: &At<C>, comm: &mut CommTuning, key: &mut KeyTuning) {
    let settings = runtime::config().tuning;
    let private = match comm.private {
        Some(p) => p,
        None => match mpi::private_comm(at.call.comm()) {
            Ok(p) => *comm.private.insert(p),
            Err(_) => return at.slot.disable(comm),
        },
    };
    let ready = matches!(key.phase, Phase::Warmup) && at.k >= settings.warmup;
    match agree::checkpoint(&private, ready.then_some(at.key.agree_hash())) {
        Ok(agree::Checkpoint::Agreed) => {
            comm.interval = MIN_INTERVAL;
            start_search(at, comm, key);
        }
        Ok(agree::Checkpoint::Disagreed) => {
            comm.interval = MIN_INTERVAL;
            key.disagreements += 1;
            if key.disagreements >= MAX_DISAGREEMENTS {
                key.reason = Some(
                    "ranks reach this call from different call sites or with different signatures",
                );
                at.tuner.settle(key, 0, Phase::Untuned, u64::MAX);
            }
        }
        Ok(agree::Checkpoint::Partial) => {
            comm.interval = MIN_INTERVAL;
            key.partial += 1;
        }
        Ok(agree::Checkpoint::Nothing) => comm.interval = (comm.interval * 2).min(MAX_INTERVAL),
        Err(_) => return at.slot.disable(comm),
    }
    at.slot.schedule_check(comm, at.n);
}

/// Starts (or restarts) the search of the key at this call; false when only native can run the
/// call (the key then settles on native).
fn start_search<C: Operation>(at: &At<C>, comm: &mut CommTuning, key: &mut KeyTuning) -> bool {
    let config = runtime::config();
    let facts = at.call.facts();
    let candidates: Vec<Candidate> = C::codelets()
        .iter()
        .enumerate()
        .filter(|(i, c)| c.unmet(&facts).is_none() && !config.excluded(C::OP, *i))
        .map(|(index, c)| Candidate {
            index,
            partners: c.attributes.partners,
            collectives: c.attributes.uses_collectives,
        })
        .collect();
    if candidates.len() <= 1 {
        key.reason = Some("no codelet but native applies");
        let production = Phase::Production(Production::new(0));
        at.tuner.settle(key, 0, production, u64::MAX);
        return false;
    }
    let plan = Plan::new(config.tuning.search, candidates, config.tuning.samples);
    let schedule = schedule(&plan);
    key.phase = Phase::Searching(Box::new(SearchState {
        plan,
        schedule,
        position: 0,
        samples: Vec::new(),
        spent: Vec::new(),
        pending: None,
    }));
    key.reason = None;
    key.searches += 1;
    key.timeline.push(Mark::Search {
        call: at.k,
        search: key.searches,
    });
    at.tuner.unsettle();
    at.slot.set_active(comm, Some((at.tuner, at.n)));
    true
}

/// One round: every candidate once (twice in a row with period timing, the first discarded).
fn schedule(plan: &Plan) -> Vec<usize> {
    let repeat = if runtime::config().tuning.timing == Timing::Period {
        2
    } else {
        1
    };
    plan.candidates
        .iter()
        .flat_map(|c| std::iter::repeat_n(c.index, repeat))
        .collect()
}

/// The next call of the key being searched.
fn search_step<C>(at: &At<C>, comm: &mut CommTuning, key: &mut KeyTuning) -> Step {
    let (entry, tuner, slot, n, k) = (at.entry, at.tuner, at.slot, at.n, at.k);
    let settings = runtime::config().tuning;
    let now = clock::now();
    let Phase::Searching(s) = &mut key.phase else {
        return Step::native(Measure::Timed);
    };
    if let Some((start, codelet, true, call)) = s.pending.take() {
        let ticks = now.saturating_sub(start) as f64;
        s.samples_of(codelet).push(ticks);
        key.timeline.push(Mark::Sample {
            call,
            codelet,
            ticks,
        });
    }
    if s.position == s.schedule.len() {
        let local: Vec<Agreed> = s
            .plan
            .candidates
            .iter()
            .map(|c| local_estimate(settings.filter, &s.samples, c.index))
            .collect();
        let wasted = wasted_share(s, key.ticks);
        let next = match comm.private.map(|p| agree::round(&p, &local, wasted)) {
            Some(Ok((agreed, worst_wasted))) => {
                trace(entry, || {
                    format!(
                        "round {}: local {} agreed {}",
                        s.plan.rounds + 1,
                        estimates(entry, &s.plan.candidates, &local),
                        estimates(entry, &s.plan.candidates, &agreed)
                    )
                });
                s.plan
                    .after_round(&agreed, worst_wasted > settings.budget, settings.min_gain)
            }
            _ => Next::Decide(0),
        };
        match next {
            Next::Round => {
                s.schedule = schedule(&s.plan);
                s.position = 0;
            }
            Next::Decide(winner) => {
                trace(entry, || {
                    format!("decided {}", codelets::names(entry.op)[winner])
                });
                let phase = Phase::Production(Production::new(winner));
                if let Phase::Searching(done) = std::mem::replace(&mut key.phase, Phase::Untuned) {
                    key.decided = Some(done.plan);
                }
                key.timeline.push(Mark::Decision { call: k, winner });
                tuner.settle(key, winner, phase, k + settings.drift_interval);
                slot.set_active(comm, None);
                slot.next_check.store(n + 1, Ordering::Relaxed);
                return Step {
                    codelet: winner,
                    barrier: None,
                    measure: Measure::Timed,
                };
            }
        }
    }
    let codelet = s.schedule[s.position];
    // With period timing the first of the two instances only ends the previous codelet's sample.
    let sample = settings.timing != Timing::Period || s.position % 2 == 1;
    s.position += 1;
    key.searched += 1;
    Step {
        codelet,
        barrier: if settings.timing == Timing::Barrier {
            comm.private
        } else {
            None
        },
        measure: Measure::Search { sample },
    }
}

/// With COMMTUNE_VERBOSE=2, prints a line about the tuning of `entry`'s key.
fn trace(entry: &Entry, line: impl FnOnce() -> String) {
    if runtime::config().verbose >= 2 {
        let rank = runtime::process().map_or(-1, |p| i64::from(p.rank));
        say!(
            "commtune[{rank}]: tune {} {}+{:#x}: {}",
            entry.op.name(),
            crate::site::file_name(&entry.site.object),
            entry.site.address,
            line()
        );
    }
}

/// `name=estimate±error` in microseconds, for traces.
fn estimates(entry: &Entry, candidates: &[Candidate], values: &[Agreed]) -> String {
    let names = codelets::names(entry.op);
    let us = clock::ns_per_tick() * 1e-3;
    candidates
        .iter()
        .zip(values)
        .map(|(c, v)| {
            format!(
                "{}={:.0}±{:.0}",
                names[c.index],
                v.location * us,
                v.error * us
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// This rank's estimate of a codelet from its samples (per codelet): typical time and its
/// standard error.
pub fn local_estimate(filter: Filter, samples: &[(usize, Vec<f64>)], codelet: usize) -> Agreed {
    let samples = samples
        .iter()
        .find(|(i, _)| *i == codelet)
        .map_or(&[][..], |(_, v)| v.as_slice());
    match stats::estimate(filter, samples) {
        Some(e) => Agreed {
            location: e.location,
            error: e.spread / (samples.len() as f64).sqrt(),
        },
        None => Agreed::default(),
    }
}

/// Share of the key's time spent on codelets other than the current leader.
fn wasted_share(s: &SearchState, key_ticks: u64) -> f64 {
    let leader = s
        .plan
        .estimates
        .iter()
        .min_by(|a, b| a.1.location.total_cmp(&b.1.location))
        .map(|(i, _)| *i);
    let wasted: u64 = s
        .spent
        .iter()
        .filter(|(i, _)| Some(*i) != leader)
        .map(|(_, t)| t)
        .sum();
    if key_ticks == 0 {
        0.0
    } else {
        wasted as f64 / key_ticks as f64
    }
}

/// Ends the active search if its key stopped being called (the same outcome on every rank: the
/// instance counts are shared).
fn end_stalled_search(slot: &CommSlot, comm: &mut CommTuning, tuner: &KeyTuner, n: u64) {
    let Some((active, last)) = comm.active else {
        return;
    };
    if std::ptr::eq(active, tuner) || n - last < STALL {
        return;
    }
    let mut other = lock(&active.state);
    let k = active.instances.load(Ordering::Relaxed);
    let winner = match &other.phase {
        Phase::Searching(s) => s.plan.winner(runtime::config().tuning.min_gain),
        _ => 0,
    };
    if let Phase::Searching(s) = std::mem::replace(&mut other.phase, Phase::Untuned) {
        other.decided = Some(s.plan);
    }
    other.timeline.push(Mark::Decision { call: k, winner });
    other.reason = Some("search ended early: the call stopped repeating");
    let drift_at = k + runtime::config().tuning.drift_interval;
    let production = Phase::Production(Production::new(winner));
    active.settle(&mut other, winner, production, drift_at);
    slot.set_active(comm, None);
    slot.next_check.store(n + 1, Ordering::Relaxed);
}
