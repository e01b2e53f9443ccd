//! Search policies: which codelets stay in the race after each round, and when to decide.
//!
//! Pure: the tuner feeds each round's agreed estimates (the same on every rank), so every rank
//! takes the same decisions. A round gives every remaining candidate one more sample.

use commtune_report::CodeletEstimate;

use crate::attributes::Partners;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Search {
    /// Every applicable codelet `samples` times, interleaved round-robin.
    Brute,
    /// ADCL's attribute search: an attribute value that is best in two consecutive rounds
    /// prunes the codelets without it (partners first, then use of collectives).
    Attributes,
    /// Successive elimination: from the third round on, drop codelets whose lower bound is
    /// above the leader's upper bound; stop when one is left.
    Racing,
}

/// A halo codelet whose block took more than this many times the leader's leaves the search
/// after the round (`Plan::halo`). A block's period is a mean over its episodes, so one round
/// tells such a codelet apart, and its next block would cost the most: under MPICH on shared
/// memory, `pack` took 0.11 ms per exchange and the others 0.75 to 0.9; on the 1 Gbit/s rig,
/// where stalls make one block of a codelet up to 4 times another, the leader's closest rivals
/// stay.
pub const HALO_SLOWER_LEAVES: f64 = 2.0;

/// A collective codelet whose sample took more than this many times the leader's leaves the search
/// after the round (`Plan::collective`). A collective's sample is one instance, the first after a
/// switch, which on the 1 Gbit/s rig took up to 2.9 times the codelet's steady time (`commtune
/// simulate`'s `switch_x`), so the bar is higher than a halo block's (`HALO_SLOWER_LEAVES`, a mean
/// over episodes). Replayed over tests/data with the library's defaults (40 replays per key): at
/// 400 calls 6 of the 8 keys better (the rig's alltoall of 64 KiB per rank 1.160 to 1.117 of the
/// best codelet, its 4 MiB alltoall 1.049 to 1.038), shared memory's 1 MiB allreduce 0.002 worse;
/// at 2000 calls 5 better (that alltoall 1.061 to 1.031), the rig's 64 KiB allreduce 0.004 worse
/// and shared memory's 0.001. A cut at 2 lost the rig's 64 KiB allreduce (1.189 to 1.211) and
/// shared memory's 8-byte alltoall (1.750 to 1.827); at 3 it gained less; a cut from the second
/// round on gained nothing. Do no harm still weighs every candidate in the rounds it weighs
/// (`budget::ROUNDS_WEIGHED`): an upper bound, since the cut is known only after the first round.
pub const COLLECTIVE_SLOWER_LEAVES: f64 = 2.5;

/// A codelet in the search.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Candidate {
    /// Index in the operation's registry (0 = native).
    pub index: usize,
    pub partners: Partners,
    pub collectives: bool,
}

impl Candidate {
    /// Whether the codelet exchanges with one partner per step, built on point-to-point calls:
    /// what it posts at once never overflows a queue the way a burst to every partner does
    /// (native's schedule is unknown, and a tree's steps hold several partners or gathered blocks).
    pub fn paces(&self) -> bool {
        !self.collectives && self.partners == Partners::Pair
    }
}

/// A codelet's agreed estimate after a round: typical time and its standard error.
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Agreed {
    pub location: f64,
    pub error: f64,
}

impl Agreed {
    fn lower(&self) -> f64 {
        self.location - 2.0 * self.error
    }
    fn upper(&self) -> f64 {
        self.location + 2.0 * self.error
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Next {
    /// Another round over `Plan::candidates`.
    Round,
    /// The winner's registry index.
    Decide(usize),
}

/// One key's search.
#[derive(Clone, Debug)]
pub struct Plan {
    pub policy: Search,
    /// Still in the race, in a fixed order (identical on every rank).
    pub candidates: Vec<Candidate>,
    /// Every codelet that entered the race, pruned or not.
    pub entrants: Vec<Candidate>,
    /// Rounds completed.
    pub rounds: u32,
    max_rounds: u32,
    /// The latest agreed estimate of every codelet that ever ran (by registry index).
    pub estimates: Vec<(usize, Agreed)>,
    /// Attribute search: the best partners value of the last round, if not yet confirmed.
    best_partners: Option<Partners>,
    partners_fixed: bool,
    best_collectives: Option<bool>,
    /// After each round but the last, candidates slower than this many times the leader
    /// leave the race unless the policy is `brute` (`cut_slower_than`); None: only the policy
    /// prunes.
    cut: Option<f64>,
}

impl Plan {
    pub fn new(policy: Search, candidates: Vec<Candidate>, samples: u32) -> Plan {
        Plan {
            policy,
            entrants: candidates.clone(),
            candidates,
            rounds: 0,
            max_rounds: samples.max(1),
            estimates: Vec::new(),
            best_partners: None,
            partners_fixed: false,
            best_collectives: None,
            cut: None,
        }
    }

    /// The plan where, besides the policy's pruning, a candidate whose estimate after a round
    /// is more than `factor` times the leader's leaves the race, native included (its estimate
    /// stays the baseline `winner` compares with); `brute` prunes nothing, this neither. For
    /// samples that are already means over many instances (a halo search's blocks), one round
    /// tells a codelet several times slower apart, and sampling it again costs the most.
    fn cut_slower_than(self, factor: f64) -> Plan {
        Plan {
            cut: Some(factor),
            ..self
        }
    }

    /// A collective key's search: `new` with the cut at `COLLECTIVE_SLOWER_LEAVES`.
    pub fn collective(policy: Search, candidates: Vec<Candidate>, samples: u32) -> Plan {
        Plan::new(policy, candidates, samples).cut_slower_than(COLLECTIVE_SLOWER_LEAVES)
    }

    /// A halo class's search: `new` with the cut at `HALO_SLOWER_LEAVES`.
    pub fn halo(policy: Search, candidates: Vec<Candidate>, samples: u32) -> Plan {
        Plan::new(policy, candidates, samples).cut_slower_than(HALO_SLOWER_LEAVES)
    }

    /// The estimates of every codelet that ran, for the report, in microseconds.
    pub fn report_estimates(&self, names: &[&str], ns_per_tick: f64) -> Vec<CodeletEstimate> {
        let us = |ticks: f64| ticks * ns_per_tick * 1e-3;
        self.estimates
            .iter()
            .map(|(i, e)| CodeletEstimate {
                name: names[*i].to_string(),
                estimate_us: us(e.location),
                error_us: us(e.error),
            })
            .collect()
    }

    pub fn estimate(&self, index: usize) -> Option<Agreed> {
        self.estimates
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, e)| *e)
    }

    /// Takes the agreed estimates of the round just completed (one per candidate, in order) and
    /// says what comes next. `stop` ends the search now (budget exhausted).
    pub fn after_round(&mut self, agreed: &[Agreed], stop: bool, min_gain: f64) -> Next {
        self.rounds += 1;
        for (c, e) in self.candidates.iter().zip(agreed) {
            match self.estimates.iter_mut().find(|(i, _)| *i == c.index) {
                Some(slot) => slot.1 = *e,
                None => self.estimates.push((c.index, *e)),
            }
        }
        if stop || self.rounds >= self.max_rounds || self.candidates.len() <= 1 {
            return Next::Decide(self.winner(min_gain));
        }
        match self.policy {
            Search::Brute => {}
            Search::Racing => self.race(),
            Search::Attributes => self.prune_by_attributes(),
        }
        if let Some(factor) = self.cut.filter(|_| self.policy != Search::Brute) {
            self.cut_slow(factor);
        }
        if self.candidates.len() <= 1 {
            Next::Decide(self.winner(min_gain))
        } else {
            Next::Round
        }
    }

    fn leader(&self) -> Option<(Candidate, Agreed)> {
        self.fastest(|_| true)
    }

    fn fastest(&self, among: impl Fn(&Candidate) -> bool) -> Option<(Candidate, Agreed)> {
        self.candidates
            .iter()
            .filter(|c| among(c))
            .filter_map(|c| Some((*c, self.estimate(c.index)?)))
            .min_by(|a, b| a.1.location.total_cmp(&b.1.location))
    }

    fn race(&mut self) {
        if self.rounds < 3 {
            return;
        }
        let Some((_, leader)) = self.leader() else {
            return;
        };
        self.keep(|e| e.lower() <= leader.upper());
    }

    fn cut_slow(&mut self, factor: f64) {
        let Some((_, leader)) = self.leader() else {
            return;
        };
        self.keep(|e| e.location <= factor * leader.location);
    }

    /// Keeps the candidates not yet estimated and those whose estimate passes `keep`.
    fn keep(&mut self, keep: impl Fn(Agreed) -> bool) {
        let estimates = &self.estimates;
        self.candidates.retain(|c| {
            estimates
                .iter()
                .find(|(i, _)| *i == c.index)
                .is_none_or(|(_, e)| keep(*e))
        });
    }

    /// Native stays in as the baseline; other candidates go when an attribute value they lack
    /// was that of the fastest of them in two consecutive rounds. Native's own attributes are
    /// not comparable (it is whatever the MPI library chooses), so it does not vote.
    fn prune_by_attributes(&mut self) {
        let Some((leader, _)) = self.fastest(|c| c.index != 0) else {
            return;
        };
        if !self.partners_fixed {
            if self.best_partners == Some(leader.partners) {
                self.partners_fixed = true;
                self.candidates
                    .retain(|c| c.index == 0 || c.partners == leader.partners);
            } else {
                self.best_partners = Some(leader.partners);
            }
        } else if self.best_collectives == Some(leader.collectives) {
            self.candidates
                .retain(|c| c.index == 0 || c.collectives == leader.collectives);
            self.best_collectives = None;
        } else {
            self.best_collectives = Some(leader.collectives);
        }
    }

    /// The fastest remaining candidate by agreed estimates, unless it does not beat native
    /// (its latest estimate, even if native left the race) by more than `min_gain` of native's
    /// time and by more than its own standard error: then native.
    pub fn winner(&self, min_gain: f64) -> usize {
        let (Some((best, best_estimate)), Some(native)) = (self.leader(), self.estimate(0)) else {
            return 0;
        };
        let margin = (min_gain * native.location).max(best_estimate.error);
        if best.index != 0 && native.location - best_estimate.location > margin {
            best.index
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(index: usize, partners: Partners, collectives: bool) -> Candidate {
        Candidate {
            index,
            partners,
            collectives,
        }
    }

    fn set() -> Vec<Candidate> {
        vec![
            candidate(0, Partners::Tree, true),
            candidate(1, Partners::All, false),
            candidate(2, Partners::Tree, true),
            candidate(3, Partners::Pair, false),
            candidate(4, Partners::Pair, false),
        ]
    }

    fn agreed(times: &[f64], candidates: &[Candidate]) -> Vec<Agreed> {
        candidates
            .iter()
            .map(|c| Agreed {
                location: times[c.index],
                error: times[c.index] * 0.01,
            })
            .collect()
    }

    /// Runs a policy until it decides; returns (winner, rounds).
    fn decide(policy: Search, times: &[f64], samples: u32) -> (usize, u32) {
        let mut plan = Plan::new(policy, set(), samples);
        loop {
            let round = agreed(times, &plan.candidates);
            if let Next::Decide(w) = plan.after_round(&round, false, 0.02) {
                return (w, plan.rounds);
            }
        }
    }

    #[test]
    fn brute_runs_every_round_and_picks_the_fastest() {
        let times = [100.0, 90.0, 120.0, 50.0, 70.0];
        assert_eq!(decide(Search::Brute, &times, 8), (3, 8));
    }

    #[test]
    fn a_collective_search_keeps_a_codelet_whose_first_sample_paid_for_the_switch() {
        // Native 95 us (the leader), then 277, 192, 228 and 154 us. A first sample at 2.4 times
        // the leader stays: on the rig a codelet's first instance after a switch took up to 2.9
        // times its steady time.
        let times = [95.0, 277.0, 192.0, 228.0, 154.0];
        let mut plan = Plan::collective(Search::Attributes, set(), 4);
        let round = agreed(&times, &plan.candidates);
        assert_eq!(plan.after_round(&round, false, 0.02), Next::Round);
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(left, [0, 2, 3, 4], "only linear is over 2.5 times native");
    }

    #[test]
    fn a_cut_drops_codelets_far_slower_than_the_leader_after_one_round() {
        // Native 2.2, then 3.6, 7.6, 3.1 and 1.7 ms: the first round of a halo search on the
        // 1 Gbit/s rig. Racing prunes nothing before its third round: what goes is the cut's.
        let times = [2.2, 3.6, 7.6, 3.1, 1.7];
        let mut plan = Plan::new(Search::Racing, set(), 2).cut_slower_than(2.0);
        let round = agreed(&times, &plan.candidates);
        assert_eq!(plan.after_round(&round, false, 0.02), Next::Round);
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(left, [0, 3, 4], "3.6 and 7.6 are over twice 1.7");
        let round = agreed(&times, &plan.candidates);
        assert_eq!(plan.after_round(&round, false, 0.02), Next::Decide(4));

        // All but the leader cut: decided after one round, against native's estimate.
        let times = [8.0, 7.5, 9.0, 1.0, 8.2];
        let mut plan = Plan::new(Search::Racing, set(), 2).cut_slower_than(2.0);
        let round = agreed(&times, &plan.candidates);
        assert_eq!(plan.after_round(&round, false, 0.02), Next::Decide(3));
        let mut brute = Plan::new(Search::Brute, set(), 2).cut_slower_than(2.0);
        let round = agreed(&times, &brute.candidates);
        assert_eq!(brute.after_round(&round, false, 0.02), Next::Round);
        assert_eq!(brute.candidates.len(), 5, "brute prunes nothing");
        let mut plan = Plan::new(Search::Racing, set(), 2).cut_slower_than(2.0);
        let round = agreed(&[1.0, 7.5, 9.0, 8.0, 8.2], &plan.candidates);
        assert_eq!(
            plan.after_round(&round, false, 0.02),
            Next::Decide(0),
            "native alone left"
        );
    }

    #[test]
    fn racing_stops_early_when_the_leader_is_clear() {
        let times = [100.0, 90.0, 120.0, 50.0, 70.0];
        let (winner, rounds) = decide(Search::Racing, &times, 8);
        assert_eq!(winner, 3);
        assert_eq!(
            rounds, 3,
            "everything else is clearly slower after three rounds"
        );
    }

    #[test]
    fn racing_keeps_overlapping_candidates() {
        let mut plan = Plan::new(Search::Racing, set(), 8);
        for _ in 0..3 {
            let round: Vec<Agreed> = plan
                .candidates
                .iter()
                .map(|c| Agreed {
                    location: [100.0, 51.0, 200.0, 50.0, 300.0][c.index],
                    error: 5.0,
                })
                .collect();
            assert_eq!(plan.after_round(&round, false, 0.02), Next::Round);
        }
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(left, [1, 3], "51 and 50 overlap within their errors");
    }

    #[test]
    fn attributes_prune_after_a_value_is_confirmed_twice() {
        let times = [100.0, 90.0, 120.0, 50.0, 70.0];
        let mut plan = Plan::new(Search::Attributes, set(), 8);
        plan.after_round(&agreed(&times, &plan.candidates), false, 0.02);
        assert_eq!(plan.candidates.len(), 5, "one round is not a confirmation");
        plan.after_round(&agreed(&times, &plan.candidates), false, 0.02);
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(
            left,
            [0, 3, 4],
            "pair confirmed: native stays as the baseline"
        );
        assert_eq!(decide(Search::Attributes, &times, 8).0, 3);
    }

    #[test]
    fn native_leading_does_not_prune_by_its_attributes() {
        // Native (tree, collectives) is fastest; the fastest other codelet (4: pair) votes.
        let times = [10.0, 90.0, 120.0, 70.0, 50.0];
        let mut plan = Plan::new(Search::Attributes, set(), 8);
        for _ in 0..2 {
            plan.after_round(&agreed(&times, &plan.candidates), false, 0.02);
        }
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(left, [0, 3, 4], "tree codelet 2 goes, pair codelets stay");
        assert_eq!(decide(Search::Attributes, &times, 8).0, 0);
    }

    #[test]
    fn native_stays_unless_clearly_beaten() {
        // 1 % faster is within the 2 % minimum gain.
        assert_eq!(
            decide(Search::Brute, &[100.0, 99.0, 120.0, 130.0, 140.0], 4).0,
            0
        );
        // Native fastest.
        assert_eq!(
            decide(Search::Racing, &[50.0, 99.0, 120.0, 130.0, 140.0], 8).0,
            0
        );
        // A large error hides the gain.
        let mut plan = Plan::new(Search::Brute, set()[..2].to_vec(), 1);
        let noisy = [
            Agreed {
                location: 100.0,
                error: 1.0,
            },
            Agreed {
                location: 90.0,
                error: 15.0,
            },
        ];
        assert_eq!(plan.after_round(&noisy, false, 0.02), Next::Decide(0));
    }

    #[test]
    fn a_candidate_that_left_the_race_cannot_win_on_an_old_estimate() {
        let mut plan = Plan::new(Search::Racing, set()[..3].to_vec(), 8);
        let round = |plan: &Plan, times: [f64; 3]| -> Vec<Agreed> {
            plan.candidates
                .iter()
                .map(|c| Agreed {
                    location: times[c.index],
                    error: if c.index == 0 { 30.0 } else { 1.0 },
                })
                .collect()
        };
        for _ in 0..3 {
            let r = round(&plan, [100.0, 50.0, 300.0]);
            plan.after_round(&r, false, 0.02);
        }
        let left: Vec<usize> = plan.candidates.iter().map(|c| c.index).collect();
        assert_eq!(left, [0, 1], "2 left the race, native's error keeps it in");
        // Later rounds are slower for everyone still in the race: 2's old 300 must not win.
        let r = round(&plan, [600.0, 400.0, 0.0]);
        assert_eq!(plan.after_round(&r, true, 0.02), Next::Decide(1));
    }

    #[test]
    fn stop_decides_with_the_best_so_far() {
        let mut plan = Plan::new(Search::Brute, set(), 8);
        let times = [100.0, 90.0, 120.0, 50.0, 70.0];
        assert_eq!(
            plan.after_round(&agreed(&times, &plan.candidates), true, 0.02),
            Next::Decide(3)
        );
        assert_eq!(plan.rounds, 1);
    }
}
