//! Do no harm: whether a key's search can pay for itself, from what every rank knows alike.
//!
//! A search runs codelets that are mostly slower than the best, so it costs time that only the
//! calls after it can win back. How many calls remain is unknown; the estimate is the usual one
//! for a process of unknown length (Lindy's): a run is as likely to be past its middle as before
//! it, so the calls to come are as many as came so far, at the rate the key has been called
//! since it appeared. Positions are counted in calls of the communicator, which every rank
//! counts alike, so every rank reaches the same answer with no message.

/// What a search costs over what it gains, per instance: a search instance runs a codelet that
/// is typically far slower than the best (about 30 % of native's time lost, the codelets'
/// benchmarks in LD_PRELOAD.md), and a winner typically saves about 15 % of native's time
/// per call (`GAIN`). A search is worth it when the calls to come are this many times its
/// instances.
pub const COST_OVER_GAIN: f64 = 2.0;

/// The share of a call a winner typically saves.
pub const GAIN: f64 = 0.15;

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

/// Whether a search of `instances` (at most) pays for itself over the calls to come.
pub fn worth_searching(calls: u64, born: u64, now: u64, instances: u64) -> bool {
    remaining_calls(calls, born, now) >= COST_OVER_GAIN * instances as f64
}

/// Whether a key may be searched now under COMMTUNE_BUDGET `budget` (1: at once): Ok, or why
/// not as (the search's instances, the calls expected to come) for the report.
pub fn ready(
    budget: f64,
    calls: u64,
    born: u64,
    now: u64,
    instances: u64,
) -> Result<(), (u64, f64)> {
    if budget >= 1.0 || worth_searching(calls, born, now, instances) {
        Ok(())
    } else {
        Err((instances, remaining_calls(calls, born, now)))
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
        assert!(!worth_searching(10, 0, 9, 56));
        assert!(worth_searching(112, 0, 111, 56));
        // A key that appeared late and is called rarely waits longer.
        assert!(!worth_searching(5, 1000, 1100, 56));
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
        assert!(!worth_searching(400, 0, 399, search_cost(56, 40, 10.0)));
        assert!(worth_searching(400, 0, 399, search_cost(56, 40, 0.01)));
    }

    #[test]
    fn ready_says_why_not_and_a_budget_of_one_searches_at_once() {
        assert_eq!(ready(0.2, 10, 0, 9, 56), Err((56, 10.0)));
        assert_eq!(ready(1.0, 10, 0, 9, 56), Ok(()));
        assert_eq!(ready(0.2, 112, 0, 111, 56), Ok(()));
    }
}
