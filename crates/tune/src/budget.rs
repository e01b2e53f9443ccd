//! Do no harm: whether a key's search can pay for itself, from what the ranks agree on.
//!
//! A search runs codelets that are mostly slower than the best, so it costs time that only the
//! calls after it can win back. How many calls remain is unknown; the estimate is the usual one
//! for a process of unknown length (Lindy's): a run is as likely to be past its middle as before
//! it, so the calls to come are as many as came so far, at the rate the key has been called
//! since it appeared. Positions are counted in calls of the communicator, which every rank
//! counts alike. What a winner will save is unknown too: typically `GAIN` of native's call, more
//! where native's calls so far vary (`Tail`). That is each rank's own view, so the ranks
//! agree on the outcome in the checkpoint that weighs it (a search starts where every rank finds
//! it worth it).

/// What a search costs over what it gains, per instance: a search instance runs a codelet that
/// is typically far slower than the best (about 30 % of native's time lost, the codelets'
/// benchmarks in LD_PRELOAD.md), and a winner typically saves about 15 % of native's time
/// per call (`GAIN`). At that gain a search is worth it when the calls to come are this many
/// times its instances (at others, `calls_over_instances`).
pub const COST_OVER_GAIN: f64 = 2.0;

/// The share of a call a winner typically saves.
pub const GAIN: f64 = 0.15;

/// The most of native's call a search expects to save, however long native's tail.
pub const MAX_GAIN: f64 = 0.5;

/// Native's latest calls of a key that its tail is read from.
const TAIL_CALLS: usize = 32;

/// The fewest calls that show a tail.
const TAIL_FROM: usize = 8;

/// A key's first calls, which set up connections and warm caches: no part of a tail.
const SETTLING: u64 = 2;

/// A key's latest calls under native before its search, for the gain the search may expect.
///
/// Native's calls that vary show what the network delivers and native does not always get:
/// a codelet that paces its messages can deliver native's fast calls every time. So the share of
/// native's time above its fast calls (the first quartile) is what a search may win back. On the
/// 1 Gbit/s rig the 64 KiB alltoall's native runs 0.45 or 1.6 ms and stalls one call in fifteen
/// to twenty at ten times that, and `pairwise_excl` ran 0.6 of native's time; the 1 MiB
/// allgatherv's native ran 22 to 60 ms, ring 27 ms every call. Weighing such searches by `GAIN`
/// alone held them back to calls 29 to 55 of 400 while native cost 6 to 8 % of the run over the
/// best codelet's time (stop 45's note). A call's time includes waiting for ranks that came
/// late, which no codelet wins back: where the ranks take turns being late each sees a tail, and
/// a search starts sooner than it should (LAMMPS on the rig did not lose by it, LD_PRELOAD.md).
#[derive(Clone, Debug, Default)]
pub struct Tail {
    /// Calls seen, booked or not.
    seen: u64,
    calls: Vec<u64>,
    /// Where the next call goes once `calls` holds `TAIL_CALLS`.
    next: usize,
}

impl Tail {
    /// Books one call of native (any unit; only ratios are read).
    pub fn push(&mut self, call: u64) {
        self.seen += 1;
        if self.seen <= SETTLING {
            return;
        }
        if self.calls.len() < TAIL_CALLS {
            self.calls.push(call);
        } else {
            self.calls[self.next] = call;
            self.next = (self.next + 1) % TAIL_CALLS;
        }
    }

    /// The share of a call a winner may save: the share of the calls' time above their first
    /// quartile, between `GAIN` and `MAX_GAIN`; `GAIN` before `TAIL_FROM` calls. The slowest call
    /// counts: a stall one call in fifteen to twenty is what a window of calls holds once or twice.
    pub fn gain(&self) -> f64 {
        if self.calls.len() < TAIL_FROM {
            return GAIN;
        }
        let mut calls = self.calls.clone();
        calls.sort_unstable();
        let mean = calls.iter().map(|&c| c as f64).sum::<f64>() / calls.len() as f64;
        let fast = calls[calls.len() / 4] as f64;
        if mean <= 0.0 {
            return GAIN;
        }
        (1.0 - fast / mean).clamp(GAIN, MAX_GAIN)
    }
}

/// The rounds of a collective's search that do no harm weighs before it starts
/// (`sampling::rounds_cost`), not all of them: after each round COMMTUNE_BUDGET ends a search
/// that has spent more than its share of the key's expected time on codelets other than the
/// leader, and the calls expected grow as the run goes on, so the later rounds are weighed when
/// they are due. Weighing every round held a 400-call run's search back until most of the run was
/// over; weighing one started it so early that the budget ended most searches after one sample
/// per codelet, and long runs decided worse. Replayed over the traces of tests/data (`commtune
/// simulate`, the library's defaults, 40 replays per key), two rounds instead of all four: at 400
/// calls 6 of the 8 keys better (the rig's 4 MiB allgatherv 1.079 to 1.049 of the best codelet,
/// its 64 KiB allreduce 1.231 to 1.189, shared memory's 8-byte alltoall 2.015 to 1.750), 2 worse
/// by 0.003 at most; at 2000 calls 4 better (by up to 0.031), the rig's 64 KiB alltoall worse by
/// 0.008. One round: 1.028 for that allgatherv at 400 calls, but the rig's 4 MiB alltoall 1.011
/// to 1.071 at 2000. A halo search weighs one round (src/halo/rank_tuner.rs).
pub const ROUNDS_WEIGHED: u32 = 2;

/// What a search of `instances` costs, counted in instances, when it also holds `collectives`
/// small collectives of its own (a barrier before each timed sample, a reduction per round and
/// per check), each `collective_over_call` times as long as the key's call. Where calls are
/// short these dominate: on the 1 Gbit/s rig an 8-byte alltoall takes 35 to 50 us and a small
/// collective of the tuner's 25 to 90 us, so each weighs as 3 to 7 search instances (which lose
/// 0.3 of a call each), and searching a 400-call run made it 1.10 times slower than native.
pub fn search_cost(instances: u64, collectives: u64, collective_over_call: f64) -> u64 {
    let lost_per_instance = GAIN * COST_OVER_GAIN;
    let extra = collectives as f64 * collective_over_call.max(0.0) / lost_per_instance;
    instances.saturating_add(extra.round() as u64)
}

/// The key's calls still to come: `calls` so far, the key first called at call `born` of its
/// communicator, which is now at call `now`.
pub fn remaining_calls(calls: u64, born: u64, now: u64) -> f64 {
    let age = now.saturating_sub(born) + 1;
    calls as f64 / age as f64 * (now + 1) as f64
}

/// How many times a search's instances the calls to come must be for it to pay, when a winner
/// is expected to save `gain` of a call.
pub fn calls_over_instances(gain: f64) -> f64 {
    COST_OVER_GAIN * (GAIN / gain.clamp(GAIN, MAX_GAIN))
}

/// Whether a search of `instances` (at most) pays for itself over the calls to come, when a
/// winner is expected to save `gain` of a call.
pub fn worth_searching(calls: u64, born: u64, now: u64, instances: u64, gain: f64) -> bool {
    remaining_calls(calls, born, now) >= calls_over_instances(gain) * instances as f64
}

/// Why a key is not searched yet (do no harm), for the report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NotWorth {
    /// What the search's first rounds cost, in instances (`search_cost`).
    pub instances: u64,
    /// The calls expected to come (`remaining_calls`).
    pub remaining: f64,
    /// How many times `instances` they must be (`calls_over_instances`).
    pub times: f64,
}

/// Whether a key may be searched now under COMMTUNE_BUDGET `budget` (1: at once), when a winner
/// is expected to save `gain` of a call: Ok, or why not.
pub fn ready(
    budget: f64,
    calls: u64,
    born: u64,
    now: u64,
    instances: u64,
    gain: f64,
) -> Result<(), NotWorth> {
    if budget >= 1.0 || worth_searching(calls, born, now, instances, gain) {
        Ok(())
    } else {
        Err(NotWorth {
            instances,
            remaining: remaining_calls(calls, born, now),
            times: calls_over_instances(gain),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_called_every_time_expects_as_many_calls_again() {
        assert_eq!(remaining_calls(100, 0, 99), 100.0);
        // Called every other call of its communicator since call 50.
        assert_eq!(remaining_calls(25, 50, 99), 50.0);
    }

    #[test]
    fn searches_wait_until_the_run_can_pay_for_them() {
        // A 56-instance search: not at call 10, but by call 112.
        assert!(!worth_searching(10, 0, 9, 56, GAIN));
        assert!(worth_searching(112, 0, 111, 56, GAIN));
        // A key that appeared late and is called rarely waits longer.
        assert!(!worth_searching(5, 1000, 1100, 56, GAIN));
    }

    #[test]
    fn a_native_tail_lets_a_search_start_sooner() {
        // At MAX_GAIN a 56-instance search pays by call 34 (0.6 times 56), not 112.
        assert!(!worth_searching(33, 0, 32, 56, MAX_GAIN));
        assert!(worth_searching(34, 0, 33, 56, MAX_GAIN));
        assert!(!worth_searching(33, 0, 32, 56, 1.0), "capped at MAX_GAIN");
        assert!(!worth_searching(111, 0, 110, 56, 0.0), "never below GAIN");
    }

    #[test]
    fn a_tail_is_the_share_of_the_time_above_the_fast_calls() {
        let mut tail = Tail::default();
        tail.push(5000);
        tail.push(5000);
        for _ in 0..TAIL_FROM {
            tail.push(100);
        }
        assert_eq!(tail.gain(), GAIN, "the first calls are no tail");
        tail.push(130);
        assert_eq!(tail.gain(), GAIN, "a tail short of GAIN");
        // One call in four at three times the others: of the latest 32 calls, 8 at 300 and 24 at
        // 100, a mean of 150 against a first quartile of 100.
        let mut tail = Tail::default();
        for i in 0..TAIL_CALLS as u64 + 1 + SETTLING {
            tail.push(if i % 4 == 0 { 300 } else { 100 });
        }
        assert!((tail.gain() - (1.0 - 100.0 / 150.0)).abs() < 1e-9);
        // The latest calls count: the tail ends, and so does the gain.
        for _ in 0..TAIL_CALLS {
            tail.push(100);
        }
        assert_eq!(tail.gain(), GAIN);
    }

    #[test]
    fn collectives_as_long_as_calls_make_a_search_cost_more() {
        assert_eq!(search_cost(56, 40, 0.0), 56);
        // 40 collectives each 10 calls long: 400 calls, of which an instance loses 0.3.
        assert_eq!(search_cost(56, 40, 10.0), 56 + 1333);
        assert_eq!(
            search_cost(56, 40, 0.001),
            56,
            "negligible beside long calls"
        );
        assert!(!worth_searching(
            400,
            0,
            399,
            search_cost(56, 40, 10.0),
            GAIN
        ));
        assert!(worth_searching(
            400,
            0,
            399,
            search_cost(56, 40, 0.01),
            GAIN
        ));
    }

    #[test]
    fn ready_says_why_not_and_a_budget_of_one_searches_at_once() {
        let not_worth = NotWorth {
            instances: 56,
            remaining: 10.0,
            times: COST_OVER_GAIN,
        };
        assert_eq!(ready(0.2, 10, 0, 9, 56, GAIN), Err(not_worth));
        assert_eq!(ready(1.0, 10, 0, 9, 56, GAIN), Ok(()));
        assert_eq!(ready(0.2, 112, 0, 111, 56, GAIN), Ok(()));
    }
}
