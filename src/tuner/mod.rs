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
//! The search schedule and the instances of a key then advance alike on every rank: the tuner
//! assumes, as every tuner of SPMD programs does, that ranks which agreed to be at a key keep
//! calling it in step.

mod agree;
mod policy;
mod stats;

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use commtune_report::{CodeletEstimate, TuningData};

pub use self::policy::Search;
use self::policy::{Agreed, Candidate, Next, Plan};
pub use self::stats::Filter;
use crate::codelets::{self, Operation};
use crate::keys::{Entry, Table};
use crate::mpi::{self, Comm, HandleBits};
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
            search: Search::Racing,
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

/// Production calls timed (for the report and the drift watch): one in this many.
const SAMPLE_EVERY: u64 = 8;
/// Drift windows in a row beyond the threshold before a search reopens.
const DRIFT_STRIKES: u32 = 2;
/// Searches a key may reopen at most: drift cannot make the tuner thrash.
const MAX_REOPEN: u32 = 3;
/// Checkpoints finding different keys on different ranks before a key is given up.
const MAX_DISAGREEMENTS: u32 = 2;
/// Bounds of the spacing of checkpoints, in collective instances of the communicator.
const MIN_INTERVAL: u64 = 4;
const MAX_INTERVAL: u64 = 1024;
/// A search whose key is not called for this many instances of its communicator ends with the
/// best codelet so far, so that the communicator's other keys get their turn.
const STALL: u64 = 4096;

/// The state of one communicator (one lifetime of a handle: `epoch`).
struct CommTuning {
    epoch: u64,
    /// Collective instances on the communicator so far: the same count on every rank.
    instance: u64,
    next_check: u64,
    interval: u64,
    checks: u64,
    /// More than one rank and an intra-communicator (decided at first use).
    tunable: Option<bool>,
    private: Option<Comm>,
    /// The key being searched, and the instance of its latest call.
    active: Option<(&'static Entry, u64)>,
}

static EPOCHS: AtomicU64 = AtomicU64::new(1);

impl CommTuning {
    fn new() -> CommTuning {
        CommTuning {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            instance: 0,
            next_check: MIN_INTERVAL,
            interval: MIN_INTERVAL,
            checks: 0,
            tunable: None,
            private: None,
            active: None,
        }
    }

    /// The next checkpoint: `interval` with a deterministic jitter, so that checkpoints do not
    /// keep landing on the same key of a repeating pattern of several keys.
    fn schedule_check(&mut self, now: u64) {
        self.checks += 1;
        let mut x = self.checks.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 31;
        self.next_check = now + 1 + x % self.interval;
    }

    fn is_active(&self, entry: &Entry) -> bool {
        self.active.is_some_and(|(e, _)| std::ptr::eq(e, entry))
    }
}

struct CommSlot {
    state: Mutex<CommTuning>,
}

static COMMS: LazyLock<Table<usize, CommSlot>> = LazyLock::new(|| Table::new(1 << 12));

/// The application freed a communicator: its handle may come back for another one.
fn forget(bits: usize) {
    if let Some(slot) = COMMS.get(&bits) {
        *lock(&slot.state) = CommTuning::new();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One key's tuning state (held by its `keys::Entry`).
pub struct KeyTuning {
    epoch: u64,
    /// Calls of the key in this epoch of its communicator.
    instances: u64,
    phase: Phase,
    disagreements: u32,
    reopened: u32,
    searches: u32,
    /// Instances run as part of a search, all searches together.
    searched: u64,
    production_calls: u64,
    /// Clock ticks of all timed calls (the budget's denominator).
    ticks: u64,
    /// The latest decided search (for the report).
    decided: Option<Plan>,
    reason: Option<&'static str>,
}

enum Phase {
    Warmup,
    Searching(Box<SearchState>),
    Production(Production),
    Untuned,
}

struct Production {
    winner: usize,
    /// Key instance of the decision (drift checks count from it).
    since: u64,
    /// Sampled durations since the last drift check, and the first window's median.
    window: Vec<u64>,
    baseline: Option<f64>,
    strikes: u32,
}

struct SearchState {
    plan: Plan,
    /// Registry indices of this round's instances, and the position in it.
    schedule: Vec<usize>,
    position: usize,
    /// Samples per registry index.
    samples: Vec<(usize, Vec<f64>)>,
    /// Ticks spent per registry index (for the budget).
    spent: Vec<(usize, u64)>,
    /// Period timing: the instance waiting for the next entry to end its sample.
    pending: Option<(u64, usize, bool)>,
}

impl Default for KeyTuning {
    fn default() -> Self {
        KeyTuning {
            epoch: 0,
            instances: 0,
            phase: Phase::Warmup,
            disagreements: 0,
            reopened: 0,
            searches: 0,
            searched: 0,
            production_calls: 0,
            ticks: 0,
            decided: None,
            reason: None,
        }
    }
}

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
    /// Timed for the report (and the drift window in production).
    Timed,
    /// Counted only.
    Counted,
}

/// Runs one call of a tunable key.
pub fn run<C: Operation>(call: &C, entry: &'static Entry) -> c_int {
    let step = step_for(call, entry);
    let start = clock::now();
    if let Some(comm) = step.barrier {
        let _ = comm.barrier();
    }
    let config = runtime::config();
    if !config.delays.is_empty() {
        // Before the codelet: a late wake-up is absorbed by this collective, not the next one.
        let instance = lock(&entry.tuning).instances;
        if let Some(delay) = config.delay(C::OP, step.codelet, instance) {
            codelets::inject_delay(call, delay);
        }
    }
    let rc = codelets::execute(call, step.codelet);
    let ticks = clock::now().saturating_sub(start);
    let name = C::codelets()[step.codelet].name;
    if step.measure == Measure::Counted {
        entry.count(name);
    } else {
        entry.record(ticks, name);
        measured(entry, step, start, ticks);
    }
    rc
}

/// Books a measured call into the key's search or drift window.
fn measured(entry: &Entry, step: Step, start: u64, ticks: u64) {
    let mut key = lock(&entry.tuning);
    key.ticks += ticks;
    match (&mut key.phase, step.measure) {
        (Phase::Searching(s), Measure::Search { sample }) => {
            add(&mut s.spent, step.codelet, ticks);
            if runtime::config().tuning.timing == Timing::Period {
                s.pending = Some((start, step.codelet, sample));
            } else if sample {
                sample_of(&mut s.samples, step.codelet).push(ticks as f64);
            }
        }
        (Phase::Production(p), Measure::Timed) => p.window.push(ticks),
        _ => {}
    }
}

fn add(totals: &mut Vec<(usize, u64)>, codelet: usize, ticks: u64) {
    match totals.iter_mut().find(|(i, _)| *i == codelet) {
        Some((_, t)) => *t += ticks,
        None => totals.push((codelet, ticks)),
    }
}

fn sample_of(samples: &mut Vec<(usize, Vec<f64>)>, codelet: usize) -> &mut Vec<f64> {
    let at = match samples.iter().position(|(i, _)| *i == codelet) {
        Some(at) => at,
        None => {
            samples.push((codelet, Vec::new()));
            samples.len() - 1
        }
    };
    &mut samples[at].1
}

/// Decides what this call runs, taking the communicator-wide decisions due at this instance.
fn step_for<C: Operation>(call: &C, entry: &'static Entry) -> Step {
    let native = Step {
        codelet: 0,
        barrier: None,
        measure: Measure::Timed,
    };
    let user = call.comm();
    let slot = match COMMS.get(&user.bits()) {
        Some(slot) => slot,
        None => match COMMS.insert(
            user.bits(),
            CommSlot {
                state: Mutex::new(CommTuning::new()),
            },
        ) {
            Some(slot) => slot,
            None => return native,
        },
    };
    let mut comm = lock(&slot.state);
    let tunable = *comm.tunable.get_or_insert_with(|| {
        mpi::comm_size(user) > 1 && !mpi::is_intercomm(user) && mpi::watch(user, forget).is_ok()
    });
    let mut key = lock(&entry.tuning);
    if key.epoch != comm.epoch {
        *key = KeyTuning {
            epoch: comm.epoch,
            ..KeyTuning::default()
        };
    }
    key.instances += 1;
    let n = comm.instance;
    comm.instance += 1;
    if !tunable {
        key.reason = Some("a communicator of one rank or an intercommunicator");
        return native;
    }
    end_stalled_search(&mut comm, entry, n);
    if comm.is_active(entry) {
        comm.active = Some((entry, n));
        return search_step(&mut comm, &mut key, entry, n);
    }
    if comm.active.is_none() && n >= comm.next_check {
        checkpoint(call, entry, &mut comm, &mut key, n);
        if comm.is_active(entry) {
            return search_step(&mut comm, &mut key, entry, n);
        }
    }
    settled_step(&mut comm, &mut key, entry, call, n)
}

/// The step of a key that is not being searched: warm-up, production or untuned.
fn settled_step<C: Operation>(
    comm: &mut CommTuning,
    key: &mut KeyTuning,
    entry: &'static Entry,
    call: &C,
    n: u64,
) -> Step {
    let settings = runtime::config().tuning;
    let instances = key.instances;
    let Phase::Production(p) = &mut key.phase else {
        return Step {
            codelet: 0,
            barrier: None,
            measure: Measure::Timed,
        };
    };
    let (winner, since) = (p.winner, p.since);
    let due = instances > since && (instances - since) % settings.drift_interval == 0;
    if due && comm.active.is_none() {
        if let (Some(private), Some(ratio)) = (comm.private, drift_ratio(p)) {
            let reopen = match agree::drift(&private, ratio) {
                Ok(worst) if worst > 1.0 + settings.drift_threshold => {
                    p.strikes += 1;
                    p.strikes >= DRIFT_STRIKES
                }
                Ok(_) => {
                    p.strikes = 0;
                    false
                }
                Err(_) => false,
            };
            if reopen && key.reopened < MAX_REOPEN {
                key.reopened += 1;
                if start_search(call, comm, key, entry, n) {
                    return search_step(comm, key, entry, n);
                }
            }
        }
    }
    key.production_calls += 1;
    Step {
        codelet: winner,
        barrier: None,
        measure: if instances % SAMPLE_EVERY == 0 {
            Measure::Timed
        } else {
            Measure::Counted
        },
    }
}

/// The window's median over the baseline (the first window's median); None for the first.
fn drift_ratio(p: &mut Production) -> Option<f64> {
    let mut window = std::mem::take(&mut p.window);
    if window.is_empty() {
        return Some(1.0);
    }
    window.sort_unstable();
    let median = window[window.len() / 2] as f64;
    match p.baseline {
        Some(base) if base > 0.0 => Some(median / base),
        _ => {
            p.baseline = Some(median);
            Some(1.0)
        }
    }
}

/// A checkpoint: every rank is at communicator instance `n`.
fn checkpoint<C: Operation>(
    call: &C,
    entry: &'static Entry,
    comm: &mut CommTuning,
    key: &mut KeyTuning,
    n: u64,
) {
    let settings = runtime::config().tuning;
    let private = match comm.private {
        Some(p) => p,
        None => match mpi::private_comm(call.comm()) {
            Ok(p) => *comm.private.insert(p),
            Err(_) => {
                comm.tunable = Some(false);
                return;
            }
        },
    };
    let ready = matches!(key.phase, Phase::Warmup) && key.instances >= settings.warmup;
    let outcome = agree::checkpoint(&private, ready.then_some(entry.agree_hash));
    match outcome {
        Ok(agree::Checkpoint::Agreed) => {
            comm.interval = MIN_INTERVAL;
            start_search(call, comm, key, entry, n);
        }
        Ok(agree::Checkpoint::Disagreed) => {
            comm.interval = MIN_INTERVAL;
            key.disagreements += 1;
            if key.disagreements >= MAX_DISAGREEMENTS {
                key.phase = Phase::Untuned;
                key.reason = Some(
                    "ranks reach this call from different call sites or with different signatures",
                );
            }
        }
        Ok(agree::Checkpoint::Partial) => comm.interval = MIN_INTERVAL,
        Ok(agree::Checkpoint::Nothing) => comm.interval = (comm.interval * 2).min(MAX_INTERVAL),
        Err(_) => comm.tunable = Some(false),
    }
    comm.schedule_check(n);
}

/// Starts (or restarts) the search of `entry`'s key at this instance; false when only native
/// can run the call (the key then stays native).
fn start_search<C: Operation>(
    call: &C,
    comm: &mut CommTuning,
    key: &mut KeyTuning,
    entry: &'static Entry,
    n: u64,
) -> bool {
    let config = runtime::config();
    let facts = call.facts();
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
        key.phase = Phase::Production(production(0, key.instances));
        key.reason = Some("no codelet but native applies");
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
    comm.active = Some((entry, n));
    true
}

fn production(winner: usize, since: u64) -> Production {
    Production {
        winner,
        since,
        window: Vec::new(),
        baseline: None,
        strikes: 0,
    }
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

/// The next instance of the key being searched.
fn search_step(comm: &mut CommTuning, key: &mut KeyTuning, entry: &Entry, n: u64) -> Step {
    let settings = runtime::config().tuning;
    let now = clock::now();
    let Phase::Searching(s) = &mut key.phase else {
        return Step {
            codelet: 0,
            barrier: None,
            measure: Measure::Timed,
        };
    };
    if let Some((start, codelet, keep)) = s.pending.take() {
        if keep {
            sample_of(&mut s.samples, codelet).push(now.saturating_sub(start) as f64);
        }
    }
    if s.position == s.schedule.len() {
        let local: Vec<Agreed> = s
            .plan
            .candidates
            .iter()
            .map(|c| local_estimate(settings.filter, s, c.index))
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
                let Phase::Searching(done) = std::mem::replace(
                    &mut key.phase,
                    Phase::Production(production(winner, key.instances)),
                ) else {
                    unreachable!("matched Searching above")
                };
                key.decided = Some(done.plan);
                comm.active = None;
                comm.next_check = n + 1;
                key.production_calls += 1;
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
        eprintln!(
            "commtune[{rank}]: tune {} {}+{:#x}: {}",
            entry.op.name(),
            crate::site::file_name(&entry.site.object),
            entry.site.address,
            line()
        );
    }
}

/// `name=estimate±error` in microseconds of clock ticks, for traces.
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

/// This rank's estimate of a codelet: typical time and its standard error.
fn local_estimate(filter: Filter, s: &SearchState, codelet: usize) -> Agreed {
    let samples = s
        .samples
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

/// Ends the active search if its key stopped being called (same outcome on every rank: the
/// instance counts are shared).
fn end_stalled_search(comm: &mut CommTuning, entry: &Entry, n: u64) {
    let Some((active, last)) = comm.active else {
        return;
    };
    if std::ptr::eq(active, entry) || n - last < STALL {
        return;
    }
    let mut other = lock(&active.tuning);
    let winner = match &other.phase {
        Phase::Searching(s) => s.plan.winner(runtime::config().tuning.min_gain),
        _ => 0,
    };
    let instances = other.instances;
    if let Phase::Searching(s) = std::mem::replace(
        &mut other.phase,
        Phase::Production(production(winner, instances)),
    ) {
        other.decided = Some(s.plan);
    }
    other.reason = Some("search ended early: the call stopped repeating");
    comm.active = None;
    comm.next_check = n + 1;
}

/// The key's tuning as the report shows it (`names`: the operation's codelets; durations
/// converted with `ns_per_tick`).
pub fn report(key: &KeyTuning, names: &[&str], ns_per_tick: f64) -> TuningData {
    let warmup = runtime::config().tuning.warmup;
    let (phase, winner) = match &key.phase {
        Phase::Warmup => ("warmup", None),
        Phase::Searching(_) => ("search", None),
        Phase::Production(p) => ("production", Some(p.winner)),
        Phase::Untuned => ("untuned", None),
    };
    let reason = key.reason.map(String::from).or_else(|| match key.phase {
        Phase::Warmup if key.instances < warmup => Some(format!(
            "called {} times, fewer than COMMTUNE_WARMUP={warmup}",
            key.instances
        )),
        Phase::Warmup => Some("no checkpoint found every rank at this call".to_string()),
        _ => None,
    });
    let plan = match &key.phase {
        Phase::Searching(s) => Some(&s.plan),
        _ => key.decided.as_ref(),
    };
    let us = |ticks: f64| ticks * ns_per_tick * 1e-3;
    let codelets = plan.map_or_else(Vec::new, |plan| {
        plan.estimates
            .iter()
            .map(|(i, e)| CodeletEstimate {
                name: names[*i].to_string(),
                estimate_us: us(e.location),
                error_us: us(e.error),
            })
            .collect()
    });
    let saved_s = match (winner, plan) {
        (Some(w), Some(plan)) if w != 0 => match (plan.estimate(0), plan.estimate(w)) {
            (Some(native), Some(best)) => {
                (native.location - best.location) * key.production_calls as f64 * ns_per_tick * 1e-9
            }
            _ => 0.0,
        },
        _ => 0.0,
    };
    TuningData {
        phase: phase.to_string(),
        reason,
        winner: winner.map(|w| names[w].to_string()),
        search_instances: key.searched,
        searches: key.searches,
        rounds: plan.map_or(0, |p| p.rounds),
        codelets,
        saved_s,
    }
}
