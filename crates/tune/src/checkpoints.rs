//! When a communicator's next checkpoint comes, from what every rank knows alike.
//!
//! A checkpoint is one small reduction at an instance of the communicator that every rank
//! computes alike; it looks at the key every rank is at then. Checkpoints that find nothing to do
//! come ever more rarely (their interval doubles), so that a program whose keys are settled pays
//! for a handful of them. The interval is the communicator's, while what a checkpoint finds is a
//! key's: a checkpoint that lands on a key whose search would not pay yet (do no harm) says
//! nothing about the communicator's other keys, and doubling on it alone starved them — in a
//! loop of an allreduce worth a search and two short calls that were not, the checkpoints landed
//! on the short calls, spaced out, and missed the allreduce for hundreds of calls after its
//! search would have paid. So such a checkpoint also names the instance at which its key's
//! search will pay if the key keeps its rate (`worth_at`, agreed over ranks), and when
//! the communicator reaches the earliest of these a checkpoint comes there and the interval
//! starts again from its least (once per doubling of the communicator's instances at most, and
//! once more if that checkpoint finds the key's search still short of paying).
//!
//! A checkpoint costs a small collective, which on shared memory takes as long as fifteen 8-byte
//! calls: once the ranks know its cost in calls (`Spacing::weigh`), checkpoints that find nothing
//! come no more often than keeps them to `SHARE` of the communicator's calls.

use crate::budget;

/// Bounds of the spacing of checkpoints, in collective instances of the communicator.
pub const MIN_INTERVAL: u64 = 4;
pub const MAX_INTERVAL: u64 = 1 << 16;

/// A checkpoint's reduction is finished this many instances of the communicator after it
/// started, and what it found is acted on there: the application's calls between progress it.
/// Finished at the next instance, on the 1 Gbit/s rig the wait still took 25 to 60 us of the
/// 60 to 75 a blocking checkpoint took.
pub const FINISH_AFTER: u64 = 4;

/// The share of a communicator's time that checkpoints finding nothing may take.
pub const SHARE: f64 = 0.01;

/// What a checkpoint found, for the spacing of the next one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Found {
    /// Something to act on, or ranks not yet agreeing: the next checkpoint soon.
    Busy,
    /// Nothing to tune.
    Idle,
    /// A key whose search would not pay yet, and will from this instance of the communicator
    /// if the key keeps its rate.
    NotWorthUntil(u64),
}

/// The spacing of one communicator's checkpoints (the same on every rank: it changes only with
/// the agreed outcome of each checkpoint).
#[derive(Clone, Debug)]
pub struct Spacing {
    interval: u64,
    checks: u64,
    /// The earliest instance at which a key found not worth searching will be (u64::MAX: none).
    wake: u64,
    /// The instance of the last wake that started the interval again.
    woken: u64,
    /// Whether a wake that finds its key still not worth searching may name the instance of the
    /// next one (once per wake the doubling rule let through): a key's first estimate of when
    /// its search pays comes before its search's collectives are timed, and falls short.
    retry: bool,
    /// The least interval after a checkpoint that found nothing to do (`weigh`; None: the
    /// least of all).
    floor: Option<u64>,
}

impl Default for Spacing {
    fn default() -> Spacing {
        Spacing {
            interval: MIN_INTERVAL,
            checks: 0,
            wake: u64::MAX,
            woken: 0,
            retry: false,
            floor: None,
        }
    }
}

impl Spacing {
    /// The first checkpoint's instance.
    pub const FIRST: u64 = MIN_INTERVAL;

    /// A checkpoint costs `checkpoint_over_call` calls of a key of the communicator (agreed:
    /// the largest of the ranks'; 0 when not known). The key of the longest calls seen sets the
    /// floor, so that a communicator with long calls as well is not checked too rarely.
    pub fn weigh(&mut self, checkpoint_over_call: f64) {
        if checkpoint_over_call <= 0.0 {
            return;
        }
        // Checkpoints come on average half an interval apart.
        let floor = (2.0 * checkpoint_over_call / SHARE).ceil();
        let floor = (floor.min(MAX_INTERVAL as f64) as u64).max(MIN_INTERVAL);
        self.floor = Some(self.floor.map_or(floor, |f| f.min(floor)));
    }

    /// The instance of the next checkpoint after the one at instance `now` found `found`: within
    /// the interval, with a deterministic jitter so that checkpoints do not keep landing on the
    /// same key of a repeating pattern, and no later than a key's search will pay.
    pub fn next(&mut self, now: u64, found: Found) -> u64 {
        let woke = self.wake <= now;
        if woke {
            self.wake = u64::MAX;
            self.woken = now;
        }
        let floor = self.floor.unwrap_or(MIN_INTERVAL);
        self.interval = match found {
            Found::Busy => MIN_INTERVAL,
            _ if woke => floor,
            Found::Idle | Found::NotWorthUntil(_) => {
                (self.interval * 2).max(floor).min(MAX_INTERVAL)
            }
        };
        // One wake per doubling of the communicator's instances at most, and one retry of it: a
        // key that stays on the edge of paying must not bring a checkpoint every few calls.
        if let Found::NotWorthUntil(at) = found {
            if at >= 2 * self.woken {
                self.wake = self.wake.min(at);
                self.retry = true;
            } else if woke && std::mem::take(&mut self.retry) {
                self.wake = at;
            }
        }
        self.checks += 1;
        let mut x = self.checks.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 31;
        (now + 1 + x % self.interval).min(self.wake.max(now + 1))
    }
}

/// The instance of the communicator from which a search of `cost` instances pays for itself
/// (`budget::worth_searching`, a winner expected to save `gain` of a call) for a key called
/// `calls` times since instance `born`, now at instance `now`, if it keeps being called at the
/// same rate: at least `now + 1`.
pub fn worth_at(calls: u64, born: u64, now: u64, cost: u64, gain: f64) -> u64 {
    let rate = calls as f64 / (now.saturating_sub(born) + 1) as f64;
    if rate <= 0.0 {
        return u64::MAX;
    }
    // remaining_calls at instance m is rate * (m + 1).
    let at = (budget::calls_over_instances(gain) * cost as f64 / rate).ceil() - 1.0;
    if at >= u64::MAX as f64 {
        u64::MAX
    } else {
        (at.max(0.0) as u64).max(now + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The communicator instance at which a checkpoint first lands on key 0 of a loop calling
    /// `keys` keys in turn, at or after instance `worth` (when key 0's search pays; the others'
    /// never does), or None within `limit` instances. `wakes` feeds the spacing the instance
    /// from which a key is worth, as the library does; without it every checkpoint is idle.
    fn first_worth_checkpoint(keys: u64, worth: u64, wakes: bool, limit: u64) -> Option<u64> {
        let mut spacing = Spacing::default();
        let mut at = Spacing::FIRST;
        while at < limit {
            let key = at % keys;
            if key == 0 && at >= worth {
                return Some(at);
            }
            let found = match (wakes, key) {
                (true, 0) => Found::NotWorthUntil(worth),
                (true, _) => Found::NotWorthUntil(u64::MAX),
                (false, _) => Found::Idle,
            };
            at = spacing.next(at, found);
        }
        None
    }

    #[test]
    fn a_key_worth_searching_is_not_starved_by_keys_that_are_not() {
        // The loop of tests/tuner.rs `budget_stops_a_costly_search_early`: an allreduce worth a
        // search after about 190 of its calls, between an alltoall and an allgatherv never worth
        // one.
        for keys in 1..=4 {
            for worth in [190 * keys, 500 * keys, 5000 * keys] {
                let found = first_worth_checkpoint(keys, worth, true, 1 << 24)
                    .unwrap_or_else(|| panic!("{keys} keys, worth at {worth}: never found"));
                assert!(
                    found - worth <= 16 * keys,
                    "{keys} keys, worth at {worth}: found at {found}"
                );
            }
        }
        // Doubling alone found the allreduce hundreds of calls late.
        let late = first_worth_checkpoint(3, 570, false, 1 << 24).unwrap();
        assert!(late - 570 > 300, "{late}");
    }

    #[test]
    fn idle_checkpoints_space_out_and_a_wake_comes_once() {
        let count = |found: &dyn Fn(u64) -> Found| {
            let mut spacing = Spacing::default();
            let mut at = Spacing::FIRST;
            let mut checks = 0;
            while at < 1_000_000 {
                checks += 1;
                at = spacing.next(at, found(at));
            }
            checks
        };
        let idle = count(&|_| Found::Idle);
        assert!(idle < 50, "{idle} checkpoints");
        // A key not worth searching until instance 5000 adds the few checkpoints after it.
        let woken = count(&|now| {
            if now < 5000 {
                Found::NotWorthUntil(5000)
            } else {
                Found::Idle
            }
        });
        assert!(woken > idle && woken < idle + 20, "{woken} against {idle}");
        // One always on the edge of paying restarts the interval once per doubling at most (and
        // once more at the retry its wake allows).
        let edge = count(&|now| Found::NotWorthUntil(now + 1));
        assert!(edge < 20 * idle, "{edge} against {idle}");
    }

    /// Seen on the 1 Gbit/s rig (1 MiB allgatherv, 400 calls): the first checkpoint named
    /// instance 47, before the search's collectives were timed; the wake there found the search
    /// would pay from 49, and with early checkpoints as costly as a quarter of a call (a floor of
    /// 46 instances) the next came 7 to 27 instances later.
    #[test]
    fn a_wake_that_comes_too_early_comes_again_once() {
        let mut spacing = Spacing::default();
        spacing.weigh(0.23);
        let mut at = spacing.next(4, Found::NotWorthUntil(47));
        while at < 47 {
            at = spacing.next(at, Found::NotWorthUntil(49));
        }
        assert_eq!(at, 47);
        let retry = spacing.next(47, Found::NotWorthUntil(49));
        assert_eq!(retry, 49, "the key's search pays from there");
        // A second miss does not name the next checkpoint: the interval does.
        spacing.next(49, Found::NotWorthUntil(52));
        assert_eq!(spacing.wake, u64::MAX);
    }

    #[test]
    fn the_wake_is_a_checkpoint_of_its_own() {
        let mut spacing = Spacing::default();
        let next = spacing.next(100, Found::NotWorthUntil(102));
        assert!(next <= 102);
        let mut at = next;
        while at < 102 {
            at = spacing.next(at, Found::Idle);
        }
        assert_eq!(at, 102);
        // From there the interval starts again from its least.
        assert!(spacing.next(102, Found::Idle) <= 102 + 2 * MIN_INTERVAL);
    }

    #[test]
    fn checkpoints_as_long_as_calls_come_rarely() {
        let gaps = |checkpoint_over_call: f64| {
            let mut spacing = Spacing::default();
            spacing.weigh(checkpoint_over_call);
            let mut at = Spacing::FIRST;
            let mut checks = 0;
            while at < 100_000 {
                checks += 1;
                at = spacing.next(at, Found::Idle);
            }
            checks
        };
        // A checkpoint worth 15 calls (8 bytes on shared memory) is taken at most every 3000
        // instances on average, one worth a hundredth of a call doubles its interval as before.
        let (short, long) = (gaps(15.0), gaps(0.01));
        assert!(short <= 100_000 / 1500, "{short}");
        assert!(long > short, "{long} against {short}");
        assert_eq!(long, gaps(0.0), "no floor below the least interval");
        // The cheapest key of a communicator sets the floor.
        let mut spacing = Spacing::default();
        spacing.weigh(0.01);
        spacing.weigh(15.0);
        assert!(spacing.next(100, Found::Idle) <= 100 + 2 * MIN_INTERVAL);
    }

    #[test]
    fn a_search_pays_from_the_instance_worth_at_names() {
        let cases = [(10, 0, 9, 56), (5, 1000, 1100, 56), (30, 0, 89, 400)];
        for ((calls, born, now, cost), gain) in cases
            .into_iter()
            .flat_map(|case| [(case, budget::GAIN), (case, budget::MAX_GAIN)])
        {
            let at = worth_at(calls, born, now, cost, gain);
            let rate = calls as f64 / (now - born + 1) as f64;
            let calls_then = |m: u64| (rate * (m - born + 1) as f64).round() as u64;
            assert!(
                budget::worth_searching(calls_then(at) + 1, born, at, cost, gain),
                "{calls} calls since {born}, at {now}, gain {gain}: {at}"
            );
            // Worth it already where `at` is the next instance.
            assert!(
                at == now + 1
                    || !budget::worth_searching(calls_then(at - 2), born, at - 2, cost, gain)
            );
        }
        assert_eq!(
            worth_at(112, 0, 111, 56, budget::GAIN),
            112,
            "worth now: the next instance"
        );
        assert_eq!(worth_at(0, 0, 10, 56, budget::GAIN), u64::MAX);
    }
}
