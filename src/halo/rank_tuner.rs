//! The halo tuner (COMMTUNE_MODE=tune): each rank tunes its own episodes. A repeating episode key
//! searches the halo codelets, keeps the fastest, checks the decision, and watches it for drift.
//!
//! Halo codelets only reorder or repackage the same messages, so they match whatever codelet the
//! peers run: every rank searches and decides alone, from its own samples, with no agreement and
//! no collective. Samples are the collectives' (`commtune_tune::sampling::Sampler`), with the
//! halo's settings (`Settings::for_halo`): blocks of COMMTUNE_HALO_BLOCK instances of one
//! codelet, the first not measured, timed as the period from the previous completion of the
//! same key to this one (an application iteration), or as the episode (first post to last
//! completion) with `COMMTUNE_TIMING=local`. Where the ranks exchange alike, every rank runs the
//! same schedule from the same instance on, so a block's period is the whole exchange's with
//! that codelet: a rank's own episode mostly measures its peers' skew. A codelet that posted
//! some of an episode's messages natively (its requirements, see `CODELETS`) gives no sample;
//! one that never manages to is dropped from the search, with a note in the report. `neighbor`
//! is not searched here: ranks try it together once each has decided (`agreement`), and the
//! samples of its instances go there.
//!
//! The self-check (`commtune_tune::check`) is the collectives' too, on this rank's times: a
//! window of the winner's production instances after the decision, timed as the search timed,
//! against its estimate; a winner that missed puts the runner-up on trial for a window of its
//! own, and only a runner-up that does clearly better makes the decision wrong (on a network an
//! episode in production waits for peers that search samples did not wait for, whatever the
//! codelet); a wrong decision searches again once with the other timing, a second one keeps the
//! runner-up that beat it. Lead checks follow (`check::Lead`): after each window of twice the
//! self-check's episodes of the winner, the codelet with the least time this rank last measured
//! (its search estimate, or its latest window in production) runs from the next episode. Halo
//! codelets exchange the same messages whatever the peers run, so a rank switches alone, at any
//! episode; a codelet whose rare stalls a search's few blocks missed leads until a window shows
//! them. Drift checks (`check::Drift`) follow too, spaced as the collectives' are
//! (COMMTUNE_DRIFT_INTERVAL instances, more while steady): the winner's time per instance over
//! the COMMTUNE_DRIFT_INTERVAL instances before each check against that before the first, timed
//! as the decision's search timed; two in a row beyond COMMTUNE_DRIFT_THRESHOLD search again.
//! Such a span, not the collectives' window of 16 calls (each timed whole, their median agreed
//! over ranks): an episode's completion is clocked anyway, so the span costs nothing, and a
//! mean over it takes in the stalls a shaped network gives some codelets a few times in a
//! hundred episodes, which a window of 16 has or misses by chance (on the 1 Gbit/s rig one such
//! window came out at 2.7 times the first, and the next at 0.99). A lead check's switch starts
//! the drift watch afresh.
//!
//! A class whose episode the history store recorded for this rank (`history`) starts in
//! production with the recorded winner at the end of its warm-up instead of searching, and its
//! first window of production instances is the safety net: within COMMTUNE_PMAX of the
//! predicted time (`check::prediction_holds`) confirms it; slower, the entry's runner-up (else
//! native) runs a window, and only one that does clearly better in the winner's windows around it
//! (`trial::Around::beaten_on_both_sides`) dismisses it and searches.
//!
//! Tuning state is kept per class (`class`): the episode's size class and the epochs of its
//! communicators, so that a communicator handle MPI hands out again starts afresh. A class is
//! found once per episode prediction (`episode`) and then handed back with each completion, so
//! that a settled episode costs one uncontended lock here (ARCHITECTURE.md, invariant 7); the
//! classes of a communicator are dropped when the application frees it (`comm_freed`).

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use commtune_history::halo::Episode;
use commtune_history::{How, Replaced};
use commtune_report::{HistoryPrediction, HistorySource, Op, TuningData};
use dashmap::DashMap;
use rustc_hash::{FxBuildHasher, FxHasher};

use super::agreement;
use super::history::{self, Decided};
use commtune_report::PredictionTrial;
use commtune_tune::check::{self, Drift, Judgement, Lead, LeadWindow, Prediction, Span, Verdict};
use commtune_tune::report::{Progress, Stage, not_worth_reason, warmup_reason};
use commtune_tune::sampling::{self, Sampler, Turn};
use commtune_tune::timeline::{Mark, Timeline};
use commtune_tune::trial::{self, Ended, Trial};
use commtune_tune::{Candidate, Next, Partners, Plan, Timing, budget};

use crate::codelets;
use crate::codelets::halo::{CODELETS, NATIVE, NEIGHBOR};
use crate::keys::{Entry, Measured};
use crate::sync::lock;
use crate::tuner::{
    VERIFYING, confirmed_estimate, prediction_stands, safety_net_holds, safety_net_settles,
    verifying,
};
use crate::{clock, runtime};

/// Instances in a row a codelet may fail to give a sample before it leaves the search.
const MAX_MISSES: u32 = 4;

#[derive(Default)]
struct EpisodeTuner {
    instances: u64,
    search: Option<Search>,
    production: Option<Production>,
    /// The decided search, for the report.
    decided: Option<Plan>,
    search_instances: u64,
    searches: u32,
    /// The timing of the next search once a self-check found a decision wrong (None:
    /// COMMTUNE_TIMING), and how many it found wrong.
    timing: Option<Timing>,
    wrong: u32,
    /// Searches reopened for drift.
    reopened: u32,
    /// The latest self-check: the prediction, the winner's realised ticks per instance, the
    /// runner-up's in its trial if it had one, the verdict.
    checked: Option<(Prediction, f64, Option<f64>, Verdict)>,
    /// How tuning ended when the report's phase does not say it.
    reason: Option<&'static str>,
    /// The previous completion's clock ticks and codelet (period timing).
    last: Option<(u64, usize)>,
    timeline: Timeline,
    /// The rank's episode count at the class's first instance, and the latest check that found
    /// a search would not pay for itself yet, and why.
    born: Option<u64>,
    not_worth: Option<budget::NotWorth>,
    /// Whether the history was asked for this class's episode (once, at the end of warm-up),
    /// and what it predicted, for the report.
    consulted: bool,
    prediction: Option<HistoryPrediction>,
}

/// Halo episodes this rank completed, all classes: the run's clock for do no harm (counted, like
/// a communicator's collectives, so that a long set-up before the first exchange does not count).
static EPISODES: AtomicU64 = AtomicU64::new(0);

/// Do no harm (`commtune_tune::budget`), per rank: the instances to come are estimated from the
/// class's rate since its first instance and the rank's episodes so far, at episode `now`. What a
/// search costs is its first round: after it only codelets within twice the leader's time stay
/// (`commtune_tune::policy::HALO_SLOWER_LEAVES`), the leader among them, so a later round's
/// exchange loses at most the leader's time, and mostly less. Counting every round had the search
/// wait twice as long: under MPICH on shared memory, 160 native exchanges at 8 times `pack`'s time
/// made the first run twice as slow as with single-episode samples.
fn worth_searching(t: &mut EpisodeTuner, born: u64, now: u64) -> bool {
    let settings = runtime::config().halo_tuning;
    let instances = sampling::search_instances(
        Search::candidates().len(),
        t.timing.unwrap_or(settings.timing),
        settings.block as usize,
        1,
    );
    t.not_worth = budget::ready(
        settings.budget,
        t.instances,
        born,
        now,
        instances,
        budget::GAIN,
    )
    .err();
    t.not_worth.is_none()
}

struct Search {
    sampler: Sampler,
    /// The codelet of the next instance, and whether the sampler measures it.
    next: (usize, bool),
    misses: u32,
}

/// The winner in production, its self-check until it is done, and its drift checks.
struct Production {
    winner: usize,
    /// What the search predicted (None once checked, or for a fallback that is not checked).
    predicted: Option<Prediction>,
    /// The codelet on trial after the winner missed: the runner-up (the self-check), or the
    /// safety net's alternative, which is judged between two windows of the winner's.
    trial: Option<Trial<f64>>,
    /// The search's winner that the self-check replaced with this runner-up (their realised
    /// times are the class's `checked`).
    replaced: Option<usize>,
    /// What the safety net tries after a predicted winner missed (`safety_net`).
    alternative: Option<usize>,
    /// Production instances so far (since the trial's switch during a trial).
    instances: u64,
    /// The self-check's window (or its trial's).
    window: Span,
    /// Instances the drift watch counted (after the self-check or the safety net, outside
    /// trials), the count at which the next drift check is due, the winner's instances before
    /// it, and the checks so far.
    watched: u64,
    next_drift: u64,
    span: Span,
    drift: Drift,
    /// The lead checks after the self-check (`check::Lead`), the window being measured, whether
    /// one of them chose the winner, and its latest window's time since.
    lead: Lead,
    lead_window: LeadWindow,
    led: bool,
    led_realised: Option<f64>,
}

/// One tuning class: episodes whose messages differ only a little in size, on the same
/// communicators, share one search.
pub struct Class {
    id: u64,
    /// The handles of its communicators: freeing one drops the class.
    comms: Vec<usize>,
    /// False once dropped: an episode predicted to be in it finds its class anew.
    live: AtomicBool,
    tuner: Mutex<EpisodeTuner>,
    /// Its first episode as the history names it, and as the report shows it.
    episode: Episode,
    signature: String,
}

impl Class {
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }
}

/// The classes of the communicators alive, by id.
static TUNING: LazyLock<DashMap<u64, Arc<Class>, FxBuildHasher>> = LazyLock::new(DashMap::default);

/// The class of each entry's latest instance (by entry id), for the report and the agreement;
/// kept after its communicator is freed, so that the report still shows how it was tuned.
static CLASS_OF: LazyLock<DashMap<usize, Arc<Class>, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// The tuning class of an instance of `entry` on the communicators `comms` (handles) whose
/// epochs hash to `epochs` (`comms::Communicator::epoch`: a freed handle's successor gets a new
/// one); `episode` names a new class's episode for the history. Off the settled path: an
/// episode predicted to be `entry` reuses its class while it is live.
pub fn class(
    entry: &Entry,
    comms: Vec<usize>,
    epochs: u64,
    episode: impl FnOnce() -> Episode,
) -> Arc<Class> {
    let mut h = FxHasher::default();
    h.write_u64(entry.description.class.unwrap_or(entry.id() as u64));
    h.write_u64(epochs);
    let id = h.finish();
    let class = TUNING
        .entry(id)
        .or_insert_with(|| {
            Arc::new(Class {
                id,
                comms,
                live: AtomicBool::new(true),
                tuner: Mutex::default(),
                episode: episode(),
                signature: entry.description.signature.clone(),
            })
        })
        .clone();
    if CLASS_OF.get(&entry.id()).is_none_or(|c| c.id != id) {
        CLASS_OF.insert(entry.id(), class.clone());
    }
    class
}

/// The application freed the communicator of handle `bits`: its classes are dropped (a handle
/// MPI hands out again starts afresh, and the table stays as large as the live communicators'
/// classes).
pub fn comm_freed(bits: usize) {
    TUNING.retain(|_, class| {
        let dropped = class.comms.contains(&bits);
        if dropped {
            class.live.store(false, Ordering::Relaxed);
        }
        !dropped
    });
}

/// The codelet the next instance of tuning class `class` runs (native once it is dropped: the
/// instance belongs to a class of the communicator now behind the handle).
pub fn choose(class: &Class) -> usize {
    if !class.is_live() {
        return NATIVE;
    }
    let t = lock(&class.tuner);
    match (&t.production, &t.search) {
        (Some(p), _) => p.running(),
        (None, Some(s)) => s.next.0,
        (None, None) => NATIVE,
    }
}

/// An instance of `entry` (tuning class `class`) completed at clock `now` after `ticks`: it was
/// to run `chosen` (None when it was not predicted to be this key and class) and ran `ran`
/// (native when the chosen codelet left every message as it was: `unchanged`). Returns what the
/// instance was for the report.
pub fn completed(
    entry: &'static Entry,
    class: &Class,
    chosen: Option<usize>,
    ran: usize,
    unchanged: bool,
    ticks: u64,
    now: u64,
) -> Measured {
    let now_episode = EPISODES.fetch_add(1, Ordering::Relaxed);
    let mut t = lock(&class.tuner);
    let t = &mut *t;
    t.instances += 1;
    let instance = Instance {
        ran,
        previous: t.last.replace((now, ran)),
        ticks,
        now,
    };
    let timing = runtime::config().halo_tuning.timing;
    if let Some(p) = &mut t.production {
        // A `neighbor` trial compares the collective with this rank's winner, instance by
        // instance.
        if let Some(start) = instance.start(timing) {
            agreement::sample(ran == NEIGHBOR, now.saturating_sub(start));
        }
        if let Some((predicted, realised)) = p.observe(&instance) {
            // A prediction being verified is production's first window after it (and its
            // trial's).
            match verifying(&t.prediction) {
                Some(predicted_us) => safety_net(t, predicted, predicted_us, realised),
                None => self_check(t, predicted, realised),
            }
        } else if let Some((predicted, realised)) = p.end_unmeasured_trial() {
            match verifying(&t.prediction) {
                // The winner missed, and nothing says the machine is to blame.
                Some(predicted_us) => {
                    safety_net_settles(&mut t.prediction, None, false);
                    dismiss(t, predicted_us, realised);
                }
                // No evidence against the winner.
                None => t.checked = Some((predicted, realised, None, Verdict::Kept)),
            }
        } else if let Some(next) = p.lead_check(&instance, t.timing.unwrap_or(timing)) {
            // The winner is the lead check's now, not a settled runner-up's.
            t.reason = None;
            t.timeline.push(Mark::Decision {
                call: t.instances,
                winner: next,
            });
        } else if let Some(realised) = p.watch(&instance, t.timing.unwrap_or(timing)) {
            drift_check(t, realised);
        }
        return Measured::Sample;
    }
    let Some(search) = &mut t.search else {
        let born = *t.born.get_or_insert(now_episode);
        let warm = t.instances >= runtime::config().halo_tuning.warmup;
        // A predicted class costs no search: the budget does not hold it back.
        if warm && !std::mem::replace(&mut t.consulted, true) && start_predicted(t, class) {
            return Measured::Other;
        }
        if warm && worth_searching(t, born, now_episode) {
            start_search(t);
        }
        return Measured::Other;
    };
    t.search_instances += 1;
    let (codelet, measured) = search.next;
    let Some(chosen) = chosen.filter(|&c| c == codelet) else {
        return Measured::Search;
    };
    let start = instance.start(search.sampler.timing);
    let decided = if unchanged {
        // Its samples would be native's.
        entry.note(format!(
            "halo codelet {} left the search: it changes nothing in this episode",
            CODELETS[chosen].name
        ));
        search.drop_next()
    } else if ran == chosen && (start.is_some() || !measured) {
        search.misses = 0;
        let start = start.unwrap_or(now.saturating_sub(ticks));
        search.sampler.ran(start, now, ticks);
        // The block's last instance ends its sample (period: at this completion, which is
        // where the next instance's period starts).
        if let Some((codelet, ticks)) = search.sampler.close(now) {
            t.timeline.push(Mark::Sample {
                call: t.instances,
                codelet,
                ticks,
            });
        }
        search.advance()
    } else if ran == chosen {
        // A measured period whose previous instance ran another codelet: run it again.
        None
    } else {
        search.misses += 1;
        if search.misses < MAX_MISSES {
            None
        } else {
            entry.note(format!(
                "halo codelet {} did not apply to this episode's messages (requires {})",
                CODELETS[chosen].name,
                CODELETS[chosen].requirements()
            ));
            search.drop_next()
        }
    };
    if let Some(winner) = decided {
        decide(t, winner);
    }
    Measured::Search
}

/// An instance of a class as it completed: it ran `ran` and ended at clock `now` after `ticks`;
/// `previous` is the class's completion before it (clock and codelet).
struct Instance {
    ran: usize,
    previous: Option<(u64, usize)>,
    ticks: u64,
    now: u64,
}

impl Instance {
    /// Where the instance started, timed with `timing`: `period`, at the previous completion of
    /// its class if that ran the same codelet (None otherwise); else at its first post.
    fn start(&self, timing: Timing) -> Option<u64> {
        match timing {
            Timing::Period => self
                .previous
                .filter(|&(_, codelet)| codelet == self.ran)
                .map(|(at, _)| at),
            Timing::Local | Timing::Barrier => Some(self.now.saturating_sub(self.ticks)),
        }
    }

    /// The instance's time, timed with `timing`, if it ran `running` and `timing` can time it
    /// (period: after an instance of the same codelet).
    fn time(&self, running: usize, timing: Timing) -> Option<u64> {
        let start = self.start(timing).filter(|_| self.ran == running)?;
        Some(self.now.saturating_sub(start))
    }

    /// Adds the instance to `span`, a measurement of `running` timed with `timing`. Returns
    /// whether it did; an instance of another codelet, or one `timing` cannot time (period:
    /// after an instance of another codelet), starts `span` afresh.
    fn extend(&self, span: &mut Span, running: usize, timing: Timing) -> bool {
        let start = (self.ran == running).then(|| self.start(timing)).flatten();
        match start {
            Some(start) => span.add(start, self.ticks),
            None => *span = Span::default(),
        }
        start.is_some()
    }
}

/// Starts class `class` (tuner `t`) in production with the winner the history recorded for its
/// episode on this rank, if it did and the winner may run here. Returns whether it started.
fn start_predicted(t: &mut EpisodeTuner, class: &Class) -> bool {
    let Some(recorded) = history::recorded(&class.episode) else {
        return false;
    };
    let candidates = Search::candidates();
    let names = codelets::names(Op::Halo);
    let winner = candidates
        .iter()
        .map(|c| c.index)
        .find(|&i| names[i] == recorded.winner);
    let (Some(winner), Some(predicted_us)) = (winner, recorded.predicted_us()) else {
        return false;
    };
    let settings = runtime::config().halo_tuning;
    // A decision reached with the other timing (`halo::latest`) is verified as that search
    // timed it, and a search its safety net dismisses times the same way.
    let timing = Timing::parse(&recorded.timing).unwrap_or(settings.timing);
    if timing != settings.timing {
        t.timing = Some(timing);
    }
    let estimate_us = recorded.winner_estimate().map(|e| e.us);
    t.prediction = Some(HistoryPrediction {
        // The same rank's identical episode: the closest entry, at distance 0.
        predictor: "closest".to_string(),
        from: vec![HistorySource {
            comm_size: recorded.episode.comm_size,
            bytes: recorded.episode.bytes,
            how: recorded.how.name().to_string(),
        }],
        winner: recorded.winner.clone(),
        predicted_us,
        measured_us: None,
        estimate_us: recorded.realised_us.and(estimate_us),
        pmax: runtime::config().pmax,
        outcome: VERIFYING.to_string(),
        saved_instances: sampling::search_instances(
            candidates.len(),
            timing,
            settings.block as usize,
            settings.samples,
        ),
        trial: None,
    });
    let ticks = predicted_us * 1e3 / clock::ns_per_tick();
    let checked = Prediction {
        winner: ticks,
        runner_up: None,
        third: None,
        paced: None,
        timing,
    };
    let mut production = Production::new(winner, Some(checked), Lead::default());
    // The entry's runner-up among the codelets that may run here, else native.
    production.alternative = recorded
        .estimates
        .iter()
        .filter(|e| e.codelet != recorded.winner)
        .filter_map(|e| {
            Some((
                candidates.iter().find(|c| names[c.index] == e.codelet)?,
                e.us,
            ))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c.index)
        .or((winner != NATIVE).then_some(NATIVE));
    t.production = Some(production);
    t.timeline.push(Mark::Decision {
        call: t.instances,
        winner,
    });
    true
}

/// The safety net of a class that started from the history's prediction (`predicted`: of
/// `predicted_us` per episode), whose winner realised `realised` ticks per episode in its first
/// window: within COMMTUNE_PMAX confirms it (production goes on, as after a search its
/// self-check kept). Slower, the entry's runner-up (else native) runs the next window, and
/// this is called again at its end (with `realised` the alternative's), and, if the
/// alternative did clearly better, once more after a window of the winner: an alternative
/// that does not do clearly better than the winner in the windows around its trial
/// (`trial::Around::beaten_on_both_sides`) keeps the prediction: the machine is slower than
/// when the history measured the winner, not the winner alone. One that does, or no
/// alternative, dismisses it, and the class is searched from here.
fn safety_net(t: &mut EpisodeTuner, predicted: Prediction, predicted_us: f64, realised: f64) {
    let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
    let Some(p) = &mut t.production else {
        return;
    };
    let Some(trial) = p.trial.take() else {
        if safety_net_holds(&mut t.prediction, predicted_us, us(realised)) {
            return;
        }
        if let Some(alternative) = p.alternative {
            p.start_trial(alternative, predicted, realised);
            return;
        }
        safety_net_settles(&mut t.prediction, None, false);
        return dismiss(t, predicted_us, realised);
    };
    let gain = trial::prediction_gain(runtime::config().halo_tuning.min_gain);
    let around = match trial.ended(realised, gain) {
        Ended::Judged(around) => around,
        Ended::WinnerNext(trial) => {
            p.trial = Some(trial);
            p.predicted = Some(predicted);
            p.instances = 0;
            return;
        }
    };
    let kept = !around.beaten_on_both_sides(gain);
    let tried = PredictionTrial {
        codelet: CODELETS[around.codelet].name.to_string(),
        measured_us: us(around.tried),
        winner_after_us: around.after.map(us),
    };
    safety_net_settles(&mut t.prediction, Some(tried), kept);
    if !kept {
        dismiss(t, predicted_us, around.winner_fastest());
    }
}

/// The safety net dismissed the prediction of `predicted_us` per episode of `t`, whose winner
/// realised `realised` ticks per episode: the class is searched from here.
fn dismiss(t: &mut EpisodeTuner, predicted_us: f64, realised: f64) {
    t.timeline.push(Mark::Drift {
        call: t.instances,
        ratio: realised * clock::ns_per_tick() * 1e-3 / predicted_us,
        reopened: true,
    });
    t.production = None;
    start_search(t);
}

/// A drift check of the decision of `t`, whose winner realised `realised` ticks per instance
/// since the last check: the first span is the baseline; strikes in a row search again
/// (`check::Drift`).
fn drift_check(t: &mut EpisodeTuner, realised: f64) {
    let settings = runtime::config().halo_tuning;
    let Some(p) = &mut t.production else {
        return;
    };
    let ratio = p.drift.ratio(Some(realised));
    let reopen = p.drift.record(ratio, settings.drift_threshold, t.reopened);
    p.next_drift = p.watched + p.drift.spacing(settings.drift_interval);
    t.timeline.push(Mark::Drift {
        call: t.instances,
        ratio,
        reopened: reopen,
    });
    if reopen {
        t.reopened += 1;
        // The check of the decision that drifted is not the next one's.
        t.checked = None;
        t.production = None;
        start_search(t);
    }
}

/// Starts a search of `t`, with the timing a self-check chose if one did.
fn start_search(t: &mut EpisodeTuner) {
    let timing = t.timing.unwrap_or(runtime::config().halo_tuning.timing);
    t.reason = None;
    t.search = Some(Search::new(timing));
    t.searches += 1;
    t.timeline.push(Mark::Search {
        call: t.instances + 1,
        search: t.searches,
    });
}

/// The search of `t` decided `winner`: production, with a self-check to come.
fn decide(t: &mut EpisodeTuner, winner: usize) {
    let Some(search) = t.search.take() else {
        return;
    };
    let predicted = search.sampler.prediction(winner);
    let plan = &search.sampler.plan;
    let lead = Lead::new(
        plan.candidates
            .iter()
            .filter_map(|c| Some((c.index, plan.estimate(c.index)?.location))),
    );
    t.production = Some(Production::new(winner, predicted, lead));
    t.decided = Some(search.sampler.plan);
    t.timeline.push(Mark::Decision {
        call: t.instances,
        winner,
    });
}

/// Judges the decision of `t` from the `realised` time per instance of the codelet running in
/// production: the winner's, after which a miss puts the runner-up on trial, or the runner-up's
/// at the end of its trial. A wrong decision searches again with the other timing, or keeps the
/// runner-up that beat it.
fn self_check(t: &mut EpisodeTuner, predicted: Prediction, realised: f64) {
    let settings = runtime::config().halo_tuning;
    let Some(p) = &mut t.production else {
        return;
    };
    let winner = p.winner;
    let (winner_realised, runner_up_realised, verdict) = match p.trial.take() {
        Some(trial) => {
            let verdict = predicted.judge_trial(trial.before, realised, settings.min_gain, t.wrong);
            (trial.before, Some(realised), verdict)
        }
        None => match predicted.assess(realised, settings.min_gain) {
            Judgement::Trial(runner_up) => {
                p.start_trial(runner_up, predicted, realised);
                return;
            }
            Judgement::Verdict(verdict) => (realised, None, verdict),
        },
    };
    p.lead.measured(winner, winner_realised);
    if let (Some(realised), Some((runner_up, _))) = (runner_up_realised, predicted.runner_up) {
        p.lead.measured(runner_up, realised);
    }
    t.checked = Some((predicted, winner_realised, runner_up_realised, verdict));
    let Some((mark, next)) = verdict.wrong(t.instances, winner_realised, predicted.winner) else {
        return;
    };
    t.wrong += 1;
    t.timeline.push(mark);
    match next {
        check::Next::Search(timing) => {
            t.timing = Some(timing);
            t.production = None;
            start_search(t);
        }
        check::Next::Settle(codelet) => {
            t.reason = Some(check::RUNNER_UP_KEPT);
            let lead = std::mem::take(&mut p.lead);
            let mut production = Production::new(codelet, None, lead);
            production.replaced = Some(winner);
            t.production = Some(production);
        }
    }
}

impl Production {
    fn new(winner: usize, predicted: Option<Prediction>, lead: Lead) -> Production {
        Production {
            winner,
            predicted,
            trial: None,
            replaced: None,
            alternative: None,
            instances: 0,
            window: Span::default(),
            watched: 0,
            next_drift: runtime::config().halo_tuning.drift_interval,
            span: Span::default(),
            drift: Drift::default(),
            lead,
            lead_window: LeadWindow::default(),
            led: false,
            led_realised: None,
        }
    }

    /// The codelet production runs: the winner, or the codelet on trial during its window.
    fn running(&self) -> usize {
        self.trial.map_or(self.winner, |t| t.running(self.winner))
    }

    /// The winner realised `realised` and missed `predicted`: the runner-up runs the next window.
    fn start_trial(&mut self, runner_up: usize, predicted: Prediction, realised: f64) {
        self.trial = Some(Trial::new(runner_up, realised));
        self.predicted = Some(predicted);
        self.instances = 0;
    }

    /// Ends a trial that ran for four windows without one of the runner-up's in a row (it
    /// posted natively): production goes back to the winner. Returns the prediction and the
    /// winner's realised time.
    fn end_unmeasured_trial(&mut self) -> Option<(Prediction, f64)> {
        // The winner's own window after a safety net's trial is measured as any of the winner's.
        let winner_realised = self.trial.filter(|t| t.tried.is_none())?.before;
        if self.instances <= 4 * check::window(runtime::config().halo_tuning.drift_interval) + 1 {
            return None;
        }
        self.trial = None;
        Some((self.predicted.take()?, winner_realised))
    }

    /// A production instance completed. Returns the prediction and the realised time of the
    /// codelet running once the self-check's window is complete: its instances 2 to 17 after the
    /// switch (the first pays for the codelet before), timed as the search timed; an instance
    /// that ran another codelet restarts the window.
    fn observe(&mut self, instance: &Instance) -> Option<(Prediction, f64)> {
        let predicted = self.predicted?;
        self.instances += 1;
        if self.instances < 2 {
            return None;
        }
        let running = self.running();
        if !instance.extend(&mut self.window, running, predicted.timing) {
            return None;
        }
        let full = check::window(runtime::config().halo_tuning.drift_interval);
        if self.window.instances < full {
            return None;
        }
        let realised = self.window.realised(predicted.timing, instance.now);
        self.predicted = None;
        self.window = Span::default();
        Some((predicted, realised))
    }

    /// A production instance after the self-check (or the safety net): after each whole window
    /// of `check::LEAD_WINDOWS` self-check windows of the winner, timed with `timing` (the
    /// decision's) and its first instance after a switch left out, the lead check. Returns the
    /// codelet that leads now if it is another: it runs from the next instance, with a drift
    /// watch of its own.
    fn lead_check(&mut self, instance: &Instance, timing: Timing) -> Option<usize> {
        if self.predicted.is_some() || self.trial.is_some() {
            return None;
        }
        let after_switch = instance.previous.is_none_or(|(_, c)| c != instance.ran);
        match instance.time(self.winner, timing) {
            Some(ticks) if !after_switch => self.lead_window.add(ticks),
            _ => {
                self.lead_window.clear();
                return None;
            }
        }
        let interval = runtime::config().halo_tuning.drift_interval;
        if self.lead_window.instances() < check::LEAD_WINDOWS * check::window(interval) {
            return None;
        }
        let realised = self.lead_window.realised();
        self.lead_window.clear();
        let Some(next) = self.lead.follow(self.winner, realised) else {
            self.led_realised = self.led.then_some(realised);
            return None;
        };
        self.winner = next;
        self.led = true;
        self.led_realised = None;
        self.span = Span::default();
        self.drift = Drift::default();
        self.next_drift = self.watched + interval;
        Some(next)
    }

    /// A production instance of a decision that neither a self-check, a trial nor the safety
    /// net is measuring: returns the winner's realised time per instance over the
    /// COMMTUNE_DRIFT_INTERVAL instances before a drift check once it is due (timed with
    /// `timing`, the decision's): recent, and long enough to take in stalls that come a few times
    /// in a hundred. An instance that ran another codelet (a `neighbor` trial) starts the span
    /// afresh, and the check waits for a whole one.
    fn watch(&mut self, instance: &Instance, timing: Timing) -> Option<f64> {
        if self.predicted.is_some() || self.trial.is_some() {
            return None;
        }
        let interval = runtime::config().halo_tuning.drift_interval;
        self.watched += 1;
        if self.watched + interval <= self.next_drift {
            return None;
        }
        if !instance.extend(&mut self.span, self.winner, timing) {
            self.next_drift = self.next_drift.max(self.watched + interval);
            return None;
        }
        if self.watched < self.next_drift {
            return None;
        }
        let realised = self.span.realised(timing, instance.now);
        self.span = Span::default();
        Some(realised)
    }
}

impl Search {
    /// The halo codelets a search tries (`neighbor` is tried by agreement, see `agreement`).
    fn candidates() -> Vec<Candidate> {
        let config = runtime::config();
        (0..CODELETS.len())
            .filter(|&c| c == NATIVE || (c != NEIGHBOR && !config.excluded(Op::Halo, c)))
            .map(|index| Candidate {
                index,
                partners: Partners::Pair,
                collectives: false,
            })
            .collect()
    }

    fn new(timing: Timing) -> Search {
        let settings = runtime::config().halo_tuning;
        let plan = Plan::halo(settings.search, Search::candidates(), settings.samples);
        let mut search = Search {
            sampler: Sampler::new(plan, timing, settings.block as usize),
            next: (NATIVE, false),
            misses: 0,
        };
        // A first round is never empty (native is always a candidate): no decision yet.
        search.advance();
        search
    }

    /// Moves to the next instance of the schedule, ending rounds on the way: the winner once
    /// the policy decides.
    fn advance(&mut self) -> Option<usize> {
        let settings = runtime::config().halo_tuning;
        loop {
            match self.sampler.turn() {
                Turn::Run {
                    codelet, measured, ..
                } => {
                    self.next = (codelet, measured);
                    return None;
                }
                Turn::RoundEnd => {
                    let estimates = self
                        .sampler
                        .estimates_sharing_tails(settings.filter, |c| CODELETS[c].bursts);
                    let next = self
                        .sampler
                        .after_round(&estimates, false, settings.min_gain);
                    if let Next::Decide(winner) = next {
                        return Some(winner);
                    }
                }
            }
        }
    }

    /// The codelet being tried cannot run this episode: it leaves the race (native never does:
    /// it always applies).
    fn drop_next(&mut self) -> Option<usize> {
        self.sampler.drop_candidate(self.next.0);
        self.misses = 0;
        self.advance()
    }
}

/// Why an episode of fewer than two messages (to peers other than `MPI_PROC_NULL`) is never
/// tuned: the report's note of such an episode and the reason of its key.
pub const NOT_AN_EXCHANGE: &str =
    "halo codelets reorder, batch or repackage an exchange's messages";

/// Whether this rank decided its codelet for `entry`.
pub fn is_settled(entry: &Entry) -> bool {
    let Some(class) = CLASS_OF.get(&entry.id()).map(|c| c.clone()) else {
        return false;
    };
    lock(&class.tuner).production.is_some()
}

/// The report's view of `entry`'s tuning (this rank's: halo decisions are per rank).
pub fn report(entry: &Entry, ns_per_tick: f64) -> TuningData {
    let warmup = runtime::config().halo_tuning.warmup;
    let names = codelets::names(Op::Halo);
    let class = CLASS_OF.get(&entry.id()).map(|c| c.clone());
    let Some(t) = class.as_ref().map(|c| lock(&c.tuner)) else {
        // Every completed episode of a tunable key has a class: one called without is one
        // whose episodes never had two messages (`episode`'s `exchange`).
        let (stage, reason) = match entry.calls() {
            0 => (Stage::Warmup, warmup_reason(0, warmup)),
            _ => (
                Stage::Untuned,
                format!(
                    "not tuned: no episode had two messages to or from other ranks \
                     ({NOT_AN_EXCHANGE})"
                ),
            ),
        };
        return Progress {
            stage,
            reason: Some(reason),
            plan: None,
            search_instances: 0,
            searches: 0,
            timeline: None,
        }
        .data(&names, ns_per_tick);
    };
    let stage = match (&t.production, &t.search) {
        // `neighbor` is chosen by the ranks together, over this rank's own winner.
        (Some(_), _) if agreement::chosen(entry) => Stage::Production(NEIGHBOR),
        (Some(p), _) => Stage::Production(p.winner),
        (None, Some(_)) => Stage::Search,
        (None, None) => Stage::Warmup,
    };
    let reason = match t.not_worth {
        _ if stage != Stage::Warmup => t.reason.map(String::from),
        Some(not_worth) if t.instances >= warmup => Some(not_worth_reason(&not_worth)),
        _ => Some(warmup_reason(t.instances, warmup)),
    };
    let mut data = Progress {
        stage,
        reason,
        plan: t
            .search
            .as_ref()
            .map(|s| &s.sampler.plan)
            .or(t.decided.as_ref()),
        search_instances: t.search_instances,
        searches: t.searches,
        timeline: Some(&t.timeline),
    }
    .data(&names, ns_per_tick);
    data.check = t.checked.map(|(predicted, realised, runner_up, verdict)| {
        predicted.report(realised, runner_up, verdict, &names, ns_per_tick)
    });
    data.prediction = t.prediction.clone();
    data
}

/// What each of this rank's classes in production decided (once per class), for the history:
/// a search's decision (its self-check's realised time if it ran; the runner-up, with its
/// trial's, when the self-check replaced the winner with it), or a prediction the safety net
/// confirmed, each with the timing its estimates were measured with. Not: a prediction not yet
/// verified.
pub fn decided() -> Vec<Decided> {
    let mut seen = rustc_hash::FxHashSet::default();
    CLASS_OF
        .iter()
        .map(|c| c.value().clone())
        .filter(|class| seen.insert(class.id))
        .filter_map(|class| decision(&class))
        .collect()
}

/// What `class` decided, if it is to be recorded (see `decided`).
fn decision(class: &Class) -> Option<Decided> {
    let names = codelets::names(Op::Halo);
    let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
    let t = lock(&class.tuner);
    let p = t.production.as_ref()?;
    // A reason says why production is not a decision, except the self-check's replacement
    // (`check::RUNNER_UP_KEPT`, for the report), which is the search's decision corrected.
    if t.reason.is_some() && p.replaced.is_none() {
        return None;
    }
    let confirmed = t
        .prediction
        .as_ref()
        .filter(|h| prediction_stands(h) && t.searches == 0);
    let (estimates, realised_us, how) = match (confirmed, &t.decided) {
        (Some(h), _) => (
            vec![commtune_report::CodeletEstimate {
                name: h.winner.clone(),
                estimate_us: confirmed_estimate(h),
                error_us: 0.0,
            }],
            h.measured_us,
            How::PredictionConfirmed,
        ),
        // A winner a lead check chose: its latest window since.
        (None, Some(plan)) if p.led => (
            plan.report_estimates(&names, clock::ns_per_tick()),
            p.led_realised.map(us),
            How::Search,
        ),
        (None, Some(plan)) => (
            plan.report_estimates(&names, clock::ns_per_tick()),
            // A check of this decision (one that reopened the search judged the one before):
            // the winner's realised time, or the runner-up's trial that replaced the winner.
            t.checked
                .and_then(|(_, realised, runner_up, verdict)| match verdict {
                    Verdict::Kept => Some(realised),
                    Verdict::RunnerUp(_) => runner_up,
                    Verdict::Reopen(_) => None,
                })
                .map(us),
            How::Search,
        ),
        _ => return None,
    };
    let replaced =
        p.replaced
            .filter(|_| !p.led)
            .zip(t.checked)
            .map(|(codelet, (_, realised, _, _))| Replaced {
                codelet: names[codelet].to_string(),
                realised_us: us(realised),
            });
    Some(Decided {
        episode: class.episode.clone(),
        signature: class.signature.clone(),
        estimates,
        timing: t.timing.unwrap_or(runtime::config().halo_tuning.timing),
        realised_us,
        winner: names[p.winner],
        replaced,
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::{DISMISSED, KEPT};

    /// A class of the communicator handles `comms` in the table, in production with `winner`.
    fn tuned(id: u64, comms: Vec<usize>, winner: usize) -> Arc<Class> {
        let class = Arc::new(Class {
            id,
            comms,
            live: AtomicBool::new(true),
            tuner: Mutex::default(),
            episode: Episode {
                comm_size: 1,
                rank: 0,
                shape: String::new(),
                messages: 0,
                bytes: 0,
            },
            signature: String::new(),
        });
        lock(&class.tuner).production = Some(Production::new(winner, None, Lead::default()));
        TUNING.insert(id, class.clone());
        class
    }

    /// A class not in the tables, with nothing tuned yet.
    fn untuned() -> Class {
        Class {
            id: 0,
            comms: Vec::new(),
            live: AtomicBool::new(true),
            tuner: Mutex::default(),
            episode: Episode {
                comm_size: 2,
                rank: 1,
                shape: "0123456789abcdef".into(),
                messages: 2,
                bytes: 1024,
            },
            signature: String::new(),
        }
    }

    /// A class (not in the tables) that the history predicted to run `pairwise` at 100 µs per
    /// episode, in production with it, its safety net to come, which tries native after a miss.
    fn predicted() -> Class {
        let class = untuned();
        let pairwise = crate::codelets::halo::PAIRWISE;
        {
            let mut t = lock(&class.tuner);
            t.prediction = Some(HistoryPrediction {
                predictor: "closest".into(),
                from: Vec::new(),
                winner: CODELETS[pairwise].name.into(),
                predicted_us: 100.0,
                measured_us: None,
                estimate_us: Some(90.0),
                pmax: 0.1,
                outcome: VERIFYING.into(),
                saved_instances: 8,
                trial: None,
            });
            let mut production = Production::new(pairwise, None, Lead::default());
            production.alternative = Some(NATIVE);
            t.production = Some(production);
        }
        class
    }

    /// What the safety net of `predicted` checks: 100 µs per episode.
    fn predicted_time() -> Prediction {
        Prediction {
            winner: ticks(100.0),
            runner_up: None,
            third: None,
            paced: None,
            timing: Timing::Period,
        }
    }

    /// Clock ticks of `us` microseconds.
    fn ticks(us: f64) -> f64 {
        us * 1e3 / clock::ns_per_tick()
    }

    #[test]
    fn a_prediction_within_pmax_is_confirmed_and_recorded_as_such() {
        let class = predicted();
        assert!(decision(&class).is_none(), "not recorded while verifying");
        let mut t = lock(&class.tuner);
        safety_net(&mut t, predicted_time(), 100.0, ticks(105.0));
        let prediction = t.prediction.clone().unwrap();
        assert_eq!(prediction.outcome, "confirmed");
        assert_eq!(prediction.saved_instances, 8);
        assert!((prediction.measured_us.unwrap() - 105.0).abs() < 1e-6);
        assert!(t.production.is_some() && t.search.is_none());
        drop(t);
        let d = decision(&class).expect("a confirmed prediction is recorded");
        assert_eq!((d.how, d.winner), (How::PredictionConfirmed, "pairwise"));
        assert_eq!(d.estimates.len(), 1);
        assert_eq!(d.estimates[0].estimate_us, 90.0, "the searches' estimate");
        assert!((d.realised_us.unwrap() - 105.0).abs() < 1e-6);
        assert_eq!((d.episode.rank, d.episode.bytes), (1, 1024));
    }

    #[test]
    fn a_prediction_beyond_pmax_with_no_alternative_is_dismissed_and_searched() {
        let class = predicted();
        let mut t = lock(&class.tuner);
        t.production.as_mut().unwrap().alternative = None;
        safety_net(&mut t, predicted_time(), 100.0, ticks(150.0));
        let prediction = t.prediction.clone().unwrap();
        assert_eq!(prediction.outcome, DISMISSED);
        assert_eq!(prediction.saved_instances, 0);
        assert!(t.production.is_none() && t.search.is_some());
        assert_eq!(t.searches, 1);
        drop(t);
        assert!(decision(&class).is_none(), "searching: nothing decided yet");
    }

    /// The prediction of `predicted` missed (150 µs against 100); its trial of native measured
    /// `native_us`.
    fn tried(native_us: f64) -> Class {
        let class = predicted();
        let mut t = lock(&class.tuner);
        safety_net(&mut t, predicted_time(), 100.0, ticks(150.0));
        assert_eq!(verifying(&t.prediction), Some(100.0), "verifying still");
        assert_eq!(t.production.as_ref().map(Production::running), Some(NATIVE));
        safety_net(&mut t, predicted_time(), 100.0, ticks(native_us));
        drop(t);
        class
    }

    /// The prediction's outcome is `outcome` after its trial of native, which measured
    /// `native_us` and saved `saved` search instances: the trial as reported.
    fn native_trial(
        t: &EpisodeTuner,
        outcome: &str,
        saved: u64,
        native_us: f64,
    ) -> PredictionTrial {
        let prediction = t.prediction.clone().unwrap();
        assert_eq!(prediction.outcome, outcome);
        assert_eq!(prediction.saved_instances, saved);
        let trial = prediction.trial.expect("the trial is reported");
        assert_eq!(trial.codelet, "native");
        assert!((trial.measured_us - native_us).abs() < 1e-6);
        trial
    }

    #[test]
    fn a_missed_prediction_that_native_does_not_beat_is_kept() {
        let class = tried(160.0);
        let t = lock(&class.tuner);
        let trial = native_trial(&t, KEPT, 8, 160.0);
        assert_eq!(
            trial.winner_after_us, None,
            "native did not beat the winner: no window after"
        );
        let pairwise = crate::codelets::halo::PAIRWISE;
        assert_eq!(
            t.production.as_ref().map(Production::running),
            Some(pairwise)
        );
        assert!(t.search.is_none());
        drop(t);
        let d = decision(&class).expect("a kept prediction is recorded");
        assert_eq!((d.how, d.winner), (How::PredictionConfirmed, "pairwise"));
        assert!(
            (d.realised_us.unwrap() - 150.0).abs() < 1e-6,
            "its time now"
        );
    }

    /// `tried(native_us)`, native beating the winner's 150 µs: the winner runs one more window,
    /// which measured `returned_us`.
    fn tried_and_returned(native_us: f64, returned_us: f64) -> Class {
        let class = tried(native_us);
        let mut t = lock(&class.tuner);
        assert_eq!(verifying(&t.prediction), Some(100.0), "verifying still");
        let pairwise = crate::codelets::halo::PAIRWISE;
        assert_eq!(
            t.production.as_ref().map(Production::running),
            Some(pairwise),
            "the winner again"
        );
        safety_net(&mut t, predicted_time(), 100.0, ticks(returned_us));
        drop(t);
        class
    }

    #[test]
    fn a_prediction_native_beat_once_is_kept_when_the_winner_does_better_after() {
        // The window that missed held a lost time slice: the one after the trial does not.
        let class = tried_and_returned(100.0, 98.0);
        let t = lock(&class.tuner);
        let trial = native_trial(&t, KEPT, 8, 100.0);
        assert!(
            (trial.winner_after_us.unwrap() - 98.0).abs() < 1e-6,
            "the window that kept it"
        );
        assert!(t.search.is_none());
    }

    #[test]
    fn a_missed_prediction_that_native_beats_is_dismissed_and_searched() {
        let class = tried_and_returned(100.0, 150.0);
        let t = lock(&class.tuner);
        native_trial(&t, DISMISSED, 0, 100.0);
        assert!(t.production.is_none() && t.search.is_some());
        drop(t);
        assert!(decision(&class).is_none(), "searching: nothing decided yet");
    }

    #[test]
    fn a_runner_up_that_replaced_the_winner_is_recorded_with_both_realised_times() {
        let pairwise = crate::codelets::halo::PAIRWISE;
        let class = untuned();
        let predicted = Prediction {
            winner: ticks(10.0),
            runner_up: Some((NATIVE, ticks(20.0))),
            third: None,
            paced: None,
            timing: Timing::Local,
        };
        {
            let mut t = lock(&class.tuner);
            let mut plan = Plan::new(commtune_tune::Search::Brute, Search::candidates(), 2);
            let agreed = |us| commtune_tune::Agreed {
                location: ticks(us),
                error: ticks(1.0),
            };
            plan.estimates = vec![(NATIVE, agreed(20.0)), (pairwise, agreed(10.0))];
            t.decided = Some(plan);
            t.searches = 1;
            t.production = Some(Production::new(pairwise, Some(predicted), Lead::default()));
            // Pairwise realised 50 µs: native on trial, which takes its 21.
            self_check(&mut t, predicted, ticks(50.0));
            assert_eq!(t.production.as_ref().map(Production::running), Some(NATIVE));
            self_check(&mut t, predicted, ticks(21.0));
            assert_eq!(t.reason, Some(check::RUNNER_UP_KEPT));
        }
        let d = decision(&class).expect("the runner-up is recorded");
        assert_eq!((d.how, d.winner), (How::Search, "native"));
        let replaced = d.replaced.expect("with the winner it replaced");
        assert_eq!(replaced.codelet, "pairwise");
        assert!((replaced.realised_us - 50.0).abs() < 1e-6, "{replaced:?}");
        assert!((d.realised_us.unwrap() - 21.0).abs() < 1e-6, "the trial's");
        let names: Vec<&str> = d.estimates.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["native", "pairwise"], "the search's estimates");
    }

    #[test]
    fn a_search_the_self_check_reopened_is_recorded_as_the_one_after() {
        let pairwise = crate::codelets::halo::PAIRWISE;
        let class = untuned();
        let agreed = |us| commtune_tune::Agreed {
            location: ticks(us),
            error: ticks(1.0),
        };
        {
            let mut t = lock(&class.tuner);
            start_search(&mut t);
            let search = t.search.as_mut().unwrap();
            search.sampler.plan.estimates = vec![(NATIVE, agreed(20.0)), (pairwise, agreed(10.0))];
            decide(&mut t, pairwise);
            let first = t.production.as_ref().unwrap().predicted.unwrap();
            // Pairwise realised 50 µs, native 30 in its trial: both missed, search again.
            self_check(&mut t, first, ticks(50.0));
            self_check(&mut t, first, ticks(30.0));
            assert!(t.production.is_none() && t.search.is_some());
            // The halo's default timing is `period`: the other is `local`.
            assert_eq!(t.timing, Some(Timing::Local));
            let search = t.search.as_mut().unwrap();
            search.sampler.plan.estimates = vec![(NATIVE, agreed(28.0)), (pairwise, agreed(45.0))];
            decide(&mut t, NATIVE);
        }
        let d = decision(&class).expect("the second search decided");
        assert_eq!((d.winner, d.timing), ("native", Timing::Local));
        assert_eq!(
            d.realised_us, None,
            "the check that reopened judged the first"
        );
        assert!(
            (d.estimates[0].estimate_us - 28.0).abs() < 1e-6,
            "{:?}",
            d.estimates
        );
        {
            let mut t = lock(&class.tuner);
            let second = t.production.as_ref().unwrap().predicted.unwrap();
            self_check(&mut t, second, ticks(29.0));
        }
        let d = decision(&class).expect("kept");
        assert_eq!(
            (d.winner, d.timing, d.how),
            ("native", Timing::Local, How::Search)
        );
        assert!(
            (d.realised_us.unwrap() - 29.0).abs() < 1e-6,
            "the second check's"
        );
        assert!(d.replaced.is_none());
    }

    #[test]
    fn freeing_a_communicator_drops_its_classes_only() {
        let pack = crate::codelets::halo::PACK;
        let alone = tuned(u64::MAX - 1, vec![0x10], pack);
        let shared = tuned(u64::MAX - 2, vec![0x10, 0x20], pack);
        let other = tuned(u64::MAX - 3, vec![0x30], pack);
        assert_eq!(choose(&alone), pack);
        comm_freed(0x10);
        assert!(!alone.is_live() && !shared.is_live() && other.is_live());
        assert!(TUNING.get(&alone.id).is_none() && TUNING.get(&shared.id).is_none());
        assert!(TUNING.get(&other.id).is_some());
        // An episode predicted to be in a dropped class runs native: its handle now belongs
        // to another communicator, whose classes search afresh.
        assert_eq!(choose(&alone), NATIVE);
        assert_eq!(choose(&other), pack);
    }
}
