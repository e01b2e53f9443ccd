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
/// per call. A search is worth it when the calls to come are this many times its instances.
pub const COST_OVER_GAIN: f64 = 2.0;

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
    fn ready_says_why_not_and_a_budget_of_one_searches_at_once() {
        assert_eq!(ready(0.2, 10, 0, 9, 56), Err((56, 10.0)));
        assert_eq!(ready(1.0, 10, 0, 9, 56), Ok(()));
        assert_eq!(ready(0.2, 112, 0, 111, 56), Ok(()));
    }
}
