//! What the tuner remembers per communicator and per key. The settled path reads only atomics;
//! everything else changes under the communicator's or the key's lock, in the slow path.
//!
//! A key's tuning state belongs to its *agreed* identity (site, operation, signature: what every
//! rank can name alike) on one lifetime of a communicator, not to a local `keys::Entry`: local
//! details that legally differ between ranks (handles of datatypes created per call, an
//! allgatherv's displacements) split entries on one rank only, and must not split the tuning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use commtune_report::{Event, TIMELINE_EVENTS, TuningData};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use super::policy::Plan;
use crate::mpi::{Comm, HandleBits, MPI_Comm};
use crate::runtime;

/// Bounds of the spacing of checkpoints, in collective instances of the communicator: a
/// communicator whose checkpoints keep finding nothing to tune is checked ever more rarely.
pub const MIN_INTERVAL: u64 = 4;
pub const MAX_INTERVAL: u64 = 1 << 16;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A reference to a value that lives until the process ends, replaceable without a lock.
pub struct LeakedCell<T: 'static>(AtomicPtr<T>);

impl<T: 'static> Default for LeakedCell<T> {
    fn default() -> Self {
        LeakedCell(AtomicPtr::new(std::ptr::null_mut()))
    }
}

impl<T: Sync + 'static> LeakedCell<T> {
    pub fn new(value: &'static T) -> Self {
        LeakedCell(AtomicPtr::new(value as *const T as *mut T))
    }

    pub fn get(&self) -> Option<&'static T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: the cell only ever holds null or a pointer taken from a `&'static T` (a leaked
        // value that is never freed), so a non-null pointer is valid for the whole process.
        unsafe { p.as_ref() }
    }

    pub fn set(&self, value: &'static T) {
        self.0.store(value as *const T as *mut T, Ordering::Release);
    }

    pub fn clear(&self) {
        self.0.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// One communicator handle. `epoch` changes when the application frees the communicator, so a
/// handle value reused for another communicator starts afresh (and so do its keys).
pub struct CommSlot {
    pub epoch: AtomicU64,
    /// Collective instances on the communicator so far: the same count on every rank.
    pub instance: AtomicU64,
    /// The instance of the next checkpoint (u64::MAX: never).
    pub next_check: AtomicU64,
    /// A key of this communicator is being searched (checkpoints wait).
    pub searching: AtomicBool,
    pub state: Mutex<CommTuning>,
}

pub struct CommTuning {
    pub interval: u64,
    pub checks: u64,
    /// More than one rank and an intra-communicator (decided at first use).
    pub tunable: Option<bool>,
    pub private: Option<Comm>,
    /// The key being searched, and the communicator instance of its latest call.
    pub active: Option<(&'static KeyTuner, u64)>,
    /// The keys of this epoch, by agreed identity.
    keys: HashMap<u64, &'static KeyTuner, FxBuildHasher>,
    /// The one untuned tuner of every agreed identity beyond `MAX_KEYS`.
    overflow: Option<&'static KeyTuner>,
}

/// Agreed identities one communicator tunes apart (per epoch), so that memory stays bounded when
/// calls change size every time. The ranks of a communicator meet the same identities in the
/// same order (the standard makes them equal at every instance), so every rank passes this
/// bound at the same call; and an identity beyond it never proposes itself at a checkpoint, so
/// even a rank that passed it alone (an erroneous program) could not make its peers search.
const MAX_KEYS: usize = 1024;

static EPOCHS: AtomicU64 = AtomicU64::new(1);

impl CommTuning {
    fn new() -> CommTuning {
        CommTuning {
            interval: MIN_INTERVAL,
            checks: 0,
            tunable: None,
            private: None,
            active: None,
            keys: HashMap::default(),
            overflow: None,
        }
    }

    pub fn is_active(&self, tuner: &KeyTuner) -> bool {
        self.active.is_some_and(|(t, _)| std::ptr::eq(t, tuner))
    }

    /// The tuner of the key with agreed identity `agree_hash` in epoch `epoch`.
    pub fn key(&mut self, agree_hash: u64, epoch: u64) -> &'static KeyTuner {
        if let Some(t) = self.keys.get(&agree_hash) {
            return t;
        }
        if self.keys.len() >= MAX_KEYS {
            return self.overflow.get_or_insert_with(|| {
                let t: &'static KeyTuner = Box::leak(Box::new(KeyTuner::new(epoch)));
                let mut key = lock(&t.state);
                key.reason =
                    Some("more distinct calls on this communicator than the tuner keeps apart");
                t.settle(&mut key, 0, Phase::Untuned, u64::MAX);
                drop(key);
                t
            });
        }
        self.keys
            .entry(agree_hash)
            .or_insert_with(|| Box::leak(Box::new(KeyTuner::new(epoch))))
    }
}

impl CommSlot {
    fn new() -> CommSlot {
        CommSlot {
            epoch: AtomicU64::new(EPOCHS.fetch_add(1, Ordering::Relaxed)),
            instance: AtomicU64::new(0),
            next_check: AtomicU64::new(MIN_INTERVAL),
            searching: AtomicBool::new(false),
            state: Mutex::new(CommTuning::new()),
        }
    }

    /// Schedules the next checkpoint after instance `now`: `interval` with a deterministic
    /// jitter, so that checkpoints do not keep landing on the same key of a repeating pattern.
    pub fn schedule_check(&self, comm: &mut CommTuning, now: u64) {
        comm.checks += 1;
        let mut x = comm.checks.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 31;
        self.next_check
            .store(now + 1 + x % comm.interval, Ordering::Relaxed);
    }

    /// Starts or ends the search of `active` (None: no search).
    pub fn set_active(&self, comm: &mut CommTuning, active: Option<(&'static KeyTuner, u64)>) {
        comm.active = active;
        self.searching.store(active.is_some(), Ordering::Relaxed);
    }

    /// The communicator never tunes (one rank, intercommunicator, or an error).
    pub fn disable(&self, comm: &mut CommTuning) {
        comm.tunable = Some(false);
        self.next_check.store(u64::MAX, Ordering::Relaxed);
    }
}

/// Every communicator handle seen, for the whole run (a handle's slot is reset, not removed,
/// when the communicator is freed): no limit that could make one rank behave differently.
static COMMS: LazyLock<DashMap<usize, &'static CommSlot, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// The slot of `comm`.
pub fn comm_slot(comm: MPI_Comm) -> &'static CommSlot {
    *COMMS
        .entry(comm.bits())
        .or_insert_with(|| Box::leak(Box::new(CommSlot::new())))
}

/// The application freed a communicator: its handle may come back for another one.
pub fn forget(bits: usize) {
    if let Some(slot) = COMMS.get(&bits).map(|s| *s) {
        let mut comm = lock(&slot.state);
        *comm = CommTuning::new();
        slot.instance.store(0, Ordering::Relaxed);
        slot.next_check.store(MIN_INTERVAL, Ordering::Relaxed);
        slot.searching.store(false, Ordering::Relaxed);
        slot.epoch
            .store(EPOCHS.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// How an entry reaches its tuner: its communicator's slot, and the tuner of its agreed
/// identity in the slot's current epoch.
#[derive(Default)]
pub struct TunerLink {
    pub comm: OnceLock<&'static CommSlot>,
    pub current: LeakedCell<KeyTuner>,
}

/// A key's tuner: what the settled path reads without a lock, and the rest under one.
pub struct KeyTuner {
    /// The communicator epoch this state belongs to.
    pub epoch: u64,
    /// Calls of the key in this epoch.
    pub instances: AtomicU64,
    /// The codelet every call runs from now on, plus one (0: not settled, take the slow path).
    pub settled: AtomicU64,
    /// The call number of the next drift check (u64::MAX: none).
    pub drift_at: AtomicU64,
    pub state: Mutex<KeyTuning>,
}

impl KeyTuner {
    fn new(epoch: u64) -> KeyTuner {
        KeyTuner {
            epoch,
            instances: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            drift_at: AtomicU64::new(u64::MAX),
            state: Mutex::new(KeyTuning::default()),
        }
    }

    /// From now on every call runs `codelet`, with a drift check at call `drift_at`.
    pub fn settle(&self, key: &mut KeyTuning, codelet: usize, phase: Phase, drift_at: u64) {
        key.phase = phase;
        self.settled.store(codelet as u64 + 1, Ordering::Relaxed);
        self.drift_at.store(drift_at, Ordering::Relaxed);
    }

    /// Back to the slow path (a search starts).
    pub fn unsettle(&self) {
        self.settled.store(0, Ordering::Relaxed);
        self.drift_at.store(u64::MAX, Ordering::Relaxed);
    }

    /// The key's tuning as the report shows it (`names`: the operation's codelets; durations
    /// converted with `ns_per_tick`).
    pub fn report(&self, names: &[&str], ns_per_tick: f64) -> TuningData {
        let key = lock(&self.state);
        let instances = self.instances.load(Ordering::Relaxed);
        let warmup = runtime::config().tuning.warmup;
        let (phase, winner) = match &key.phase {
            Phase::Warmup => ("warmup", None),
            Phase::Searching(_) => ("search", None),
            Phase::Production(p) => ("production", Some(p.winner)),
            Phase::Untuned => ("untuned", None),
        };
        let reason = key.reason.map(String::from).or_else(|| match key.phase {
            Phase::Warmup if instances < warmup => Some(format!(
                "called {instances} times, fewer than COMMTUNE_WARMUP={warmup}"
            )),
            Phase::Warmup => Some(no_checkpoint(&key, instances, warmup)),
            _ => None,
        });
        let plan = match &key.phase {
            Phase::Searching(s) => Some(&s.plan),
            _ => key.decided.as_ref(),
        };
        let codelets = plan.map_or_else(Vec::new, |p| p.report_estimates(names, ns_per_tick));
        TuningData {
            phase: phase.to_string(),
            reason,
            winner: winner.map(|w| names[w].to_string()),
            search_instances: key.searched,
            searches: key.searches,
            rounds: plan.map_or(0, |p| p.rounds),
            codelets,
            timeline: key.timeline.events(names, ns_per_tick),
            timeline_dropped: key.timeline.dropped,
            saved_s: None,
            // Measured per site: `keys::Entry::data`.
            saving: None,
        }
    }
}

/// One key's tuning state in its communicator's current epoch.
#[derive(Default)]
pub struct KeyTuning {
    pub phase: Phase,
    pub disagreements: u32,
    pub reopened: u32,
    pub searches: u32,
    /// Instances run as part of a search, all searches together.
    pub searched: u64,
    /// Clock ticks of all timed calls (the budget's denominator).
    pub ticks: u64,
    /// The latest decided search (for the report).
    pub decided: Option<Plan>,
    pub reason: Option<&'static str>,
    /// Warm-up: calls made while ready but another key of the communicator was searched, and
    /// checkpoints at this key where not every rank was ready at it.
    pub waited: u64,
    pub partial: u32,
    pub timeline: Timeline,
}

/// What a key ran when, for the report's `tuning.timeline`: codelets as registry indices and
/// durations in clock ticks until the report names and converts them.
#[derive(Default)]
pub struct Timeline {
    marks: Vec<Mark>,
    /// Marks past `TIMELINE_EVENTS`, left out.
    pub dropped: u64,
}

/// One event of a `Timeline` (see `commtune_report::Event`).
pub enum Mark {
    Search {
        call: u64,
        search: u32,
    },
    Sample {
        call: u64,
        codelet: usize,
        ticks: f64,
    },
    Decision {
        call: u64,
        winner: usize,
    },
    Drift {
        call: u64,
        ratio: f64,
        reopened: bool,
    },
}

impl Timeline {
    /// Records `mark` (slow path only: searches, decisions, drift checks), up to the limit.
    pub fn push(&mut self, mark: Mark) {
        if self.marks.len() < TIMELINE_EVENTS {
            self.marks.push(mark);
        } else {
            self.dropped += 1;
        }
    }

    pub fn events(&self, names: &[&str], ns_per_tick: f64) -> Vec<Event> {
        let name = |i: usize| names.get(i).copied().unwrap_or("?").to_string();
        self.marks
            .iter()
            .map(|m| match *m {
                Mark::Search { call, search } => Event::Search { call, search },
                Mark::Sample {
                    call,
                    codelet,
                    ticks,
                } => Event::Sample {
                    call,
                    codelet: name(codelet),
                    us: ticks * ns_per_tick * 1e-3,
                },
                Mark::Decision { call, winner } => Event::Decision {
                    call,
                    winner: name(winner),
                },
                Mark::Drift {
                    call,
                    ratio,
                    reopened,
                } => Event::Drift {
                    call,
                    ratio,
                    reopened,
                },
            })
            .collect()
    }
}

/// Why a key that repeated enough is still in warm-up, and what changes it.
fn no_checkpoint(key: &KeyTuning, calls: u64, warmup: u64) -> String {
    let detail = if key.waited > 0 {
        format!(
            "another call of this communicator was being searched during {} of its {calls} \
             calls (shorter searches: a smaller COMMTUNE_SAMPLES, or COMMTUNE_SEARCH=racing)",
            key.waited
        )
    } else if key.partial > 0 {
        format!(
            "at {} checkpoints here some ranks had not made this call COMMTUNE_WARMUP={warmup} \
             times yet, or were at another call",
            key.partial
        )
    } else {
        format!(
            "the checkpoints fell on other calls of this communicator (they are 4 to 65536 \
             collective calls apart, further while no call is ready; a smaller \
             COMMTUNE_WARMUP={warmup} makes calls ready sooner)"
        )
    };
    format!(
        "no checkpoint found every rank at this call: {detail}. A search starts only at a \
         checkpoint, a collective call where one small reduction finds every rank of the \
         communicator at the same call, made COMMTUNE_WARMUP times; a communicator searches one \
         call at a time"
    )
}

#[derive(Default)]
pub enum Phase {
    #[default]
    Warmup,
    Searching(Box<SearchState>),
    Production(Production),
    Untuned,
}

pub struct Production {
    pub winner: usize,
    /// Sampled durations since the last drift check, and the first window's median.
    pub window: Vec<u64>,
    pub baseline: Option<f64>,
    pub strikes: u32,
}

impl Production {
    pub fn new(winner: usize) -> Production {
        Production {
            winner,
            window: Vec::new(),
            baseline: None,
            strikes: 0,
        }
    }
}

pub struct SearchState {
    pub plan: Plan,
    /// Registry indices of this round's instances, and the position in it.
    pub schedule: Vec<usize>,
    pub position: usize,
    /// Samples per registry index.
    pub samples: Vec<(usize, Vec<f64>)>,
    /// Ticks spent per registry index (for the budget).
    pub spent: Vec<(usize, u64)>,
    /// Period timing: the instance waiting for the next entry to end its sample: its start,
    /// codelet, whether it is a sample, and its call number.
    pub pending: Option<(u64, usize, bool, u64)>,
}

/// The samples of `codelet` in a search's per-codelet samples, added if it has none yet.
pub fn samples_of(samples: &mut Vec<(usize, Vec<f64>)>, codelet: usize) -> &mut Vec<f64> {
    let at = match samples.iter().position(|(i, _)| *i == codelet) {
        Some(at) => at,
        None => {
            samples.push((codelet, Vec::new()));
            samples.len() - 1
        }
    };
    &mut samples[at].1
}

impl SearchState {
    pub fn samples_of(&mut self, codelet: usize) -> &mut Vec<f64> {
        samples_of(&mut self.samples, codelet)
    }

    pub fn add_spent(&mut self, codelet: usize, ticks: u64) {
        match self.spent.iter_mut().find(|(i, _)| *i == codelet) {
            Some((_, t)) => *t += ticks,
            None => self.spent.push((codelet, ticks)),
        }
    }
}
