//! What a search sample is, and the order of a search's instances.
//!
//! A round runs each remaining candidate for a *block* of consecutive instances of the key. The
//! first instance of a block is never measured: on a network, one codelet's traffic and queues
//! spill into the next instance, so the first instance after a switch pays for its predecessor.
//! The others give the block's one sample, the time per instance as the application feels it:
//! - `Local`: the mean duration of the measured instances on this rank;
//! - `Barrier`: the same, each measured instance after a barrier;
//! - `Period`: from a barrier before the first measured instance (every rank starts the block
//!   together) to the entry of the key's next instance after the block, over the measured
//!   instances: the asynchronous tails and the application's own work between calls included.
//!
//! Pure: the library feeds it clock readings of one rank; ranks agree on estimates, not samples.

use crate::check::Prediction;
use crate::policy::{Agreed, Next, Plan};
use crate::settings::Timing;
use crate::stats::{self, Filter, Samples};

/// The instances a block runs with `timing` when COMMTUNE_BLOCK is `block`.
fn block_for(timing: Timing, block: usize) -> usize {
    match timing {
        Timing::Period => block.max(2),
        Timing::Local | Timing::Barrier => block.max(1),
    }
}

/// The instances a search of `candidates` codelets runs at most (none with one candidate: only
/// native applies, nothing to search).
pub fn search_instances(candidates: usize, timing: Timing, block: usize, samples: u32) -> u64 {
    if candidates <= 1 {
        return 0;
    }
    (candidates * block_for(timing, block)) as u64 * u64::from(samples.max(1))
}

/// What the first `rounds` rounds of a search of `candidates` codelets cost, which do no harm
/// weighs (`budget::search_cost`, `budget::ROUNDS_WEIGHED`): their instances, and the small
/// collectives besides them (a barrier before each timed sample with `barrier` timing or each
/// block with `period`, a reduction per round, and the self-check's reduction and its trial's).
/// None with one candidate.
pub fn rounds_cost(candidates: usize, timing: Timing, block: usize, rounds: u32) -> (u64, u64) {
    if candidates <= 1 {
        return (0, 0);
    }
    let instances = search_instances(candidates, timing, block, rounds);
    let blocks = candidates as u64 * u64::from(rounds.max(1));
    let barriers = match timing {
        Timing::Local => 0,
        Timing::Barrier => blocks * block_for(timing, block).saturating_sub(1).max(1) as u64,
        Timing::Period => blocks,
    };
    (instances, barriers + u64::from(rounds.max(1)) + 2)
}

/// One key's search: the policy's plan and the samples its instances give.
#[derive(Debug)]
pub struct Sampler {
    pub plan: Plan,
    pub timing: Timing,
    /// Instances per block (the first discarded when more than one).
    block: usize,
    /// The codelet of each instance of this round, and the next position in it.
    schedule: Vec<usize>,
    position: usize,
    samples: Samples,
    /// Each measured instance's ticks from its start to its end, per codelet (`instance_tails`).
    instances: Samples,
    /// Clock ticks spent per codelet (registry index), all instances.
    spent: Vec<(usize, u64)>,
    /// The block being run.
    open: Option<Block>,
}

#[derive(Debug)]
struct Block {
    codelet: usize,
    /// Instances of the block run so far, and how many of them were measured.
    ran: usize,
    measured: usize,
    /// Local/barrier: the measured instances' durations; period: the first measured start.
    ticks: u64,
    start: Option<u64>,
}

/// The next instance of a searched key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Turn {
    /// Run `codelet`; `barrier`: after a barrier; `measured`: its time counts.
    Run {
        codelet: usize,
        barrier: bool,
        measured: bool,
    },
    /// The round is over: agree on `estimates` and call `after_round`.
    RoundEnd,
}

impl Sampler {
    /// A search under `plan`, each candidate run `block` instances in a row per round (period
    /// timing needs two: one to discard, one to measure).
    pub fn new(plan: Plan, timing: Timing, block: usize) -> Sampler {
        let block = block_for(timing, block);
        let mut sampler = Sampler {
            plan,
            timing,
            block,
            schedule: Vec::new(),
            position: 0,
            samples: Samples::default(),
            instances: Samples::default(),
            spent: Vec::new(),
            open: None,
        };
        sampler.new_round();
        sampler
    }

    fn new_round(&mut self) {
        self.schedule = self
            .plan
            .candidates
            .iter()
            .flat_map(|c| std::iter::repeat_n(c.index, self.block))
            .collect();
        self.position = 0;
    }

    /// Instances a round runs now.
    pub fn round_len(&self) -> usize {
        self.schedule.len()
    }

    /// The key's next instance is entered at clock `now`: ends the sample of a block whose
    /// instances all ran, returned as (codelet, ticks per instance).
    pub fn close(&mut self, now: u64) -> Option<(usize, f64)> {
        let block = self.open.take_if(|b| b.ran == self.block)?;
        if block.measured == 0 {
            return None;
        }
        let ticks = match (self.timing, block.start) {
            (Timing::Period, Some(start)) => now.saturating_sub(start),
            (Timing::Period, None) => return None,
            (Timing::Local | Timing::Barrier, _) => block.ticks,
        };
        let sample = ticks as f64 / block.measured as f64;
        self.samples.of(block.codelet).push(sample);
        Some((block.codelet, sample))
    }

    /// What the next instance runs (after `close`); each call is one instance.
    pub fn turn(&mut self) -> Turn {
        if self.position == self.schedule.len() {
            return Turn::RoundEnd;
        }
        let codelet = self.schedule[self.position];
        let at = self.position % self.block;
        self.position += 1;
        if at == 0 {
            self.open = Some(Block {
                codelet,
                ran: 0,
                measured: 0,
                ticks: 0,
                start: None,
            });
        }
        let measured = self.block == 1 || at > 0;
        let barrier = match self.timing {
            Timing::Local => false,
            Timing::Barrier => measured,
            Timing::Period => at == 1,
        };
        Turn::Run {
            codelet,
            barrier,
            measured,
        }
    }

    /// The instance `turn` gave ran from `start` (after its barrier, if any) to `end`, and took
    /// `spent` ticks in all (its barrier included).
    pub fn ran(&mut self, start: u64, end: u64, spent: u64) {
        let Some(block) = &mut self.open else {
            return;
        };
        let codelet = block.codelet;
        let measured = self.block == 1 || block.ran > 0;
        block.ran += 1;
        if measured {
            block.measured += 1;
            block.ticks += end.saturating_sub(start);
            block.start.get_or_insert(start);
            self.instances
                .of(codelet)
                .push(end.saturating_sub(start) as f64);
        }
        match self.spent.iter_mut().find(|(i, _)| *i == codelet) {
            Some((_, t)) => *t += spent,
            None => self.spent.push((codelet, spent)),
        }
    }

    /// This rank's estimate of every candidate, in the plan's order.
    pub fn estimates(&self, filter: Filter) -> Vec<Agreed> {
        self.plan
            .candidates
            .iter()
            .map(|c| self.samples.estimate(filter, c.index))
            .collect()
    }

    /// This rank's estimate of every candidate, in the plan's order, where the candidates that
    /// `bursts` (those that post every message of an instance at once) share their tails: each
    /// candidate's median measured instance (from its start to its end: a halo episode's period
    /// under `period` timing), less its own mean shortfall below it, plus the mean excess above
    /// their own medians of every measured instance of the candidates of its kind, bursting or
    /// not (`stats::shared_tails`). The error is the block samples' (`estimates`).
    ///
    /// On a network, what a burst of messages costs beyond its typical time is the network's
    /// answer to the burst (a shaped NIC's queue overflows and TCP retransmits), the same for
    /// every codelet that bursts, and rare: on the 1 Gbit/s rig the halo codelets that post
    /// every message at once stall for about 20 ms in 8 to 12 % of 64 KiB exchanges (median
    /// 1.9 ms, mean 3.4 to 3.9 ms), `pairwise`, which posts one peer at a time, never (mean 2.1
    /// ms). Two blocks of 3 measured exchanges (of 7) miss every stall of one codelet with
    /// probability 0.53 (0.23), so with its own samples alone most searches had a bursting
    /// codelet ahead of `pairwise`; pooled over four such codelets, 24 exchanges (56) miss them
    /// with probability 0.08 (0.003). Replayed over per-exchange times of each codelet forced alone on the rig
    /// (`bench/halo-lead.py`), searches in blocks of 8 chose `pairwise` in 93 % of 400 runs
    /// instead of 34 %, in blocks of 4 in 76 % instead of 16 %.
    pub fn estimates_sharing_tails(
        &self,
        filter: Filter,
        bursts: impl Fn(usize) -> bool,
    ) -> Vec<Agreed> {
        let blocks = self.estimates(filter);
        let codelets: Vec<usize> = self.plan.candidates.iter().map(|c| c.index).collect();
        let shared = stats::shared_tails(&self.instances, &codelets, bursts);
        blocks
            .into_iter()
            .zip(shared)
            .map(|(block, shared)| match shared {
                Some(location) => Agreed {
                    location,
                    error: block.error,
                },
                None => block,
            })
            .collect()
    }

    /// Share of `key_ticks` (the key's expected time over the run) spent on codelets other than
    /// the leader.
    pub fn wasted_share(&self, key_ticks: f64) -> f64 {
        let leader = self
            .plan
            .estimates
            .iter()
            .min_by(|a, b| a.1.location.total_cmp(&b.1.location))
            .map(|(i, _)| *i);
        let wasted: u64 = self
            .spent
            .iter()
            .filter(|(i, _)| Some(*i) != leader)
            .map(|(_, t)| t)
            .sum();
        if key_ticks > 0.0 {
            wasted as f64 / key_ticks
        } else {
            0.0
        }
    }

    /// What the search predicts for `winner`, the two best other codelets and the best other
    /// that exchanges with one partner at a time (`check`).
    pub fn prediction(&self, winner: usize) -> Option<Prediction> {
        let winner_estimate = self.plan.estimate(winner)?.location;
        let mut others: Vec<(usize, f64)> = self
            .plan
            .estimates
            .iter()
            .filter(|(i, _)| *i != winner)
            .map(|(i, e)| (*i, e.location))
            .collect();
        others.sort_by(|a, b| a.1.total_cmp(&b.1));
        let paced = others.iter().copied().find(|(i, _)| {
            self.plan
                .entrants
                .iter()
                .any(|c| c.index == *i && c.paces())
        });
        Some(Prediction {
            winner: winner_estimate,
            runner_up: others.first().copied(),
            third: others.get(1).copied(),
            paced,
            timing: self.timing,
        })
    }

    /// `codelet` cannot run this key (a halo codelet that never applies to its messages): it
    /// leaves the race, its block and samples with it. Never native, which always applies.
    pub fn drop_candidate(&mut self, codelet: usize) {
        self.plan.candidates.retain(|c| c.index != codelet);
        self.samples.retain(|c| c != codelet);
        self.instances.retain(|c| c != codelet);
        // Its instances leave the schedule whole blocks at a time (an open one's too), so the
        // others' blocks keep their alignment.
        self.position = self.schedule[..self.position]
            .iter()
            .filter(|&&c| c != codelet)
            .count();
        self.schedule.retain(|&c| c != codelet);
        self.open.take_if(|b| b.codelet == codelet);
    }

    /// Takes the round's agreed estimates (see `Plan::after_round`); on `Next::Round` the next
    /// round's instances are scheduled.
    pub fn after_round(&mut self, agreed: &[Agreed], stop: bool, min_gain: f64) -> Next {
        let next = self.plan.after_round(agreed, stop, min_gain);
        if next == Next::Round {
            self.new_round();
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::Partners;
    use crate::policy::{Candidate, Search};

    fn plan(codelets: &[usize]) -> Plan {
        let candidates = codelets
            .iter()
            .map(|&index| Candidate {
                index,
                partners: Partners::All,
                collectives: false,
            })
            .collect();
        Plan::new(Search::Brute, candidates, 4)
    }

    /// Runs one round where instance `i` of codelet `c` takes `cost(c, i_in_block)` ticks and the
    /// application works `gap` ticks between instances; returns the samples and the barriers.
    fn round(
        s: &mut Sampler,
        clock: &mut u64,
        gap: u64,
        cost: impl Fn(usize, usize) -> u64,
    ) -> (Vec<(usize, f64)>, Vec<bool>) {
        let (mut samples, mut barriers) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut last = None;
        loop {
            samples.extend(s.close(*clock));
            let Turn::Run {
                codelet, barrier, ..
            } = s.turn()
            else {
                return (samples, barriers);
            };
            at = if last == Some(codelet) { at + 1 } else { 0 };
            last = Some(codelet);
            barriers.push(barrier);
            let start = *clock;
            *clock += cost(codelet, at);
            s.ran(start, *clock, *clock - start);
            *clock += gap;
        }
    }

    #[test]
    fn rounds_cost_counts_their_instances_and_the_barriers_they_hold() {
        for timing in [Timing::Local, Timing::Barrier, Timing::Period] {
            for block in [1, 3] {
                let mut s = Sampler::new(plan(&[0, 1]), timing, block);
                let (_, barriers) = round(&mut s, &mut 0, 0, |_, _| 100);
                let per_round = barriers.iter().filter(|b| **b).count() as u64;
                let instances = barriers.len() as u64;
                // A reduction per round, and the self-check's two.
                assert_eq!(
                    rounds_cost(2, timing, block, 2),
                    (2 * instances, 2 * per_round + 2 + 2),
                    "{timing:?}, blocks of {block}"
                );
            }
        }
        assert_eq!(rounds_cost(1, Timing::Barrier, 1, 2), (0, 0));
    }

    #[test]
    fn the_first_instance_of_a_block_is_not_measured() {
        // Each codelet's first instance pays 1000 ticks for the previous one's traffic.
        let cost = |c: usize, at: usize| if at == 0 { 1000 } else { [100, 50][c] };
        let mut s = Sampler::new(plan(&[0, 1]), Timing::Local, 3);
        let (samples, barriers) = round(&mut s, &mut 0, 0, cost);
        assert_eq!(samples, [(0, 100.0), (1, 50.0)]);
        assert!(barriers.iter().all(|b| !b));
        assert_eq!(s.round_len(), 6);
    }

    #[test]
    fn period_samples_include_the_work_between_calls_and_start_together() {
        let cost = |c: usize, _: usize| [100, 50][c];
        let mut s = Sampler::new(plan(&[0, 1]), Timing::Period, 4);
        let mut clock = 0;
        let (samples, barriers) = round(&mut s, &mut clock, 30, cost);
        // The last block ends at the round's end, when the next instance enters.
        assert_eq!(samples, [(0, 130.0), (1, 80.0)]);
        let expected = [false, true, false, false];
        assert_eq!(barriers, [expected, expected].concat());
    }

    #[test]
    fn period_timing_needs_a_block_of_two() {
        let mut s = Sampler::new(plan(&[0, 1]), Timing::Period, 1);
        assert_eq!(s.round_len(), 4);
        let (samples, _) = round(&mut s, &mut 0, 0, |c, _| [10, 20][c]);
        assert_eq!(samples, [(0, 10.0), (1, 20.0)]);
    }

    #[test]
    fn a_block_of_one_measures_every_instance() {
        let mut s = Sampler::new(plan(&[0, 1, 2]), Timing::Barrier, 1);
        let (samples, barriers) = round(&mut s, &mut 0, 5, |c, _| [10, 20, 30][c]);
        assert_eq!(samples, [(0, 10.0), (1, 20.0), (2, 30.0)]);
        assert_eq!(barriers, [true, true, true]);
    }

    #[test]
    fn a_dropped_candidate_leaves_the_round_mid_block() {
        let mut s = Sampler::new(plan(&[0, 1, 2]), Timing::Local, 2);
        // Runs `n` instances of 10 ticks each: their codelets and the samples they closed.
        let runs = |s: &mut Sampler, n: usize| {
            let (mut codelets, mut samples) = (Vec::new(), Vec::new());
            for _ in 0..n {
                samples.extend(s.close(0));
                match s.turn() {
                    Turn::Run { codelet, .. } => {
                        s.ran(0, 10, 10);
                        codelets.push(codelet);
                    }
                    Turn::RoundEnd => codelets.push(usize::MAX),
                }
            }
            (codelets, samples)
        };
        assert_eq!(runs(&mut s, 3), (vec![0, 0, 1], vec![(0, 10.0)]));
        s.drop_candidate(1);
        // Codelet 1's open block gives no sample; codelet 2 follows.
        assert_eq!(runs(&mut s, 3), (vec![2, 2, usize::MAX], vec![(2, 10.0)]));
        let indices: Vec<usize> = s.plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(indices, [0, 2]);
        assert_eq!(s.estimates(Filter::Robust { nu: 5.0 }).len(), 2);
    }

    #[test]
    fn bursting_codelets_share_their_tails() {
        // 0 and 1 post every message at once, and one of 1's instances stalls; 2 is paced.
        let cost = |c: usize, at: usize| {
            if (c, at) == (1, 2) {
                1000
            } else {
                [100, 100, 120][c]
            }
        };
        let mut s = Sampler::new(plan(&[0, 1, 2]), Timing::Local, 4);
        round(&mut s, &mut 0, 0, cost);
        let filter = Filter::Robust { nu: 5.0 };
        let locations =
            |estimates: Vec<Agreed>| -> Vec<f64> { estimates.iter().map(|a| a.location).collect() };
        assert_eq!(locations(s.estimates(filter)), [100.0, 400.0, 120.0]);
        // The stall's 900 ticks over the six measured instances of the two that burst.
        assert_eq!(
            locations(s.estimates_sharing_tails(filter, |c| c != 2)),
            [250.0, 250.0, 120.0]
        );
        s.drop_candidate(1);
        assert_eq!(
            locations(s.estimates_sharing_tails(filter, |c| c != 2)),
            [100.0, 120.0],
            "a dropped codelet's instances leave with it"
        );
    }

    #[test]
    fn the_prediction_names_the_best_codelet_that_paces_pruned_or_not() {
        let candidates = [
            (0, Partners::Tree, true),
            (1, Partners::All, false),
            (2, Partners::Pair, false),
            (3, Partners::Pair, false),
            (4, Partners::Tree, false),
        ]
        .map(|(index, partners, collectives)| Candidate {
            index,
            partners,
            collectives,
        });
        let plan = Plan::new(Search::Attributes, candidates.to_vec(), 4);
        let mut s = Sampler::new(plan, Timing::Barrier, 1);
        let at = |location| Agreed {
            location,
            error: 0.0,
        };
        s.plan.estimates = vec![
            (0, at(10.0)),
            (1, at(11.0)),
            (2, at(14.0)),
            (3, at(13.0)),
            (4, at(12.0)),
        ];
        // The attribute search went on with the codelets that post to everyone at once.
        s.plan.candidates.retain(|c| c.partners == Partners::All);
        let p = s.prediction(0).unwrap();
        assert_eq!(p.runner_up, Some((1, 11.0)));
        assert_eq!(p.paced, Some((3, 13.0)), "a tree does not pace");
        assert_eq!(s.prediction(3).unwrap().paced, Some((2, 14.0)));
    }

    #[test]
    fn rounds_follow_the_plan_and_estimates_come_from_samples() {
        let mut s = Sampler::new(plan(&[0, 1]), Timing::Local, 2);
        let mut clock = 0;
        round(&mut s, &mut clock, 0, |c, _| [100, 50][c]);
        let local = s.estimates(Filter::Robust { nu: 5.0 });
        assert_eq!(
            local.iter().map(|a| a.location).collect::<Vec<_>>(),
            [100.0, 50.0]
        );
        assert_eq!(s.after_round(&local, false, 0.02), Next::Round);
        assert_eq!(s.round_len(), 4, "a new round is scheduled");
        // The leader's instances (1: 2 x 50 ticks) are not wasted; native's (2 x 100) are.
        let share = s.wasted_share(300.0);
        assert!((share - 200.0 / 300.0).abs() < 1e-9, "{share}");
    }
}
