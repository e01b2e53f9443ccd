//! What the tuner remembers per communicator and per key. The settled path reads only atomics;
//! everything else changes under the communicator's or the key's lock, in the slow path.
//!
//! A key's tuning state belongs to its *agreed* identity (site, operation, signature: what every
//! rank can name alike) on one lifetime of a communicator, not to a local `keys::Entry`: local
//! details that legally differ between ranks (handles of datatypes created per call, an
//! allgatherv's displacements) split entries on one rank only, and must not split the tuning.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use commtune_history::How;
use commtune_history::predict::Predicted;
use commtune_report::TuningData;
use commtune_report::{HistoryPrediction, PredictionTrial, SelfCheck};
use commtune_tune::budget;
use commtune_tune::check::{self, Drift, Lead, Prediction};
use commtune_tune::checkpoints::{Found, Spacing};
use commtune_tune::report::{
    NOT_WORTH_ELSEWHERE, Progress, Stage, not_worth_reason, warmup_reason,
};
use commtune_tune::sampling::Sampler;
use commtune_tune::timeline::Timeline;
use commtune_tune::trial::{Trial, Window};
use commtune_tune::{Agreed, Candidate, Plan, Timing};
use rustc_hash::FxBuildHasher;

use super::consensus::{Proposed, StartedCheckpoint};
use crate::comms::{self, Communicator};
use crate::keys::Entry;
use crate::mpi::{Comm, MPI_Comm};
use crate::runtime;
use crate::sync::{LeakedCell, lock};

/// The tuner's state of one communicator (kept in its `comms` record; the record's epoch changes
/// when the application frees the communicator, so a handle value reused for another
/// communicator starts afresh, and so do its keys).
pub struct CommTuner {
    pub record: &'static Communicator,
    /// The instance of the next checkpoint (u64::MAX: never).
    pub next_check: AtomicU64,
    /// A key of this communicator is being searched (checkpoints wait).
    pub searching: AtomicBool,
    pub state: Mutex<CommTunerState>,
}

pub struct CommTunerState {
    /// When checkpoints come (agreed outcomes only, so alike on every rank).
    pub spacing: Spacing,
    /// Whether the communicator tunes, decided at first use; if not, why (for each key's report).
    pub tunable: Option<Result<(), &'static str>>,
    pub private: Option<Comm>,
    /// The key being searched, and the communicator instance of its latest call.
    pub active: Option<(&'static Tuner, u64)>,
    /// The fastest barrier timed after a checkpoint so far, clock ticks: what a search's own
    /// collectives cost (do no harm); and how many were timed.
    pub collective: Option<u64>,
    pub collectives_timed: u32,
    /// This rank's fastest checkpoint so far, clock ticks: what checkpoints cost (their
    /// spacing).
    pub checkpoint: Option<u64>,
    /// The checkpoint whose reduction is in flight (`next_check` is then the instance where it
    /// is finished: `checkpoints::FINISH_AFTER` after its own).
    pub started: Option<Box<StartedCheck>>,
    /// The keys of this epoch, by agreed identity.
    keys: HashMap<u64, &'static Tuner, FxBuildHasher>,
    /// The one untuned tuner of every agreed identity beyond `MAX_KEYS`.
    overflow: Option<&'static Tuner>,
}

/// Where a call was: what acting on its key needs once the call has returned (a checkpoint's
/// outcome arrives at a later call of the communicator).
#[derive(Clone, Copy)]
pub struct Place {
    pub entry: &'static Entry,
    pub tuner: &'static Tuner,
    pub slot: &'static CommTuner,
    /// The communicator's instance, and the key's call number.
    pub n: u64,
    pub k: u64,
}

/// A checkpoint whose reduction is in flight, with what this rank brought to it.
pub struct StartedCheck {
    pub reduction: StartedCheckpoint,
    /// The call this rank checked at.
    pub at: Place,
    /// The codelets that may run the key's calls, its prediction from the history, and the
    /// instances a search of them would run (empty, None, 0 when the key had not warmed up).
    pub candidates: Vec<Candidate>,
    pub prediction: Option<(Proposed, Predicted)>,
    pub instances: u64,
    /// Clock ticks spent starting it.
    pub spent: u64,
}

/// Agreed identities one communicator tunes apart (per epoch), so that memory stays bounded when
/// calls change size every time. The ranks of a communicator meet the same identities in the
/// same order (the standard makes them equal at every instance), so every rank passes this
/// bound at the same call; and an identity beyond it never proposes itself at a checkpoint, so
/// even a rank that passed it alone (an erroneous program) could not make its peers search.
const MAX_KEYS: usize = 1024;

impl CommTunerState {
    fn new() -> CommTunerState {
        CommTunerState {
            spacing: Spacing::default(),
            tunable: None,
            private: None,
            active: None,
            collective: None,
            collectives_timed: 0,
            checkpoint: None,
            started: None,
            keys: HashMap::default(),
            overflow: None,
        }
    }

    pub fn is_active(&self, tuner: &Tuner) -> bool {
        self.active.is_some_and(|(t, _)| std::ptr::eq(t, tuner))
    }

    /// The tuner of the key with agreed identity `agree_hash` in epoch `epoch`, first called at
    /// instance `now` of the communicator.
    pub fn key(&mut self, agree_hash: u64, epoch: u64, now: u64) -> &'static Tuner {
        if let Some(t) = self.keys.get(&agree_hash) {
            return t;
        }
        if self.keys.len() >= MAX_KEYS {
            return self.overflow.get_or_insert_with(|| {
                let t: &'static Tuner = Box::leak(Box::new(Tuner::new(epoch, now)));
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
            .or_insert_with(|| Box::leak(Box::new(Tuner::new(epoch, now))))
    }
}

impl CommTuner {
    fn new(record: &'static Communicator) -> CommTuner {
        CommTuner {
            record,
            next_check: AtomicU64::new(Spacing::FIRST),
            searching: AtomicBool::new(false),
            state: Mutex::new(CommTunerState::new()),
        }
    }

    /// Schedules the next checkpoint after the one at instance `now` found `found`.
    pub fn schedule_check(&self, comm: &mut CommTunerState, now: u64, found: Found) {
        let next = comm.spacing.next(now, found);
        self.next_check.store(next, Ordering::Relaxed);
    }

    /// Starts or ends the search of `active` (None: no search).
    pub fn set_active(&self, comm: &mut CommTunerState, active: Option<(&'static Tuner, u64)>) {
        comm.active = active;
        self.searching.store(active.is_some(), Ordering::Relaxed);
    }

    /// The communicator never tunes, for `reason` (one rank, intercommunicator, or an error).
    pub fn disable(&self, comm: &mut CommTunerState, reason: &'static str) {
        comm.tunable = Some(Err(reason));
        self.next_check.store(u64::MAX, Ordering::Relaxed);
    }
}

/// The tuner's state of `comm`, made at its first tuned call.
pub fn comm_tuner(comm: MPI_Comm) -> &'static CommTuner {
    let record = comms::of(comm);
    let state: &'static (dyn Any + Send + Sync) = *record
        .tuner
        .get_or_init(|| Box::leak(Box::new(CommTuner::new(record))));
    state
        .downcast_ref()
        .expect("a communicator's tuner slot holds the tuner's state only")
}

/// The application freed a communicator (`comms` hook): its handle may come back for another one.
pub fn forget(bits: usize) {
    let Some(tuner) = comms::of_bits(bits)
        .and_then(|record| record.tuner.get())
        .and_then(|state| state.downcast_ref::<CommTuner>())
    else {
        return;
    };
    // Every rank is in MPI_Comm_free: a checkpoint in flight completes as its state is dropped.
    *lock(&tuner.state) = CommTunerState::new();
    tuner.next_check.store(Spacing::FIRST, Ordering::Relaxed);
    tuner.searching.store(false, Ordering::Relaxed);
}

/// How a key reaches its tuner: its communicator's slot, and the tuner it was linked to (valid
/// while the key keeps the agreed identity and the slot the epoch it had then).
#[derive(Default)]
pub struct TunerLink {
    pub comm: OnceLock<&'static CommTuner>,
    pub current: LeakedCell<Linked>,
}

/// The tuner a key was linked to, with the key's agreed identity then.
pub struct Linked {
    pub agree_hash: u64,
    pub tuner: &'static Tuner,
}

/// A key's tuner: what the settled path reads without a lock, and the rest under one.
pub struct Tuner {
    /// The communicator epoch this state belongs to, and the communicator instance of the key's
    /// first call in it.
    pub epoch: u64,
    pub born: u64,
    /// Calls of the key in this epoch.
    pub instances: AtomicU64,
    /// The codelet every call runs from now on, plus one (0: not settled, take the slow path).
    pub settled: AtomicU64,
    /// The call number of the next drift check (u64::MAX: none).
    pub drift_at: AtomicU64,
    /// The first call of the window timed whole before that check (u64::MAX: none).
    pub window_at: AtomicU64,
    pub state: Mutex<TunerState>,
}

impl Tuner {
    fn new(epoch: u64, born: u64) -> Tuner {
        Tuner {
            epoch,
            born,
            instances: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            drift_at: AtomicU64::new(u64::MAX),
            window_at: AtomicU64::new(u64::MAX),
            state: Mutex::new(TunerState::default()),
        }
    }

    /// From now on every call runs `codelet`, with a drift check at call `drift_at`.
    pub fn settle(&self, key: &mut TunerState, codelet: usize, phase: Phase, drift_at: u64) {
        key.phase = phase;
        self.settled.store(codelet as u64 + 1, Ordering::Relaxed);
        self.check_drift_at(drift_at);
    }

    /// The next drift check is at call `k` (u64::MAX: none); the calls of the window before it
    /// are timed whole.
    pub fn check_drift_at(&self, k: u64) {
        let window = check::window(runtime::config().tuning.drift_interval);
        self.drift_at.store(k, Ordering::Relaxed);
        let window_at = if k == u64::MAX {
            k
        } else {
            k.saturating_sub(window)
        };
        self.window_at.store(window_at, Ordering::Relaxed);
    }

    /// Production runs `codelet` (the winner, or a runner-up on trial) from now on, with a check
    /// at call `check_at`.
    pub fn run(&self, codelet: usize, check_at: u64) {
        self.settled.store(codelet as u64 + 1, Ordering::Relaxed);
        self.check_drift_at(check_at);
    }

    /// Back to the slow path (a search starts).
    pub fn unsettle(&self) {
        self.settled.store(0, Ordering::Relaxed);
        self.check_drift_at(u64::MAX);
    }

    /// What the key decided (`TunerState::decision`).
    pub fn decided(&self, us_per_tick: f64) -> Option<Decision> {
        lock(&self.state).decision(us_per_tick)
    }

    /// The key's tuning as the report shows it (`names`: the operation's codelets; durations
    /// converted with `ns_per_tick`).
    pub fn report(&self, names: &[&str], ns_per_tick: f64) -> TuningData {
        let key = lock(&self.state);
        let instances = self.instances.load(Ordering::Relaxed);
        let warmup = runtime::config().tuning.warmup;
        let stage = match &key.phase {
            Phase::Warmup => Stage::Warmup,
            Phase::Searching(_) => Stage::Search,
            Phase::Production(p) => Stage::Production(p.winner),
            Phase::Untuned => Stage::Untuned,
        };
        let reason = key.reason.map(String::from).or_else(|| match key.phase {
            Phase::Warmup if instances < warmup => Some(warmup_reason(instances, warmup)),
            Phase::Warmup => Some(no_checkpoint(&key, instances, warmup)),
            _ => None,
        });
        let mut data = Progress {
            stage,
            reason,
            plan: match &key.phase {
                Phase::Searching(s) => Some(&s.plan),
                _ => key.decided.as_ref(),
            },
            search_instances: key.searched,
            searches: key.searches,
            timeline: Some(&key.timeline),
        }
        .data(names, ns_per_tick);
        data.check = key.check.clone();
        data.prediction = key.prediction.clone();
        data.search_timing = (key.searches > 0).then(|| key.timing().name().to_string());
        data.collective_over_call = key.collective_over_call;
        data
    }
}

/// One key's tuning state in its communicator's current epoch.
#[derive(Default)]
pub struct TunerState {
    pub phase: Phase,
    pub disagreements: u32,
    pub reopened: u32,
    pub searches: u32,
    /// Instances run as part of a search, all searches together.
    pub searched: u64,
    /// Clock ticks of all timed calls (the budget's denominator).
    pub ticks: u64,
    /// The slowest timed call's ticks, left out of the mean call that do no harm weighs a
    /// search's collectives against (a program's first call sets up connections).
    pub slowest_call: u64,
    /// Native's latest calls in warm-up, for the gain do no harm expects of a search.
    pub tail: budget::Tail,
    /// The latest decided search (for the report).
    pub decided: Option<Plan>,
    pub reason: Option<&'static str>,
    /// Warm-up: calls made while ready but another key of the communicator was searched, and
    /// checkpoints at this key where not every rank was ready at it.
    pub waited: u64,
    pub partial: u32,
    /// The latest checkpoint that found a search would not pay for itself yet, and why.
    pub not_worth: Option<budget::NotWorth>,
    /// The latest checkpoint found a search worth it on this rank, not on every rank.
    pub not_worth_elsewhere: bool,
    /// What the key ran when, for the report.
    pub timeline: Timeline,
    /// The timing of the next search, when a self-check changed it from COMMTUNE_TIMING, or
    /// COMMTUNE_TIMING=auto chose another for the key (`TunerState::timing`).
    pub timing: Option<Timing>,
    /// What one of the tuner's small collectives took in calls of the key when its search was
    /// started from a checkpoint, agreed (`consensus::Checkpoint::Agreed`), for the report.
    pub collective_over_call: Option<f64>,
    /// The communicator's size (`Facts::size`), set at the key's warm checkpoints: the history
    /// records decisions per communicator size.
    pub comm_size: u32,
    /// Decisions the self-check found wrong.
    pub wrong: u32,
    /// The latest self-check, for the report (microseconds).
    pub check: Option<SelfCheck>,
    /// The history's prediction the key started with, for the report and the store.
    pub prediction: Option<HistoryPrediction>,
}

impl TunerState {
    /// How the key's searches time their samples, and how its production is checked.
    pub fn timing(&self) -> Timing {
        self.timing.unwrap_or(runtime::config().tuning.timing)
    }

    /// Picks the timing of the search about to start from what one of the tuner's small
    /// collectives takes in calls of the key, agreed (`Settings::search_timing`: under
    /// COMMTUNE_TIMING=auto, local for short calls). A timing a self-check chose stays.
    pub fn choose_timing(&mut self, collective_over_call: f64) {
        if self.timing.is_some() {
            return;
        }
        let settings = runtime::config().tuning;
        let timing = settings.search_timing(collective_over_call);
        self.timing = (timing != settings.timing).then_some(timing);
        self.collective_over_call = Some(collective_over_call);
    }

    /// What the key decided (estimates in microseconds, converted with `us_per_tick`), if it is
    /// in production after a search that ran to its decision (not ended early; the runner-up
    /// when the self-check replaced the winner with it) or after a prediction the safety net
    /// confirmed (its predicted time as the searches estimate it is then the one estimate,
    /// `confirmed_estimate`).
    pub fn decision(&self, us_per_tick: f64) -> Option<Decision> {
        let key = self;
        let Phase::Production(p) = &key.phase else {
            return None;
        };
        // A reason says why production is not a decision, except the self-check's replacement
        // (`check::RUNNER_UP_KEPT`, for the report), which is the search's decision corrected.
        if key.reason.is_some() && p.replaced.is_none() {
            return None;
        }
        let decision = |estimates, how| Decision {
            winner: p.winner,
            estimates,
            how,
            comm_size: key.comm_size,
            timing: key.timing(),
            realised_us: p.realised_us,
            replaced: p.replaced,
        };
        if let Some(plan) = &key.decided {
            let us = |a: &Agreed| Agreed {
                location: a.location * us_per_tick,
                error: a.error * us_per_tick,
            };
            let estimates = plan.estimates.iter().map(|(i, a)| (*i, us(a))).collect();
            return Some(decision(estimates, How::Search));
        }
        let confirmed = key.prediction.as_ref().filter(|h| prediction_stands(h))?;
        let estimate = Agreed {
            location: confirmed_estimate(confirmed),
            error: 0.0,
        };
        Some(decision(
            vec![(p.winner, estimate)],
            How::PredictionConfirmed,
        ))
    }
}

/// What a key in production decided (`Tuner::decided`).
pub struct Decision {
    /// The winner's index in the operation's registry.
    pub winner: usize,
    /// Every codelet that ran: its index and agreed estimate in microseconds (the same on every
    /// rank, up to each rank's clock calibration).
    pub estimates: Vec<(usize, Agreed)>,
    /// A search or a confirmed prediction.
    pub how: How,
    pub comm_size: u32,
    /// How the estimates were timed.
    pub timing: Timing,
    /// The winner's realised time per call in production, if the self-check or the safety net
    /// measured it (`Production::realised_us`).
    pub realised_us: Option<f64>,
    /// The search's winner the self-check replaced with this one (`Production::replaced`).
    pub replaced: Option<(usize, f64)>,
}

/// The estimate a confirmed prediction records: its predicted time as the searches estimate it,
/// so that the history's estimates stay comparable with each other (its measured time is the
/// entry's realised time).
pub fn confirmed_estimate(prediction: &HistoryPrediction) -> f64 {
    prediction.estimate_us.unwrap_or(prediction.predicted_us)
}

/// The safety net's first look (collective keys and halo classes alike): whether the predicted
/// winner's `measured_us` per call holds `predicted_us` within COMMTUNE_PMAX, recorded in the
/// report's `prediction` (confirmed). A miss stays verifying until `safety_net_settles`.
pub fn safety_net_holds(
    prediction: &mut Option<HistoryPrediction>,
    predicted_us: f64,
    measured_us: f64,
) -> bool {
    let confirmed = check::prediction_holds(predicted_us, measured_us, runtime::config().pmax);
    if let Some(prediction) = prediction {
        prediction.measured_us = Some(measured_us);
        if confirmed {
            prediction.outcome = CONFIRMED.to_string();
        }
    }
    confirmed
}

/// The safety net's verdict on a prediction whose winner missed (`safety_net_holds`), after the
/// `trial` of an alternative (`trial::Around::beaten_on_both_sides`) or without one: `kept`, or
/// dismissed (it saved no search then).
pub fn safety_net_settles(
    prediction: &mut Option<HistoryPrediction>,
    trial: Option<PredictionTrial>,
    kept: bool,
) {
    if let Some(prediction) = prediction {
        prediction.trial = trial;
        prediction.outcome = if kept { KEPT } else { DISMISSED }.to_string();
        if !kept {
            prediction.saved_instances = 0;
        }
    }
}

/// Whether the safety net let `prediction` stand (confirmed, or kept after a trial): its
/// winner is the decision the history records, and what the run learns.
pub fn prediction_stands(prediction: &HistoryPrediction) -> bool {
    prediction.outcome == CONFIRMED || prediction.outcome == KEPT
}

/// The predicted time per call (µs) of a key's or a halo class's `prediction` that its safety
/// net (the first window of production after it) has yet to judge.
pub fn verifying(prediction: &Option<HistoryPrediction>) -> Option<f64> {
    let verifying = prediction.as_ref().filter(|h| h.outcome == VERIFYING);
    verifying.map(|h| h.predicted_us)
}

/// `HistoryPrediction::outcome`s.
pub const VERIFYING: &str = "verifying";
pub const CONFIRMED: &str = "confirmed";
pub const KEPT: &str = "kept";
pub const DISMISSED: &str = "dismissed";

/// Why a key that repeated enough is still in warm-up, and what changes it.
fn no_checkpoint(key: &TunerState, calls: u64, warmup: u64) -> String {
    if let Some(not_worth) = &key.not_worth {
        return not_worth_reason(not_worth);
    }
    if key.not_worth_elsewhere {
        return NOT_WORTH_ELSEWHERE.to_string();
    }
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
             collective calls apart: further while no call is ready, and where a checkpoint \
             costs as much as many calls, so that checkpoints take about 1 % of the time; a \
             smaller COMMTUNE_WARMUP={warmup} makes calls ready sooner)"
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
    Searching(Box<Sampler>),
    Production(Box<Production>),
    Untuned,
}

pub struct Production {
    pub winner: usize,
    /// Sampled durations since the last drift check, the clock at the first of them, and the
    /// drift checks so far (the first window's median is their baseline).
    pub window: Vec<u64>,
    pub window_start: Option<u64>,
    pub drift: Drift,
    /// What the search predicted (agreed estimates, clock ticks per call): the winner's and the
    /// best other codelet's, and the timing they were measured with; None when no search
    /// decided (one codelet applies, or a search ended early). The first drift window checks
    /// the prediction.
    pub predicted: Option<Prediction>,
    /// The winner's realised time per call (microseconds, agreed) once the self-check kept the
    /// search's decision (or replaced its winner with this runner-up: its trial's) or the
    /// safety net confirmed the prediction: what the history records for later jobs'
    /// predicted times.
    pub realised_us: Option<f64>,
    /// The search's winner (registry index) that the self-check replaced with this runner-up,
    /// and its realised time per call (microseconds, agreed): the history records the search's
    /// decision as production corrected it (`commtune_history::Replaced`).
    pub replaced: Option<(usize, f64)>,
    /// The codelet on trial, after the winner missed its prediction or won a close race.
    pub trial: Option<Trialled>,
    /// What the safety net tries when the history's predicted winner misses its time: native,
    /// or for a predicted native the prediction's runner-up (None: dismissed at once).
    pub alternative: Option<usize>,
    /// The latest agreed time per call of the search's three best codelets (its estimates, then
    /// what production measured of them), and the drift checks in a row whose window found
    /// another clearly ahead of the winner (`drift::lead_check`).
    pub lead: Lead,
    pub lead_strikes: u32,
}

/// A codelet on trial (`commtune_tune::trial`): the winner missed what was predicted or won a
/// close race, so another codelet runs a window of production calls, between windows of the
/// winner's, before what the trial checks is judged (`drift`).
#[derive(Clone, Copy, Debug)]
pub enum Trialled {
    /// A search's decision, with what the search predicted (the self-check): the runner-up (or
    /// the race's third) on trial, windows agreed in clock ticks per call, the estimates' unit.
    Decision {
        trial: Trial<Window>,
        predicted: Prediction,
    },
    /// A prediction from the history of `predicted_us` per call (the safety net): its
    /// alternative on trial, windows timed with `timing` and agreed in microseconds per call,
    /// the predicted time's unit, which every rank shares while clock ticks differ a little
    /// between ranks.
    Prediction {
        trial: Trial<f64>,
        timing: Timing,
        predicted_us: f64,
    },
}

impl Trialled {
    /// The codelet production runs: the one on trial, or the winner (`winner`) for its window
    /// after it.
    pub fn running(&self, winner: usize) -> usize {
        match self {
            Trialled::Decision { trial, .. } => trial.running(winner),
            Trialled::Prediction { trial, .. } => trial.running(winner),
        }
    }
}

impl Production {
    pub fn new(winner: usize, predicted: Option<Prediction>) -> Production {
        let lead = predicted.map_or_else(Lead::default, |p| {
            Lead::new(
                std::iter::once((winner, p.winner))
                    .chain(p.runner_up)
                    .chain(p.third),
            )
        });
        Production {
            winner,
            window: Vec::new(),
            window_start: None,
            drift: Drift::default(),
            predicted,
            realised_us: None,
            replaced: None,
            trial: None,
            alternative: None,
            lead,
            lead_strikes: 0,
        }
    }

    /// The codelet production runs: the winner, or the codelet on trial.
    pub fn running(&self) -> usize {
        self.trial.map_or(self.winner, |t| t.running(self.winner))
    }
}
