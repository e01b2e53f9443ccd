//! Checks of keys in production. The first after a prediction from the history is the safety net:
//! the predicted winner's measured time against the predicted time, and after a miss a trial of
//! `native` (of the prediction's runner-up where native is the winner), which keeps the prediction
//! unless it does clearly better (`trial::Around::beaten_on_both_sides`). The first after a
//! search's decision is the self-check: the winner's realised time against what the search
//! predicted, timed as the search timed and reduced over ranks alike; a decision it finds clearly
//! wrong reopens the search once with the other timing, and a second wrong one keeps the runner-up
//! that beat it in production. Later ones are drift checks (`check::Drift`): the median of the
//! window before each check against the first window's, reduced over ranks; a search reopens after
//! strikes in a row. They are lead checks too (`lead_check`): the window's mean against what
//! production last measured of the search's other best codelets.

use commtune_report::PredictionTrial;
use commtune_tune::Timing;
use commtune_tune::check::{self, AfterTrial, Judgement, Prediction, Verdict};
use commtune_tune::timeline::Mark;
use commtune_tune::trial::{self, Ended, Trial, Window};

use super::search::{candidates, search_step, start_search, trace};

use super::state::{
    CONFIRMED, CommTunerState, DISMISSED, KEPT, Phase, Production, Trialled, TunerState,
    safety_net_holds, safety_net_settles, verifying,
};
use super::{SlowCall, Step, consensus, knowledge};
use crate::codelets::{self, Operation};
use crate::{clock, runtime};

/// A drift check of a key in production (every rank is at the same call of it). Returns the
/// search step when the search reopens.
pub(super) fn drift_check<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
) -> Option<Step> {
    let settings = runtime::config().tuning;
    let timing = key.timing();
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    at.tuner.check_drift_at(at.k + settings.drift_interval);
    if let Some(trialled) = p.trial {
        return match trialled {
            Trialled::Decision { trial, predicted } => {
                let window = agreed_window(comm, p, predicted.timing)?;
                trial_check(at, comm, key, trial, predicted, window)
            }
            Trialled::Prediction {
                trial,
                timing,
                predicted_us,
            } => {
                let realised = check::realised(timing, p.window_start, &p.window, clock::now());
                let measured_us = agreed_us(comm, realised)?;
                safety_net_trial(at, comm, key, trial, timing, predicted_us, measured_us)
            }
        };
    }
    if p.drift.baseline.is_none()
        && let Some(predicted_us) = verifying(&key.prediction)
    {
        let ticks = check::realised(timing, p.window_start, &p.window, clock::now());
        let measured_us = agreed_us(comm, ticks)?;
        let verdict = safety_net(at, comm, key, predicted_us, measured_us);
        if verdict.is_some() || matches!(&key.phase, Phase::Production(p) if p.trial.is_some()) {
            return verdict;
        }
    }
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    if p.drift.baseline.is_none()
        && let Some(predicted) = p.predicted
    {
        let window = agreed_window(comm, p, predicted.timing)?;
        // A calibration (`commtune calibrate`) records what its search measured, timed as it
        // was asked to: its self-check measures production for the entry but never tries
        // another codelet nor searches again (with another timing, which it would discard).
        let (predicted, judgement) = if runtime::config().calibrate {
            (predicted, Judgement::Verdict(Verdict::Kept))
        } else {
            let faced = predicted.facing(&window, settings.min_gain);
            (faced, faced.assess_race(window.realised, settings.min_gain))
        };
        match judgement {
            Judgement::Trial(runner_up) => {
                let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
                trace(at.entry, || {
                    format!(
                        "self-check: predicted {:.0} us, realised {:.0} us",
                        us(predicted.winner),
                        us(window.realised)
                    )
                });
                let trial = Trialled::Decision {
                    trial: Trial::new(runner_up, window),
                    predicted,
                };
                start_trial(at, key, trial);
                return None;
            }
            Judgement::Verdict(verdict) => {
                if let Some(step) = judged(at, comm, key, predicted, window, None, verdict) {
                    return Some(step);
                }
            }
        }
    }
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    // The first check only sets the baseline (a ratio of 1 everywhere): no reduction. Every rank
    // has the same count of checks, so every rank skips it alike.
    let first = p.drift.baseline.is_none();
    let window = check::realised(timing, p.window_start, &p.window, clock::now());
    let ratio = drift_ratio(p);
    let mean = if first {
        1.0
    } else {
        consensus::drift(&comm.private?, ratio).ok()?
    };
    let reopen = p.drift.record(mean, settings.drift_threshold, key.reopened);
    trace(at.entry, || {
        format!(
            "drift check: mean ratio {mean:.2}, strikes {}",
            p.drift.strikes
        )
    });
    key.timeline.push(Mark::Drift {
        call: at.k,
        ratio: mean,
        reopened: reopen,
    });
    if reopen {
        key.reopened += 1;
        return search_again(at, comm, key);
    }
    // A winner whose median moved is the drift check's to judge; one whose median holds may
    // still stall.
    let steady = !first && mean <= 1.0 + settings.drift_threshold;
    if steady && lead_check(at, comm, key, window)? {
        return None;
    }
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    if !steady {
        p.lead_strikes = 0;
    }
    // `mean` and the lead's strikes are agreed, so every rank spaces its checks alike
    // (ARCHITECTURE.md, invariant 2); a lead strike brings the next check back as a drift
    // strike does.
    let spacing = if p.lead_strikes > 0 {
        settings.drift_interval
    } else {
        p.drift.spacing(settings.drift_interval)
    };
    at.tuner.check_drift_at(at.k + spacing);
    None
}

/// Searches the key at this call again (returns its step), or settles it on native when only
/// native applies.
fn search_again<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
) -> Option<Step> {
    let candidates = candidates::<C>(&at.call.facts());
    start_search(&at.place, comm, key, candidates).then(|| search_step(at, comm, key))
}

/// The window of production calls that just ended, timed with `timing` on this rank, agreed over
/// ranks (`consensus::window`): what a self-check and a decision's trial judge.
fn agreed_window(comm: &CommTunerState, p: &Production, timing: Timing) -> Option<Window> {
    let now = clock::now();
    let realised = check::realised(timing, p.window_start, &p.window, now);
    let share = check::call_share(p.window_start, &p.window, now);
    let median = check::median_call(&p.window).unwrap_or(0.0);
    consensus::window(&comm.private?, realised, share, median).ok()
}

/// `ticks` per call on this rank as microseconds, agreed (the maximum over ranks): what the
/// safety net compares with a predicted time, which every rank shares. Blocking, unlike a
/// checkpoint's reduction: started at the check and finished `checkpoints::FINISH_AFTER` calls later (as
/// `df7cb71` did), the finish is a drift check too, which waits while another key of the
/// communicator is searched, so a verdict started just before such a search came after it: in
/// tests/calibrate.rs a 100-call run ended with its prediction still verifying. It saved about
/// 50 us of an 8-byte second run on the 1 Gbit/s rig, within that benchmark's noise.
fn agreed_us(comm: &CommTunerState, ticks: f64) -> Option<f64> {
    consensus::slowest(&comm.private?, ticks * clock::ns_per_tick() * 1e-3).ok()
}

/// The safety net of a key that started from the history's prediction: its winner's measured
/// time per call (agreed: the maximum over ranks) within COMMTUNE_PMAX of the predicted time
/// confirms the prediction. Slower, its alternative (`Production::alternative`: native, or for
/// a predicted native the prediction's runner-up) runs the next window (`safety_net_trial`); with
/// none the prediction is dismissed and the key is searched (returns the search step).
fn safety_net<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    predicted_us: f64,
    measured_us: f64,
) -> Option<Step> {
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    let winner = p.winner;
    let confirmed = safety_net_holds(&mut key.prediction, predicted_us, measured_us);
    trace(at.entry, || {
        format!(
            "safety net of {}: predicted {predicted_us:.1} us, measured {measured_us:.1} us: {}",
            codelets::names(at.entry.op)[winner],
            if confirmed { CONFIRMED } else { "missed" }
        )
    });
    if confirmed {
        p.realised_us = Some(measured_us);
        knowledge::learn(at.entry, key);
        return None;
    }
    if let Some(codelet) = p.alternative {
        let trial = Trialled::Prediction {
            trial: Trial::new(codelet, measured_us),
            timing: key.timing(),
            predicted_us,
        };
        start_trial(at, key, trial);
        return None;
    }
    safety_net_settles(&mut key.prediction, None, false);
    dismissed(at, comm, key, measured_us / predicted_us)
}

/// The safety net's trial of its alternative (`Production::alternative`) after the predicted
/// winner missed `predicted_us` (its windows timed with `timing`): the window that just ended,
/// of `measured_us` per call (agreed), was the alternative's or the winner's after it. An
/// alternative that does not do clearly better than the winner in the windows around its trial
/// (`trial::Around::beaten_on_both_sides`) keeps the prediction: the machine is slower than when
/// the history measured the winner, not the winner alone. Otherwise it is dismissed and the key
/// is searched (returns the search step).
fn safety_net_trial<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    trial: Trial<f64>,
    timing: Timing,
    predicted_us: f64,
    measured_us: f64,
) -> Option<Step> {
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    let winner = p.winner;
    let gain = trial::prediction_gain(runtime::config().tuning.min_gain);
    let names = codelets::names(at.entry.op);
    let around = match trial.ended(measured_us, gain) {
        Ended::Judged(around) => around,
        Ended::WinnerNext(trial) => {
            trace(at.entry, || {
                format!(
                    "safety net's trial of {}: measured {measured_us:.1} us against the \
                     winner's {:.1} us: {} runs a window again",
                    names[trial.codelet], trial.before, names[winner]
                )
            });
            let again = Trialled::Prediction {
                trial,
                timing,
                predicted_us,
            };
            start_trial(at, key, again);
            return None;
        }
    };
    let kept = !around.beaten_on_both_sides(gain);
    end_trial(at, p);
    trace(at.entry, || {
        format!(
            "safety net's trial of {}: measured {:.1} us against the winner's {:.1} us{}: {}",
            names[around.codelet],
            around.tried,
            around.before,
            around
                .after
                .map_or(String::new(), |us| format!(" and {us:.1} us after it")),
            if kept { KEPT } else { DISMISSED }
        )
    });
    let tried = PredictionTrial {
        codelet: names[around.codelet].to_string(),
        measured_us: around.tried,
        winner_after_us: around.after,
    };
    safety_net_settles(&mut key.prediction, Some(tried), kept);
    if kept {
        p.realised_us = Some(around.before);
        knowledge::learn(at.entry, key);
        return None;
    }
    dismissed(at, comm, key, around.winner_fastest() / predicted_us)
}

/// The safety net dismissed the key's prediction, whose winner measured `ratio` times the
/// predicted time: the key is searched from here (returns the search step).
fn dismissed<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    ratio: f64,
) -> Option<Step> {
    key.timeline.push(Mark::Drift {
        call: at.k,
        ratio,
        reopened: true,
    });
    search_again(at, comm, key)
}

/// The lead check of a decision in production, at a drift check after the first that found its
/// median steady: the `window`'s mean per call (timed as the decision's search timed, the
/// maximum over ranks as its estimates) against what was last measured of each of the search's
/// three best codelets (`check::Lead`: its estimates, shifted by the winner's miss, then its
/// trials' and lead windows' times). The median the
/// drift check compares leaves out a winner's rare stalls, which its search's few samples and
/// its self-check's window can miss too: on the 1 Gbit/s rig, the 64 KiB alltoall's `linear`
/// realised 1.67 ms per call in its self-check's window and 2.16 ms over the 308 calls after it,
/// where `pairwise_excl` forced took 1.69. `check::LEAD_STRIKES` windows in a row with another
/// clearly ahead hand production over to it, on every rank at this call, since every rank holds
/// the same agreed times. Returns whether production switched (None: the reduction failed).
fn lead_check<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    window: f64,
) -> Option<bool> {
    let Phase::Production(p) = &mut key.phase else {
        return Some(false);
    };
    if p.lead.is_alone() {
        return Some(false);
    }
    let realised = consensus::slowest(&comm.private?, window).ok()?;
    if realised <= 0.0 {
        return Some(false);
    }
    let ahead = p.lead.follow(p.winner, realised);
    p.lead_strikes = if ahead.is_some() {
        p.lead_strikes + 1
    } else {
        0
    };
    let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
    if let Some(next) = ahead {
        let names = codelets::names(at.entry.op);
        trace(at.entry, || {
            format!(
                "lead check: {} realised {:.0} us, {} ahead (strike {} of {})",
                names[p.winner],
                us(realised),
                names[next],
                p.lead_strikes,
                check::LEAD_STRIKES
            )
        });
    }
    let Some(next) = ahead.filter(|_| p.lead_strikes >= check::LEAD_STRIKES) else {
        return Some(false);
    };
    // The history records the search's winner that production replaced (the first, after
    // several switches), and the new winner's realised time only where production measured it.
    p.replaced.get_or_insert((p.winner, us(realised)));
    p.realised_us = p
        .lead
        .latest(next)
        .and_then(|(time, measured)| measured.then(|| us(time)));
    p.winner = next;
    // The decision's self-check is behind it: the next check is the new winner's baseline.
    p.predicted = None;
    p.drift = check::Drift::default();
    p.lead_strikes = 0;
    key.reason = Some(check::LEAD_FOLLOWED);
    key.timeline.push(Mark::Decision {
        call: at.k,
        winner: next,
    });
    at.tuner
        .run(next, at.k + runtime::config().tuning.drift_interval);
    Some(true)
}

/// The window's median over the baseline (the first window's median); the window starts
/// afresh.
fn drift_ratio(p: &mut Production) -> f64 {
    let median = check::median_call(&std::mem::take(&mut p.window));
    p.window_start = None;
    p.drift.ratio(median)
}

/// The winner missed what was predicted, or won a close race: `trial`'s codelet runs the next
/// window of production calls, measured as the winner's was, before the decision is judged
/// (`trial_check` after a search: the trial replaces the search's estimate of the runner-up,
/// which shares whatever made the winner's miss, as a barrier before every sample hides the
/// skew production calls wait for; `safety_net_trial` after a prediction).
fn start_trial<C: Operation>(at: &SlowCall<C>, key: &mut TunerState, trial: Trialled) {
    let Phase::Production(p) = &mut key.phase else {
        return;
    };
    p.trial = Some(trial);
    p.predicted = None;
    p.window.clear();
    p.window_start = None;
    let check_at = at.k + check::first_check(runtime::config().tuning.drift_interval);
    let running = trial.running(p.winner);
    at.tuner.run(running, check_at);
    let names = codelets::names(at.entry.op);
    trace(at.entry, || {
        let whose = if running == p.winner {
            "the winner's after the trial"
        } else {
            "the trial's"
        };
        format!(
            "self-check of {}: a window of {} ({whose})",
            names[p.winner], names[running]
        )
    });
}

/// Ends the trial of `p`: production goes back to the winner, with a drift check a whole
/// interval later.
fn end_trial<C: Operation>(at: &SlowCall<C>, p: &mut Production) {
    p.trial = None;
    p.window.clear();
    p.window_start = None;
    at.tuner
        .run(p.winner, at.k + runtime::config().tuning.drift_interval);
}

/// Judges the decision after a window of its trial (`window`: the codelet on trial's, or the
/// winner's after it; agreed); production goes back to the winner unless the decision was wrong,
/// or the winner runs its window after the trial first (`trial::Trial::ended`). Returns the
/// search step when the search reopens.
fn trial_check<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    trial: Trial<Window>,
    predicted: Prediction,
    window: Window,
) -> Option<Step> {
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    let min_gain = runtime::config().tuning.min_gain;
    let names = codelets::names(at.entry.op);
    let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
    let around = match trial.ended(window, min_gain) {
        Ended::Judged(around) => around,
        Ended::WinnerNext(trial) => {
            trace(at.entry, || {
                format!(
                    "trial of {}: realised {:.0} us against the winner's {:.0} us: {} runs a \
                     window again",
                    names[trial.codelet],
                    us(window.realised),
                    us(trial.before.realised),
                    names[p.winner]
                )
            });
            start_trial(at, key, Trialled::Decision { trial, predicted });
            return None;
        }
    };
    end_trial(at, p);
    let winner_time = around.winner_time(predicted.timing);
    p.lead.measured(p.winner, winner_time.realised);
    p.lead.measured(around.codelet, around.tried.realised);
    let after = predicted.after_trial(&around, min_gain, key.wrong);
    trace(at.entry, || {
        let outcome = match after {
            AfterTrial::Trial(codelet, _) => format!("kept, {} next", names[codelet]),
            AfterTrial::Verdict(verdict) => verdict.name().to_string(),
        };
        format!(
            "trial of {}: realised {:.0} us against the winner's {:.0} us{}, calls {:.0} % of \
             the window: {outcome}",
            names[around.codelet],
            us(around.tried.realised),
            us(around.before.realised),
            around.after.map_or(String::new(), |w| format!(
                " and {:.0} us after it",
                us(w.realised)
            )),
            around.tried.call_share * 100.0,
        )
    });
    let verdict = match after {
        AfterTrial::Trial(codelet, next) => {
            // The third is judged against the winner's latest window (and the one after it, if
            // it beats that one).
            let trial = Trialled::Decision {
                trial: Trial::new(codelet, around.latest()),
                predicted: next,
            };
            start_trial(at, key, trial);
            return None;
        }
        AfterTrial::Verdict(verdict) => verdict,
    };
    let tried = Some(around.tried.realised);
    judged(at, comm, key, predicted, winner_time, tried, verdict)
}

/// Acts on the self-check's `verdict` on the decision whose winner realised `realised` (agreed
/// ticks per call, with the least rank's for the report: its window's, or its time around a trial;
/// the runner-up `runner_up_realised` if it was on trial), and reports it: a kept decision is what
/// the history and the rest of the run learn; a wrong one reopens the search (returns its step) or
/// settles on the runner-up that beat it, which they learn instead, with the two codelets' realised
/// times. Either way the lead checks to come hold the winner's realised time, and the others'
/// estimates shifted by its miss (`check::Lead::shift_estimates`).
fn judged<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    predicted: Prediction,
    Window {
        realised, least, ..
    }: Window,
    runner_up_realised: Option<f64>,
    verdict: Verdict,
) -> Option<Step> {
    let settings = runtime::config().tuning;
    let names = codelets::names(at.entry.op);
    let ns_per_tick = clock::ns_per_tick();
    let mut check = predicted.report(realised, runner_up_realised, verdict, &names, ns_per_tick);
    // Timed by periods, every rank's time is nearly the same: no rank waits less.
    check.least_rank_us =
        (predicted.timing != Timing::Period).then_some(least * ns_per_tick * 1e-3);
    key.check = Some(check);
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    let winner = p.winner;
    let us = |ticks: f64| ticks * clock::ns_per_tick() * 1e-3;
    trace(at.entry, || {
        format!(
            "self-check of {}: predicted {:.0} us, realised {:.0} us: {}",
            names[winner],
            us(predicted.winner),
            us(realised),
            verdict.name()
        )
    });
    p.lead.measured(winner, realised);
    p.lead.shift_estimates(realised - predicted.winner);
    let Some((mark, next)) = verdict.wrong(at.k, realised, predicted.winner) else {
        p.realised_us = Some(us(realised));
        // Only a decision its production confirmed predicts later calls of this run.
        knowledge::learn(at.entry, key);
        return None;
    };
    key.wrong += 1;
    key.timeline.push(mark);
    match next {
        check::Next::Search(timing) => {
            key.timing = Some(timing);
            search_again(at, comm, key)
        }
        check::Next::Settle(codelet) => {
            key.reason = Some(check::RUNNER_UP_KEPT);
            let mut production = Production::new(codelet, None);
            production.lead = std::mem::take(&mut p.lead);
            production.realised_us = runner_up_realised.map(us);
            production.replaced = Some((winner, us(realised)));
            let drift_at = at.k + settings.drift_interval;
            at.tuner.settle(
                key,
                codelet,
                Phase::Production(Box::new(production)),
                drift_at,
            );
            knowledge::learn(at.entry, key);
            None
        }
    }
}
