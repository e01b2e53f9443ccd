//! Checkpoints and searches: which key of a communicator is searched, the rounds of its
//! schedule, the policy's decision, and searches that stall.

use std::sync::atomic::Ordering;

use commtune_tune::checkpoints::{self, FINISH_AFTER, Found};
use commtune_tune::sampling::{self, Sampler, Turn};
use commtune_tune::timeline::Mark;
use commtune_tune::{Agreed, Candidate, Next, Plan, Timing};
use commtune_tune::{budget, check};

use commtune_history::predict::{Basis, Predicted};
use commtune_report::{HistoryPrediction, HistorySource};

use super::consensus::AgreedPrediction;
use super::state::{
    CommTuner, CommTunerState, Phase, Place, Production, StartedCheck, Tuner, TunerState, VERIFYING,
};
use super::{Measure, SlowCall, Step, consensus, knowledge};
use crate::codelets::{self, Facts, Operation};
use crate::keys::Entry;
use crate::mpi::Comm;
use crate::say::say;
use crate::sync::lock;
use crate::{clock, comms, runtime};

/// Checkpoints finding different keys on different ranks before a key is given up.
const MAX_DISAGREEMENTS: u32 = 2;
/// A search whose key is not called for this many instances of its communicator ends with the
/// best codelet so far, so that the communicator's other keys get their turn.
const STALL: u64 = 4096;

/// Why it stops when a checkpoint's reduction fails.
const CHECKPOINT_FAILED: &str = "an MPI error in the library's agreement on this communicator";

/// A checkpoint: every rank is at communicator instance `n`. Its reduction is started here and
/// finished `checkpoints::FINISH_AFTER` instances later (`finish_checkpoint`), which acts on what it found:
/// the calls between run as they would have without it.
pub(super) fn checkpoint<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
) {
    let settings = runtime::config().tuning;
    // The first checkpoint also makes the private communicator, which its time leaves out.
    let private = match comm.private {
        Some(p) => p,
        None => match at.slot.record.private(at.call.comm()) {
            Ok(p) => *comm.private.insert(p),
            Err(_) => return at.slot.disable(comm, comms::NO_PRIVATE),
        },
    };
    let start = clock::now();
    let warm = matches!(key.phase, Phase::Warmup) && at.k >= settings.warmup;
    // What may run the call, built once: the prediction, the budget and the search read it.
    let candidates = if warm {
        let facts = at.call.facts();
        key.comm_size = u32::try_from(facts.size).unwrap_or(0);
        candidates::<C>(&facts)
    } else {
        Vec::new()
    };
    let prediction = if warm {
        predict(at, key.comm_size, &candidates)
    } else {
        None
    };
    let instances = search_instances(candidates.len());
    // Whether a search pays is agreed in the checkpoint too (a predicted key costs no search:
    // the budget does not hold it back), so that no rank's own view starts or skips one; a key
    // not worth searching yet also says from when it will be, so that checkpoints spaced out
    // meanwhile do not miss it.
    let mut not_worth_until = None;
    // A search's own collectives weigh as the fastest barrier timed after the communicator's
    // checkpoints (a barrier may lose a time slice); a rank's fastest calls are those it
    // entered last, which others waited for, so calls weigh at their mean.
    let collective_over_call = if warm {
        in_calls(comm.collective, key, at.k)
    } else {
        0.0
    };
    if warm {
        let cost = search_cost(candidates.len(), collective_over_call);
        let gain = key.tail.gain();
        key.not_worth = budget::ready(settings.budget, at.k, at.tuner.born, at.n, cost, gain).err();
        not_worth_until = key
            .not_worth
            .map(|_| checkpoints::worth_at(at.k, at.tuner.born, at.n, cost, gain));
    }
    let vote = consensus::Vote {
        key: warm.then_some(at.key.agree_hash()),
        predicted: prediction.as_ref().map(|(proposed, _)| *proposed),
        not_worth_until,
        collective_over_call,
        // A rank at a call still warming up says nothing of the cost: that call will want a
        // checkpoint soon, which the cost's spacing must not put off.
        checkpoint_over_call: if matches!(key.phase, Phase::Warmup) && !warm {
            0.0
        } else {
            in_calls(comm.checkpoint, key, at.k)
        },
    };
    match consensus::start_checkpoint(&private, &vote) {
        Ok(reduction) => {
            comm.started = Some(Box::new(StartedCheck {
                reduction,
                at: at.place,
                candidates,
                prediction,
                instances,
                spent: clock::now().saturating_sub(start),
            }));
            at.slot
                .next_check
                .store(at.n + FINISH_AFTER, Ordering::Relaxed);
        }
        Err(_) => at.slot.disable(comm, CHECKPOINT_FAILED),
    }
}

/// Finishes the checkpoint in flight, if it is due at instance `n` of the communicator, and acts
/// on what it found for the key it was started at. Every rank finishes it at the same instance:
/// the first call `FINISH_AFTER` or more instances after it started that takes the slow path
/// (`next_check` sends every call there, and while a search started meanwhile holds the
/// communicator, the searched key's calls), which the agreed state decides alike everywhere.
pub(super) fn finish_checkpoint(comm: &mut CommTunerState, n: u64) {
    let Some(started) = comm.started.take_if(|s| n >= s.at.n + FINISH_AFTER) else {
        return;
    };
    let slot = started.at.slot;
    let StartedCheck {
        reduction,
        at,
        candidates,
        prediction,
        instances,
        spent,
        ..
    } = *started;
    let start = clock::now();
    let checkpointed = reduction.finish();
    let took = spent + clock::now().saturating_sub(start);
    comm.checkpoint = Some(comm.checkpoint.map_or(took, |fastest| fastest.min(took)));
    let Ok(checkpointed) = checkpointed else {
        return slot.disable(comm, CHECKPOINT_FAILED);
    };
    comm.spacing.weigh(checkpointed.checkpoint_over_call);
    // Do no harm weighs a search with the cost of its collectives: timed when a checkpoint
    // found a key whose search it weighed, and known before one starts unless COMMTUNE_BUDGET
    // searches at once (every rank has timed as many barriers: the checkpoints' outcomes are
    // agreed).
    let weighed = matches!(
        checkpointed.found,
        consensus::Checkpoint::Agreed {
            prediction: None,
            ..
        }
    );
    let unweighed = comm.collectives_timed == 0 && runtime::config().tuning.budget < 1.0;
    if weighed
        && comm.collectives_timed < COLLECTIVES_TIMED
        && let Some(private) = comm.private
    {
        time_collective(&private, comm);
    }
    let key = &mut *lock(&at.tuner.state);
    let found = match checkpointed.found {
        consensus::Checkpoint::Agreed {
            prediction: Some(agreed),
            ..
        } => {
            if let Some((proposed, prediction)) = prediction {
                start_predicted(&at, key, agreed, &prediction, proposed.timing, instances);
            }
            Found::Busy
        }
        // Not yet: no barrier was timed before this one (see above), or a drift check or a
        // safety net started a search of another key meanwhile (one search at a time). A later
        // checkpoint finds this key again.
        consensus::Checkpoint::Agreed {
            prediction: None,
            not_worth_until: None,
            ..
        } if unweighed || comm.active.is_some() => Found::Busy,
        consensus::Checkpoint::Agreed {
            prediction: None,
            not_worth_until: None,
            collective_over_call,
        } => {
            key.choose_timing(collective_over_call);
            start_search(&at, comm, key, candidates);
            Found::Busy
        }
        consensus::Checkpoint::Agreed {
            prediction: None,
            not_worth_until: Some(until),
            ..
        } => {
            key.not_worth_elsewhere = key.not_worth.is_none();
            Found::NotWorthUntil(until)
        }
        consensus::Checkpoint::Disagreed => {
            key.disagreements += 1;
            if key.disagreements >= MAX_DISAGREEMENTS {
                key.reason = Some(
                    "ranks reach this call from different call sites or with different signatures",
                );
                at.tuner.settle(key, 0, Phase::Untuned, u64::MAX);
            }
            Found::Busy
        }
        consensus::Checkpoint::Partial => {
            key.partial += 1;
            Found::Busy
        }
        consensus::Checkpoint::Nothing => Found::Idle,
    };
    slot.schedule_check(comm, n, found);
}

/// The codelets that may run a call of `facts` and the tuner may try.
pub(super) fn candidates<C: Operation>(facts: &Facts) -> Vec<Candidate> {
    let config = runtime::config();
    C::codelets()
        .iter()
        .enumerate()
        .filter(|(i, c)| c.unmet(facts).is_none() && !config.excluded(C::OP, *i))
        .map(|(index, c)| Candidate {
            index,
            partners: c.attributes.partners,
            collectives: c.attributes.uses_collectives,
        })
        .collect()
}

/// This rank's prediction from the history for the key at this call, on a communicator of
/// `comm_size` ranks (what it proposes to the others, and the prediction), when more than
/// native applies.
fn predict<C: Operation>(
    at: &SlowCall<C>,
    comm_size: u32,
    candidates: &[Candidate],
) -> Option<(consensus::Proposed, Predicted)> {
    let names = codelets::names(C::OP);
    if candidates.len() <= 1 {
        return None;
    }
    let applicable: Vec<&str> = candidates.iter().map(|c| names[c.index]).collect();
    let bytes = at.entry.description.bytes_per_call;
    let predicted = knowledge::predict(C::OP.name(), comm_size, bytes, &applicable)?;
    let index = |name: &str| names.iter().position(|n| *n == name);
    let timing = match &predicted.timing {
        Some(name) => Some(Timing::parse(name)?),
        None => None,
    };
    let proposed = consensus::Proposed {
        winner: index(&predicted.winner)?,
        runner_up: predicted.runner_up.as_deref().and_then(index),
        us: predicted.us,
        timing,
    };
    Some((proposed, predicted))
}

/// Every rank predicted `agreed`: the key goes to production with its winner at once, and its
/// first check is the safety net's (`drift::safety_net`). A search would have run
/// `instances` at most. A prediction measured with another `timing` makes it the key's: the
/// safety net measures production as that job did, and a search after it times alike.
fn start_predicted(
    at: &Place,
    key: &mut TunerState,
    agreed: AgreedPrediction,
    prediction: &Predicted,
    timing: Option<Timing>,
    instances: u64,
) {
    if timing.is_some() {
        key.timing = timing;
    }
    let AgreedPrediction { winner, us, .. } = agreed;
    let config = runtime::config();
    let names = codelets::names(at.entry.op);
    key.prediction = Some(HistoryPrediction {
        predictor: prediction.predictor.name().to_string(),
        from: prediction
            .from
            .iter()
            .map(|s| HistorySource {
                comm_size: s.comm_size,
                bytes: s.bytes,
                how: s.how.name().to_string(),
            })
            .collect(),
        winner: names[winner].to_string(),
        predicted_us: us,
        measured_us: None,
        // Scaled as the agreed time is (the largest rank's).
        estimate_us: (prediction.basis == Basis::Realised)
            .then(|| us * prediction.estimate_us / prediction.us),
        pmax: config.pmax,
        outcome: VERIFYING.to_string(),
        saved_instances: instances,
        trial: None,
    });
    trace(at.entry, || {
        format!(
            "predicted {} at {us:.1} us per call from {}",
            names[winner],
            prediction.basis.name()
        )
    });
    key.timeline.push(Mark::Decision { call: at.k, winner });
    let mut production = Production::new(winner, None);
    production.alternative = if winner == codelets::NATIVE {
        agreed.runner_up
    } else {
        Some(codelets::NATIVE)
    };
    let first_check = at.k + check::first_check(config.tuning.drift_interval);
    at.tuner.settle(
        key,
        winner,
        Phase::Production(Box::new(production)),
        first_check,
    );
}

/// Barriers timed after checkpoints (do no harm's cost of a collective): the fastest of a few.
const COLLECTIVES_TIMED: u32 = 3;

/// Times one barrier on the private communicator right after another, which every rank left
/// together (the first's own time includes waiting for the last rank to arrive, as a blocking
/// checkpoint's reduction did before it; the checkpoint's reduction now finishes on each rank
/// as its own calls allow): what one of a search's small collectives costs on this rank. Every
/// rank finishes the same checkpoints, so every rank holds the same barriers.
fn time_collective(private: &Comm, comm: &mut CommTunerState) {
    let together = private.barrier();
    let start = clock::now();
    if together.is_ok() && private.barrier().is_ok() {
        let took = clock::now().saturating_sub(start);
        comm.collective = Some(comm.collective.map_or(took, |fastest| fastest.min(took)));
    }
    comm.collectives_timed += 1;
}

/// The key's mean call as the application felt it in warm-up (every call timed) before its
/// `k`-th, in clock ticks, its slowest left out (a program's first call sets up connections);
/// None before two calls.
fn mean_call(key: &TunerState, k: u64) -> Option<f64> {
    let calls = k.saturating_sub(2);
    let call = key.ticks.saturating_sub(key.slowest_call) as f64 / calls.max(1) as f64;
    (calls > 0 && call > 0.0).then_some(call)
}

/// What `ticks` on this rank cost in calls of the key (0 when either is not known yet).
fn in_calls(ticks: Option<u64>, key: &TunerState, k: u64) -> f64 {
    match (ticks, mean_call(key, k)) {
        (Some(ticks), Some(call)) => ticks as f64 / call,
        _ => 0.0,
    }
}

/// What starting a search of `candidates` would cost the key now, counted in instances
/// (`budget::search_cost`): its first `budget::ROUNDS_WEIGHED` rounds (COMMTUNE_BUDGET weighs
/// the rest after each round), each of its own collectives `collective_over_call` calls, timed
/// as this rank's ratio would time it. The search's timing follows the least ratio of the ranks
/// (`TunerState::choose_timing`), so a rank near `LOCAL_TIMING_FROM` may weigh barriers the
/// search will not hold: it overrates the cost, and the ranks agree on the latest rank's view.
fn search_cost(candidates: usize, collective_over_call: f64) -> u64 {
    let settings = runtime::config().tuning;
    let (instances, collectives) = sampling::rounds_cost(
        candidates,
        settings.search_timing(collective_over_call),
        settings.block as usize,
        budget::ROUNDS_WEIGHED.min(settings.samples),
    );
    budget::search_cost(instances, collectives, collective_over_call)
}

/// The instances a search of `candidates` codelets runs at most.
fn search_instances(candidates: usize) -> u64 {
    let settings = runtime::config().tuning;
    sampling::search_instances(
        candidates,
        settings.timing,
        settings.block as usize,
        settings.samples,
    )
}

/// Starts (or restarts) the search of the key at this call among `candidates`; false when only
/// native can run the call (the key then settles on native).
pub(super) fn start_search(
    at: &Place,
    comm: &mut CommTunerState,
    key: &mut TunerState,
    candidates: Vec<Candidate>,
) -> bool {
    let config = runtime::config();
    if candidates.len() <= 1 {
        key.reason = Some("no codelet but native applies");
        let production = Phase::Production(Box::new(Production::new(0, None)));
        at.tuner.settle(key, 0, production, u64::MAX);
        return false;
    }
    let settings = config.tuning;
    let plan = Plan::collective(settings.search, candidates, settings.samples);
    let timing = key.timing();
    key.phase = Phase::Searching(Box::new(Sampler::new(
        plan,
        timing,
        settings.block as usize,
    )));
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

/// The next call of the key being searched.
pub(super) fn search_step<C>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
) -> Step {
    let (entry, tuner, slot, n, k) = (at.entry, at.tuner, at.slot, at.n, at.k);
    let settings = runtime::config().tuning;
    let now = clock::now();
    let Phase::Searching(s) = &mut key.phase else {
        return Step::native(Measure::Timed);
    };
    if let Some((codelet, ticks)) = s.close(now) {
        key.timeline.push(Mark::Sample {
            call: k,
            codelet,
            ticks,
        });
    }
    loop {
        match s.turn() {
            Turn::Run {
                codelet, barrier, ..
            } => {
                key.searched += 1;
                return Step {
                    codelet,
                    barrier: if barrier { comm.private } else { None },
                    measure: Measure::Search,
                };
            }
            Turn::RoundEnd => {}
        }
        let local = s.estimates(settings.filter);
        // The budget is a share of the key's expected time over the run: what it took so far
        // and the calls to come at the best estimate.
        let best = local
            .iter()
            .map(|a| a.location)
            .fold(f64::INFINITY, f64::min);
        let to_come = budget::remaining_calls(k, tuner.born, n) * best;
        let wasted = s.wasted_share(key.ticks as f64 + to_come.max(0.0));
        let next = match comm.private.map(|p| consensus::round(&p, &local, wasted)) {
            Some(Ok((agreed, worst_wasted))) => {
                trace(entry, || {
                    format!(
                        "round {}: local {} agreed {}",
                        s.plan.rounds + 1,
                        estimates(entry, &s.plan.candidates, &local),
                        estimates(entry, &s.plan.candidates, &agreed)
                    )
                });
                s.after_round(&agreed, worst_wasted > settings.budget, settings.min_gain)
            }
            _ => Next::Decide(0),
        };
        if let Next::Decide(winner) = next {
            trace(entry, || {
                format!("decided {}", codelets::names(entry.op)[winner])
            });
            let predicted = s.prediction(winner);
            let phase = Phase::Production(Box::new(Production::new(winner, predicted)));
            if let Phase::Searching(done) = std::mem::replace(&mut key.phase, Phase::Untuned) {
                key.decided = Some(done.plan);
            }
            key.timeline.push(Mark::Decision { call: k, winner });
            tuner.settle(
                key,
                winner,
                phase,
                k + check::first_check(settings.drift_interval),
            );
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

/// With COMMTUNE_VERBOSE=2, prints a line about the tuning of `entry`'s key.
pub(super) fn trace(entry: &Entry, line: impl FnOnce() -> String) {
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

/// Ends the active search if its key stopped being called (the same outcome on every rank: the
/// instance counts are shared).
pub(super) fn end_stalled_search(
    slot: &CommTuner,
    comm: &mut CommTunerState,
    tuner: &Tuner,
    n: u64,
) {
    let Some((active, last)) = comm.active else {
        return;
    };
    if std::ptr::eq(active, tuner) || n.saturating_sub(last) < STALL {
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
    let production = Phase::Production(Box::new(Production::new(winner, None)));
    active.settle(&mut other, winner, production, drift_at);
    slot.set_active(comm, None);
    slot.next_check.store(n + 1, Ordering::Relaxed);
}
