//! The self-check of a decision: the winner's realised production time against what its search
//! predicted. A search's samples can mislead (on a network, what a codelet leaves behind in the
//! queues lands on the next one; a codelet's rare long calls escape a few samples), so a decision
//! is checked once it has run alone for a while. After it, a collective's decision and a halo's
//! get drift checks (`Drift`), and a halo's lead checks too (`Lead`).

use commtune_report::SelfCheck;

use crate::settings::Timing;
use crate::stats::STALL;
use crate::timeline::Mark;
use crate::trial::{Around, Window, beaten};

/// A decision is wrong when the winner's realised time exceeds its prediction by more than this
/// share and also exceeds the runner-up's prediction (by more than the minimum gain): a winner
/// that is slower than predicted but still faster than every alternative stays.
pub const MARGIN: f64 = 0.25;

/// A decision whose runner-up's estimate is within this share of the winner's is a close race:
/// its runner-up runs a window of production calls after the winner's (`Prediction::assess_race`).
/// A search's samples are single instances after a switch, and a codelet can take several calls
/// to reach its steady pace after another ran: on the 10 Gbit/s rig, `ring`'s 1 MiB allreduce
/// took 2.3 ms in each of its first three calls after native's and 1.65 ms from the eighth on,
/// where native's took 2.1 (so searches estimated the two within 2 % and kept native, which then
/// realised 1.2 to 1.4 times forced `ring`'s time per call). A window of production calls
/// measures the pace the application will feel.
pub const CLOSE_RACE: f64 = 0.1;

/// Production calls are timed one in this many (for the report, and for the budget's
/// denominator, where each stands for as many calls), besides the windows before checks.
pub const SAMPLE_EVERY: u64 = 8;

/// Production calls timed whole before a drift check (never more than half of the interval): a
/// median of so many calls is steady on a noisy machine. The first window after a decision is
/// the self-check's.
pub const DRIFT_WINDOW: u64 = 16;

/// The calls of a window before a check, with COMMTUNE_DRIFT_INTERVAL `drift_interval`.
pub fn window(drift_interval: u64) -> u64 {
    DRIFT_WINDOW.min(drift_interval / 2)
}

/// The calls after a decision until its self-check: a whole window after the switch (never later
/// than the first drift check).
pub fn first_check(drift_interval: u64) -> u64 {
    drift_interval.min(DRIFT_WINDOW + 2)
}

/// Drift windows in a row beyond the threshold before a search reopens.
const DRIFT_STRIKES: u32 = 2;

/// Searches a key may reopen for drift at most: drift cannot make the tuner thrash.
const MAX_REOPEN: u32 = 3;

/// Doublings of the instances between drift checks of a steady key at most: at the default
/// COMMTUNE_DRIFT_INTERVAL a key steady for long is checked every 4096 instances.
const MAX_DOUBLINGS: u32 = 4;

/// The drift watch of a decision in production, after its self-check: each check compares the
/// winner's time per instance before it (a collective's window of timed calls, a halo's span of
/// episodes) with the first check's (the baseline), as a ratio. A ratio beyond the threshold is
/// a strike; `DRIFT_STRIKES` in a row reopen the search. A collective's check costs a window of
/// timed calls and a reduction, which a small call feels, so a key that stays steady is checked
/// ever more rarely; a strike brings the checks back to every COMMTUNE_DRIFT_INTERVAL instances.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub struct Drift {
    /// The first check's time per instance (0 when it measured nothing).
    pub baseline: Option<f64>,
    pub strikes: u32,
    /// Checks in a row that found the key steady (no strike).
    pub steady: u32,
}

impl Drift {
    /// A check's time per instance `measured` (None: nothing measured) over the baseline. The
    /// first check's time becomes the baseline, at a ratio of 1, and so does a later one while
    /// the baseline is 0.
    pub fn ratio(&mut self, measured: Option<f64>) -> f64 {
        match (measured, self.baseline) {
            (None, _) => {
                self.baseline.get_or_insert(0.0);
                1.0
            }
            (Some(measured), Some(baseline)) if baseline > 0.0 => measured / baseline,
            (Some(measured), _) => {
                self.baseline = Some(measured);
                1.0
            }
        }
    }

    /// Records a check whose window took `ratio` times the baseline, with COMMTUNE_DRIFT_THRESHOLD
    /// `threshold`. Returns whether the search reopens, for a key that reopened `reopened`
    /// searches for drift so far.
    pub fn record(&mut self, ratio: f64, threshold: f64, reopened: u32) -> bool {
        if ratio > 1.0 + threshold {
            self.strikes += 1;
            self.steady = 0;
        } else {
            self.strikes = 0;
            self.steady += 1;
        }
        self.strikes >= DRIFT_STRIKES && reopened < MAX_REOPEN
    }

    /// The instances to the next check, with COMMTUNE_DRIFT_INTERVAL `drift_interval`: the
    /// interval doubled for each steady check in a row, `MAX_DOUBLINGS` times at most.
    pub fn spacing(&self, drift_interval: u64) -> u64 {
        drift_interval.saturating_mul(1 << self.steady.min(MAX_DOUBLINGS))
    }
}

/// What a search predicted (agreed estimates, clock ticks per call).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Prediction {
    pub winner: f64,
    /// The codelet (registry index) a trial tries first, and its estimate: the best other, or
    /// where the winner's window had a tail the best that paces (`Prediction::facing`).
    pub runner_up: Option<(usize, f64)>,
    /// The codelet tried after the runner-up in a close race (`Prediction::after_trial`), and
    /// its estimate: the next best, or the best other where `facing` tried one that paces.
    pub third: Option<(usize, f64)>,
    /// The best other codelet that exchanges with one partner at a time, and its estimate: the
    /// one tried where the winner's window has a tail (`Prediction::facing`).
    pub paced: Option<(usize, f64)>,
    /// How the search timed its samples: production is timed the same way.
    pub timing: Timing,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// The decision stands.
    Kept,
    /// Wrong: search again, with `timing`.
    Reopen(Timing),
    /// Wrong a second time: the runner-up (registry index), which production measured clearly
    /// faster than the winner in its trial, from now on.
    RunnerUp(usize),
}

/// Microseconds per call the safety net allows beyond COMMTUNE_PMAX of the predicted time. At
/// sub-microsecond calls a relative tolerance is a few nanoseconds: on shared memory an 8-byte
/// allreduce realised 0.15 to 0.17 us in one run and 0.2 in the next, and every prediction at
/// that size was dismissed and searched again.
pub const PREDICTION_FLOOR_US: f64 = 0.1;

/// Whether a prediction of `predicted_us` per call holds when production measured `measured_us`
/// (the safety net): within `pmax` of it, or within `PREDICTION_FLOOR_US`.
pub fn prediction_holds(predicted_us: f64, measured_us: f64, pmax: f64) -> bool {
    measured_us <= predicted_us * (1.0 + pmax) + PREDICTION_FLOOR_US
}

/// What the self-check makes of a decision (`Prediction::assess`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Judgement {
    /// The winner missed: the runner-up (registry index) runs a window of production calls,
    /// then `Prediction::judge_trial` decides.
    Trial(usize),
    Verdict(Verdict),
}

/// What follows a collective's trial (`Prediction::after_trial`).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum AfterTrial {
    /// This codelet (registry index), the runner-up of this prediction, runs a window next,
    /// against the winner's latest window (`Around::latest`).
    Trial(usize, Prediction),
    Verdict(Verdict),
}

/// The reason a key (collective or halo) runs the runner-up that beat its winner in a trial.
pub const RUNNER_UP_KEPT: &str =
    "the self-check's trial: the runner-up, clearly faster in production, kept";

/// The reason a collective runs another of its search's three best codelets after its lead
/// checks (`LEAD_STRIKES` drift windows in a row of the winner clearly slower than that one).
pub const LEAD_FOLLOWED: &str =
    "the lead checks: the winner's production windows clearly slower than another's time";

/// Drift checks in a row whose window finds another codelet clearly ahead of a collective's
/// winner (`Lead::follow`) before production hands over to it. Unlike a halo rank, which
/// switches alone and at once, a collective switches every rank, and a lost time slice can
/// make one window of 16 calls look slow; a winner's own stalls (the 64 KiB alltoall's `linear`
/// on the 1 Gbit/s rig, about one call in ten) fall into most windows.
pub const LEAD_STRIKES: u32 = 2;

/// What a wrong decision leads to (`Verdict::wrong`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Next {
    /// Search again with this timing.
    Search(Timing),
    /// Run this codelet (registry index) from now on, unsearched and without a self-check of its
    /// own (drift checks go on).
    Settle(usize),
}

impl Verdict {
    /// For a decision found wrong at `call` with `realised` against `predicted` per call: the
    /// timeline's mark, and what comes next. None when the decision stands.
    pub fn wrong(self, call: u64, realised: f64, predicted: f64) -> Option<(Mark, Next)> {
        let next = match self {
            Verdict::Kept => return None,
            Verdict::Reopen(timing) => Next::Search(timing),
            Verdict::RunnerUp(codelet) => Next::Settle(codelet),
        };
        let mark = Mark::Drift {
            call,
            ratio: realised / predicted,
            reopened: matches!(next, Next::Search(_)),
        };
        Some((mark, next))
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Kept => "kept",
            Verdict::Reopen(_) => "reopened",
            Verdict::RunnerUp(_) => "runner_up",
        }
    }
}

/// A search timed by `period` measures the application's work between calls with the calls:
/// where the calls take less than this share of it on some rank (the least over ranks,
/// `consensus::window`), a codelet's difference is a small part of each sample, within that
/// work's own variation. In LAMMPS on the 1 Gbit/s rig (`bench/in.lj`, 4 hosts), the 4-byte
/// allreduce of `Neighbor::check_distance` took about 2 % of its 7.4 ms period; reopened with
/// `period` after its winner and runner-up both missed their estimates in production, the
/// search's samples of native, linear and ring came out within 1 % of each other, two others
/// took 15 and 25 ms from one sample each, and its trials took two more windows: the tuned runs
/// took 1.027 of native's time (10 alternating runs), where forcing the allreduce to native
/// took 1.012. With this rule no run searched twice (10 of 10), but 8 alternating runs of
/// native, the build before and this one came to 1.014 and 1.022 of native (the median of the
/// paired ratios of this build over the one before: 1.001, single runs 0.98 to 1.03): what the
/// second search cost is within the machine's noise there. The share is a mean over the
/// window: a key called in bursts, several calls back to back between long stretches of work,
/// has a small one, although most of its periods would be from call to call.
pub const PERIOD_RESOLVES: f64 = 0.25;

/// The calls' share of a window of production calls on one rank (`Span::call_share`).
pub fn call_share(start: Option<u64>, durations: &[u64], now: u64) -> f64 {
    Span::of(start, durations).call_share(now)
}

/// One rank's median call over a window of production calls (clock ticks; None for none): what
/// a drift check compares, and what tells a change of pace from a rare long call
/// (`trial::Around::winner_time`).
pub fn median_call(durations: &[u64]) -> Option<f64> {
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).map(|&d| d as f64)
}

/// One rank's realised time per call over a window of production calls, measured as a search
/// with `timing` measured its samples: `period`, from the window's first call (`start`) to the
/// call after it (`now`), per call; otherwise the mean of the calls' `durations`.
///
/// A mean, as the application feels it: on the 1 Gbit/s rig native's 64 KiB alltoall has a
/// median of 1.4 ms and a tail of its own (one call in six beyond 4 times the median, up to 20
/// ms: the shaper drops what a burst of sends overflows, and TCP retransmits), which paced
/// codelets do not have; its mean is twice its median, and a median never saw it. A window's
/// mean also takes in a preemption by another job, which a median left out; that costs a trial
/// at most, as the runner-up must then do clearly better in a window of its own. Replayed
/// (`commtune simulate`, the traces of tests/data), the mean instead of the median took the
/// rig's 64 KiB alltoall from 1.54 to 1.19 times the best codelet at 400 calls (1.58 to 1.08 at
/// 2000) and changed no other key by more than 0.04. Leaving out each window's longest call (one
/// lost time slice had made the safety net dismiss a correct prediction in 2 of 11 second runs
/// of an 8-byte alltoall) hid that tail: most windows hold one or two of its calls, and the
/// bench-cluster's 64 KiB alltoall at 1 Gbit/s kept native in 5 of 7 runs, 1.54 times the
/// best codelet, against 1 of 7 and 1.04 with the whole mean (the same day, 7 repetitions).
pub fn realised(timing: Timing, start: Option<u64>, durations: &[u64], now: u64) -> f64 {
    Span::of(start, durations).realised(timing, now)
}

/// Production instances measured together, however many: where the first started (period: the
/// completion before it), their durations summed, and how many they are.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Span {
    pub start: Option<u64>,
    pub ticks: u64,
    pub instances: u64,
}

impl Span {
    /// The instances of `durations`, the first started at `start`.
    fn of(start: Option<u64>, durations: &[u64]) -> Span {
        Span {
            start,
            ticks: durations.iter().sum(),
            instances: durations.len() as u64,
        }
    }

    /// The instances' share of the span's time, ending at `now` (`realised` with local timing
    /// over `realised` with period timing); 1 for a span not started (nothing measured: no
    /// reason to hold a search back).
    pub fn call_share(&self, now: u64) -> f64 {
        match self.start {
            Some(start) if now > start => (self.ticks as f64 / (now - start) as f64).min(1.0),
            _ => 1.0,
        }
    }

    /// Adds an instance that started at `start` and took `ticks`.
    pub fn add(&mut self, start: u64, ticks: u64) {
        self.start.get_or_insert(start);
        self.ticks += ticks;
        self.instances += 1;
    }

    /// The realised time per instance (`realised`), the span ending at `now`.
    pub fn realised(&self, timing: Timing, now: u64) -> f64 {
        match (timing, self.start) {
            _ if self.instances == 0 => 0.0,
            (Timing::Period, Some(start)) => {
                now.saturating_sub(start) as f64 / self.instances as f64
            }
            _ => self.ticks as f64 / self.instances as f64,
        }
    }
}

impl Prediction {
    /// The prediction the self-check judges the winner's first production `window` by. Where
    /// that window has a tail (`Window::tailed`), the winner missed its estimate by it, and the
    /// best codelet that exchanges with one partner per step (`paced`) is estimated clearly
    /// under what the winner realised, that codelet is put on trial instead of the runner-up,
    /// which becomes the third.
    ///
    /// A codelet that posts to every partner at once overflows a shaped NIC's queue in bursts,
    /// and TCP's retransmissions make the tail; a barrier before each search sample drains the
    /// queue, so the search never sees it, for any codelet. Its runner-up then is often another
    /// bursting codelet with a tail of its own, whose trial keeps the winner: on the 1 Gbit/s rig,
    /// 6 verbose runs of the 64 KiB alltoall decided native (1.1 to 1.2 ms estimated, 2.1 to 4.2
    /// realised) and tried `linear` or `linear_sync8`; the decision stood in 4, where `pairwise`
    /// and `pairwise_excl`, which pace, take 1.67 ms per call alone against native's 2.8.
    pub fn facing(&self, window: &Window, min_gain: f64) -> Prediction {
        match self.paced {
            Some((codelet, estimate))
                if window.tailed(self.timing)
                    && self.missed(window.realised)
                    && window.realised > estimate * (1.0 + min_gain)
                    && self
                        .runner_up
                        .is_some_and(|(runner_up, _)| runner_up != codelet) =>
            {
                Prediction {
                    runner_up: Some((codelet, estimate)),
                    third: self.runner_up,
                    ..*self
                }
            }
            _ => *self,
        }
    }

    /// The self-check of a decision whose winner realised `realised` (agreed like the
    /// estimates): a winner that missed the prediction clearly (by more than `MARGIN`, and
    /// beyond the runner-up's estimate too) puts the runner-up on trial; otherwise the decision
    /// stands, as it does without a runner-up to compare with.
    pub fn assess(&self, realised: f64, min_gain: f64) -> Judgement {
        match self.runner_up {
            Some((runner_up, estimate))
                if self.missed(realised) && realised > estimate * (1.0 + min_gain) =>
            {
                Judgement::Trial(runner_up)
            }
            _ => Judgement::Verdict(Verdict::Kept),
        }
    }

    /// The self-check of a collective's decision: `assess`, and a close race (the runner-up's
    /// estimate within `CLOSE_RACE` of the winner's) puts the runner-up on trial too, missed or
    /// not. A halo's decision needs no such trial: its lead checks run whichever codelet the
    /// windows so far rank first.
    pub fn assess_race(&self, realised: f64, min_gain: f64) -> Judgement {
        match self.runner_up {
            Some((runner_up, estimate)) if estimate <= self.winner * (1.0 + CLOSE_RACE) => {
                Judgement::Trial(runner_up)
            }
            _ => self.assess(realised, min_gain),
        }
    }

    /// After the runner-up's trial kept the decision: the prediction whose runner-up is the
    /// third codelet, when that one is in the race too (within `CLOSE_RACE` of the winner's
    /// estimate), to be tried next against the winner's latest window. The order of a close
    /// race's estimates is the search's least reliable part: on the 10 Gbit/s rig, searches of
    /// the 1 MiB allreduce ranked `ring`, the fastest alone by 15 %, behind native and
    /// `rabenseifner` in 2 runs of 5.
    fn next_in_race(&self) -> Option<(usize, Prediction)> {
        let third = self
            .third
            .filter(|&(_, e)| e <= self.winner * (1.0 + CLOSE_RACE))?;
        let next = Prediction {
            runner_up: Some(third),
            third: None,
            ..*self
        };
        Some((third.0, next))
    }

    /// What follows a collective's trial (`judge_trial`'s arguments): the verdict, or, where
    /// the trial kept the decision and the race's third is in it too, the third's trial.
    ///
    /// `around` is the trial's windows: the winner's time is its time around the trial
    /// (`Around::winner_time`): the mean of its windows before and after a trial that beat the one
    /// before, or the window after alone where the winner's pace fell between them. The traces of
    /// tests/data hold no trend, and there the second window only adds noise: replayed (library
    /// defaults, 40 replays), the median over keys went from 1.089 to 1.093 times the best codelet
    /// at 400 calls and from 1.021 to 1.023 at 2000, the rig's 64 KiB alltoall from 1.120 to 1.151
    /// and from 1.030 to 1.048 (native's tail, which its search's robust estimates left out, shows
    /// in fewer windows than not), shared memory's 16-byte alltoall from 1.751 to 1.834 at 400
    /// calls. On the rig, where loops do speed up, 15 alternating runs of 400-call 8-byte loops
    /// each: the alltoall kept native in 10 runs against 4 (a trial replaced the winner in 2
    /// against 7), the allreduce ran `linear`, its best codelet, in 15 against 14; their times,
    /// paired with the build before, 0.992 and 0.998 (6 December 2026).
    ///
    /// A search with `period` timing is not reopened where the calls are less than
    /// `PERIOD_RESOLVES` of the trial window's time (its `call_share`): the runner-up that beat
    /// the winner in production is kept instead. Nor where the winner's window before the trial
    /// had a tail (`Window::tailed`) and the codelet on trial paces (`paced`): the tail, which no
    /// search sample saw, explains the winner's miss, and the paced codelet, which beat it in
    /// production, missed its own estimate as every codelet misses a barrier-timed one on a
    /// network (on the 1 Gbit/s rig, `pairwise`'s 64 KiB alltoall: 0.9 to 1.3 ms estimated,
    /// 1.65 realised). Searched again with `period` timing, whose robust estimates leave tails
    /// out too, that key went back to native in most runs. A codelet on trial that bursts is
    /// not kept so: it has tails of its own (LD_PRELOAD.md, keeping any runner-up that beat the
    /// winner, measured and not kept).
    pub fn after_trial(&self, around: &Around<Window>, min_gain: f64, wrong: u32) -> AfterTrial {
        let winner = around.winner_time(self.timing).realised;
        let tried = around.tried.realised;
        let verdict = self.judge_trial(winner, tried, min_gain, wrong);
        match (verdict, self.runner_up) {
            (Verdict::Kept, _) => match self.next_in_race() {
                Some((codelet, next)) => AfterTrial::Trial(codelet, next),
                None => AfterTrial::Verdict(Verdict::Kept),
            },
            (Verdict::Reopen(Timing::Period), Some((runner_up, _)))
                if around.tried.call_share < PERIOD_RESOLVES =>
            {
                AfterTrial::Verdict(Verdict::RunnerUp(runner_up))
            }
            (Verdict::Reopen(_), Some((runner_up, _)))
                if around.before.tailed(self.timing)
                    && self.paced.is_some_and(|(paced, _)| paced == runner_up) =>
            {
                AfterTrial::Verdict(Verdict::RunnerUp(runner_up))
            }
            (verdict, _) => AfterTrial::Verdict(verdict),
        }
    }

    /// Whether the winner's `realised` time missed its prediction clearly (by more than
    /// `MARGIN`).
    fn missed(&self, realised: f64) -> bool {
        beyond_margin(realised, self.winner)
    }

    /// Judges a decision after its runner-up ran in production for a window and realised
    /// `runner_up_realised` against the winner's `realised` (a collective's: its time around the
    /// trial, `Around::winner_time`, so a winner that missed in the window before the trial may not
    /// have missed around it, and a trial that beats it then replaces it instead of searching
    /// again). After a close race the runner-up replaces the winner when it does clearly better.
    /// After a miss (`assess`), a miss can be the search's, not the decision's: samples after a
    /// barrier are faster than production calls for every codelet alike (on the 1 Gbit/s rig,
    /// alltoall's linear_sync codelets realise 1.2 to 1.3 times their samples), so the winner is
    /// wrong only when the runner-up does clearly better in production. Then, if the runner-up held
    /// its own estimate (within `MARGIN`), the winner alone was misjudged (its tail, say: on the
    /// rig, native's 64 KiB alltoall wins searches whose robust estimates leave its tail out, and
    /// loses its trials to a paced codelet 1.8 times faster in total), and the runner-up, measured
    /// as the application feels it, replaces it. If the runner-up missed its estimate too, the
    /// samples misled about every codelet: the search runs again with the other timing, once; a
    /// second wrong decision keeps the runner-up. Replayed over the traces of tests/data, keeping
    /// the runner-up beat searching again at every key (rig 64 KiB alltoall at 400 calls: 1.19
    /// against 1.30 times the best codelet).
    pub fn judge_trial(
        &self,
        realised: f64,
        runner_up_realised: f64,
        min_gain: f64,
        wrong: u32,
    ) -> Verdict {
        match self.runner_up {
            None => Verdict::Kept,
            Some(_) if !beaten(realised, runner_up_realised, min_gain) => Verdict::Kept,
            Some((runner_up, estimate))
                if wrong > 0
                    || !self.missed(realised)
                    || runner_up_realised <= estimate * (1.0 + MARGIN) =>
            {
                Verdict::RunnerUp(runner_up)
            }
            Some(_) => Verdict::Reopen(match self.timing {
                Timing::Local | Timing::Barrier => Timing::Period,
                Timing::Period => Timing::Local,
            }),
        }
    }
}

impl Prediction {
    /// The report's view of a self-check that found `realised` ticks per call (the runner-up
    /// `runner_up_realised` in its trial, if it had one) and gave `verdict` (`names`: the
    /// operation's codelets).
    pub fn report(
        &self,
        realised: f64,
        runner_up_realised: Option<f64>,
        verdict: Verdict,
        names: &[&str],
        ns_per_tick: f64,
    ) -> SelfCheck {
        let us = |ticks: f64| ticks * ns_per_tick * 1e-3;
        SelfCheck {
            predicted_us: us(self.winner),
            realised_us: us(realised),
            runner_up: self.runner_up.map(|(i, _)| names[i].to_string()),
            runner_up_us: self.runner_up.map(|(_, r)| us(r)),
            runner_up_realised_us: runner_up_realised.map(us),
            least_rank_us: None,
            timing: self.timing.name().to_string(),
            verdict: verdict.name().to_string(),
        }
    }
}

/// Whether a self-check's winner missed its prediction (by more than `MARGIN`, as
/// `Prediction::missed`): its production calls then do not run as the search's samples did.
pub fn missed(check: &SelfCheck) -> bool {
    beyond_margin(check.realised_us, check.predicted_us)
}

/// Whether `realised` exceeds `predicted` by more than `MARGIN` (any one unit).
fn beyond_margin(realised: f64, predicted: f64) -> bool {
    realised > predicted * (1.0 + MARGIN)
}

/// Where a halo decision's lead checks run: a window of this many times the self-check's
/// instances (32 at the default COMMTUNE_DRIFT_INTERVAL). On the 1 Gbit/s rig the codelets that
/// post every message at once stall for about 20 ms in 8 to 12 % of 64 KiB episodes (their
/// median episode, 1.9 ms, is below `pairwise`'s 2.1): a window of 32 shows one with
/// probability 0.95, the self-check's 16 with 0.75, a search's two blocks of 7 with 0.73.
pub const LEAD_WINDOWS: u64 = 2;

/// The window of a halo decision's lead check: each instance's time, timed as the decision was
/// (`period`: since the class's previous completion). An instance beyond `STALL` times the
/// window's median stalled for the machine (a rank preempted by another job) and is left out, as
/// a search leaves it out: one lost time slice in a window of short episodes (1 ms among 64
/// self-exchanges of 0.35 us, on one rank alone) made the best codelet's window look ten times
/// slower than its search's runner-up, and the rank followed slower codelets from then on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeadWindow {
    times: Vec<u64>,
}

impl LeadWindow {
    pub fn add(&mut self, ticks: u64) {
        self.times.push(ticks);
    }

    pub fn instances(&self) -> u64 {
        self.times.len() as u64
    }

    pub fn clear(&mut self) {
        self.times.clear();
    }

    /// The mean time per instance, the stalled ones left out (0 for an empty window).
    pub fn realised(&self) -> f64 {
        let mut sorted = self.times.clone();
        sorted.sort_unstable();
        let Some(&median) = sorted.get(sorted.len() / 2) else {
            return 0.0;
        };
        let kept: Vec<u64> = sorted
            .into_iter()
            .filter(|&t| t as f64 <= STALL * median as f64)
            .collect();
        kept.iter().sum::<u64>() as f64 / kept.len() as f64
    }
}

/// The lead checks of a rank's halo decision: what this rank last measured of each codelet that
/// stayed in its search, per instance, timed alike (the search's estimate until production ran
/// it for a window, then that window's time). After each window of the codelet running, the
/// codelet with the least time runs the next. Halo codelets only reorder or repackage the same
/// messages, so a rank may switch at any instance with no one's agreement, and following the
/// leader is how it learns what a search's few blocks missed: a codelet whose rare stalls all
/// fell outside its samples leads until a window shows them, and then the next in line runs.
/// Replayed over per-episode times of each codelet forced alone on the rig (64 KiB faces, 2000
/// exchanges, LD_PRELOAD.md), runs that follow the leader every 32 episodes after the self-check
/// took 1.07 times `pairwise`'s time, the best, on average (1.10 at the 90th percentile); with
/// the self-check alone, 1.29 (1.75) (`bench/halo-lead.py --block 8`, each codelet's own tails,
/// as searches had them then).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lead {
    /// Each codelet's latest time per instance, and whether production measured it (else it is
    /// the search's estimate).
    latest: Vec<(usize, f64, bool)>,
}

impl Lead {
    /// The lead of a search's `estimates` (registry index, time per instance).
    pub fn new(estimates: impl IntoIterator<Item = (usize, f64)>) -> Lead {
        Lead {
            latest: estimates.into_iter().map(|(c, t)| (c, t, false)).collect(),
        }
    }

    /// The latest time per instance of `codelet`, if it is in the lead, and whether production
    /// measured it (else it is the search's estimate, shifted).
    pub fn latest(&self, codelet: usize) -> Option<(f64, bool)> {
        self.latest
            .iter()
            .find(|(c, ..)| *c == codelet)
            .map(|&(_, t, measured)| (t, measured))
    }

    /// Whether the lead holds no codelet but one: then no other can lead.
    pub fn is_alone(&self) -> bool {
        self.latest.len() < 2
    }

    /// `codelet` realised `realised` per instance over a window of production.
    pub fn measured(&mut self, codelet: usize, realised: f64) {
        match self.latest.iter_mut().find(|(c, ..)| *c == codelet) {
            Some(entry) => *entry = (codelet, realised, true),
            None => self.latest.push((codelet, realised, true)),
        }
    }

    /// Adds `shift` to every estimate production has not measured: what a winner's production
    /// instances took beyond its search estimate, which the others' would take too (waits for
    /// the application's late ranks that a search's barriers leave out: LAMMPS's
    /// neighbour-check allreduce on the 1 Gbit/s rig realised 242 µs per call against 60 in the
    /// search, and its runner-up 241 in a trial). Unshifted, every window of such a winner
    /// would find the others ahead.
    pub fn shift_estimates(&mut self, shift: f64) {
        for (_, time, measured) in &mut self.latest {
            if !*measured {
                *time += shift.max(0.0);
            }
        }
    }

    /// The `running` codelet realised `realised` over its latest window: the codelet that leads
    /// now, if another does clearly, by more than `MARGIN` (the first in the search's order on a
    /// tie). Not by less: on a network a rank's window also measures what its peers run, and
    /// those switch alone too. On the rig, with a minimum gain of 2 %, a rank running `pairwise`
    /// (windows of 32 at 1.97 to 2.63 ms alone) switched up to 11 times in 2000 exchanges to
    /// codelets whose search blocks had missed their stalls, each switch costing a window of
    /// stalls; what the lead checks are for, a codelet whose window shows its stalls, misses
    /// by 50 % or more.
    pub fn follow(&mut self, running: usize, realised: f64) -> Option<usize> {
        self.measured(running, realised);
        self.latest
            .iter()
            .filter(|&&(c, latest, _)| c != running && latest * (1.0 + MARGIN) < realised)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|&(c, ..)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lead_window(times: &[u64]) -> LeadWindow {
        let mut window = LeadWindow::default();
        times.iter().for_each(|&t| window.add(t));
        window
    }

    #[test]
    fn a_lead_window_is_its_mean_per_instance() {
        let window = lead_window(&[10, 30, 20, 40]);
        assert_eq!(window.instances(), 4);
        assert_eq!(window.realised(), 25.0);
        assert_eq!(LeadWindow::default().realised(), 0.0);
    }

    #[test]
    fn a_preempted_instance_leaves_a_lead_window() {
        // A lost time slice of 1000 among instances of about 1: beyond STALL times the median.
        let mut times = vec![1; 63];
        times.push(1000);
        assert_eq!(lead_window(&times).realised(), 1.0);
        // A network's stall (20 times the median) is the codelet's and stays.
        times[63] = 20;
        assert!((lead_window(&times).realised() - 83.0 / 64.0).abs() < 1e-12);
    }

    /// A trial's windows where the codelet on trial realised `tried` per call, with the calls
    /// `call_share` of its window, against the winner's `winner` in the window before it.
    fn trial(winner: f64, tried: f64, call_share: f64) -> Around<Window> {
        let window = |realised| Window {
            realised,
            least: realised,
            call_share,
            median: realised,
        };
        Around {
            codelet: 0,
            before: window(winner),
            tried: window(tried),
            after: None,
        }
    }

    #[test]
    fn the_lead_follows_the_least_latest_time() {
        // A search: 0 (native) 30, 1 at 20 (its blocks missed its stalls), 2 at 25.
        let mut lead = Lead::new([(0, 30.0), (1, 20.0), (2, 25.0)]);
        assert_eq!(lead.follow(1, 24.0), None, "within the margin");
        assert_eq!(lead.follow(1, 34.0), Some(2), "a window showed 1's stalls");
        assert_eq!(lead.follow(2, 26.0), None, "2 leads now, 1 stays at 34");
        assert_eq!(lead.follow(2, 40.0), Some(0), "then native does");
        lead.measured(1, 10.0);
        assert_eq!(lead.follow(0, 30.0), Some(1), "a trial's time counts too");
        assert_eq!(Lead::new([(3, 5.0)]).follow(3, 50.0), None, "nothing else");
        assert_eq!(lead.latest(0), Some((30.0, true)));
        assert_eq!(lead.latest(4), None);
        assert!(!lead.is_alone());
        assert!(Lead::new([(3, 5.0)]).is_alone());
    }

    #[test]
    fn a_shift_moves_the_estimates_production_has_not_measured() {
        // Winner 0 predicted 60, realised 240 in production; 2 was measured in a trial at 241.
        let mut lead = Lead::new([(0, 60.0), (1, 55.0), (2, 58.0)]);
        lead.measured(0, 240.0);
        lead.measured(2, 241.0);
        lead.shift_estimates(180.0);
        assert_eq!(
            [0, 1, 2].map(|c| lead.latest(c).unwrap()),
            [(240.0, true), (235.0, false), (241.0, true)]
        );
        assert_eq!(lead.follow(0, 250.0), None, "no one clearly ahead");
        lead.shift_estimates(-50.0);
        assert_eq!(lead.latest(1), Some((235.0, false)), "never moved down");
    }

    #[test]
    fn a_span_is_timed_as_its_window_would_be() {
        let mut span = Span::default();
        assert_eq!(span.realised(Timing::Period, 100), 0.0, "empty");
        for (start, ticks) in [(100, 10), (130, 10), (160, 40)] {
            span.add(start, ticks);
        }
        // Period: from the first start to the end, per instance; local: the mean duration.
        assert_eq!(span.realised(Timing::Period, 220), 40.0);
        assert_eq!(span.realised(Timing::Local, 220), 20.0);
        assert_eq!(
            realised(Timing::Period, Some(100), &[10, 10, 40], 220),
            span.realised(Timing::Period, 220)
        );
    }

    #[test]
    fn a_steady_key_is_checked_ever_more_rarely_up_to_a_bound() {
        let spaced = |drift_interval: u64, steady: u32| {
            let drift = Drift {
                steady,
                ..Drift::default()
            };
            drift.spacing(drift_interval)
        };
        let spaced_256: Vec<u64> = (0..7).map(|steady| spaced(256, steady)).collect();
        assert_eq!(spaced_256, [256, 512, 1024, 2048, 4096, 4096, 4096]);
        assert_eq!(spaced(1_000_000_000, 40), 16_000_000_000);
    }

    #[test]
    fn the_first_measured_check_is_the_baseline() {
        let mut drift = Drift::default();
        assert_eq!(drift.ratio(None), 1.0, "nothing measured");
        assert_eq!(drift.baseline, Some(0.0));
        assert_eq!(drift.ratio(Some(40.0)), 1.0, "a baseline of 0 is replaced");
        assert_eq!(drift.ratio(Some(60.0)), 1.5);
        assert_eq!(drift.ratio(None), 1.0);
        assert_eq!(drift.baseline, Some(40.0));
    }

    #[test]
    fn drift_reopens_after_strikes_in_a_row_and_spaces_out_steady_checks() {
        let mut drift = Drift::default();
        assert_eq!(drift.spacing(256), 256);
        assert!(!drift.record(1.2, 0.5, 0), "within the threshold");
        assert!(!drift.record(1.3, 0.5, 0));
        assert_eq!(drift.spacing(256), 1024, "two steady checks double twice");
        assert!(!drift.record(1.6, 0.5, 0), "one strike");
        assert_eq!(drift.spacing(256), 256, "a strike brings the checks back");
        assert!(
            !drift.record(1.0, 0.5, 0),
            "a steady window ends the strikes"
        );
        assert!(!drift.record(2.0, 0.5, 0));
        assert!(drift.record(2.0, 0.5, 0), "two strikes in a row reopen");
        assert!(
            !drift.record(2.0, 0.5, MAX_REOPEN),
            "but not after MAX_REOPEN searches"
        );
    }

    fn predicted(winner: f64, runner_up: f64) -> Prediction {
        Prediction {
            winner,
            runner_up: Some((0, runner_up)),
            third: None,
            paced: None,
            timing: Timing::Local,
        }
    }

    #[test]
    fn a_winner_slower_than_predicted_but_still_best_stays() {
        let kept = Judgement::Verdict(Verdict::Kept);
        // 15 ms realised against 10 predicted: a miss, but the runner-up was 18.
        assert_eq!(predicted(10.0, 18.0).assess(15.0, 0.02), kept);
        // Within the margin.
        assert_eq!(predicted(10.0, 11.0).assess(12.4, 0.02), kept);
    }

    #[test]
    fn a_runner_up_that_holds_its_estimate_replaces_the_winner() {
        // The 1 Gbit/s case: ring predicted 18.5, native 15.4, native realised 23, ring 17.
        let native = Prediction {
            winner: 15.4,
            runner_up: Some((4, 18.5)),
            third: None,
            paced: None,
            timing: Timing::Local,
        };
        assert_eq!(native.assess(23.0, 0.02), Judgement::Trial(4));
        assert_eq!(
            native.judge_trial(23.0, 17.0, 0.02, 0),
            Verdict::RunnerUp(4)
        );
    }

    #[test]
    fn a_close_race_tries_its_runner_up_then_its_third_even_when_the_winner_held() {
        // The 10 Gbit/s rig's 1 MiB allreduce: native 2.25 ms predicted and realised,
        // rabenseifner estimated 2.26 and ring 2.40 after switches; in production windows
        // rabenseifner realised 2.3 and ring 1.8.
        let native = Prediction {
            winner: 2.25,
            runner_up: Some((5, 2.26)),
            third: Some((4, 2.40)),
            paced: None,
            timing: Timing::Barrier,
        };
        assert_eq!(native.assess_race(2.25, 0.02), Judgement::Trial(5));
        assert_eq!(
            native.assess(2.25, 0.02),
            Judgement::Verdict(Verdict::Kept),
            "a halo's self-check tries only after a miss"
        );
        let AfterTrial::Trial(4, ring) = native.after_trial(&trial(2.25, 2.3, 1.0), 0.02, 0) else {
            panic!("the runner-up's trial kept the decision: ring, the third, is tried next");
        };
        assert_eq!(ring.runner_up, Some((4, 2.40)));
        assert_eq!(
            ring.after_trial(&trial(2.25, 2.3, 1.0), 0.02, 0),
            AfterTrial::Verdict(Verdict::Kept),
            "three at most"
        );
        assert_eq!(
            ring.after_trial(&trial(2.25, 1.8, 1.0), 0.02, 0),
            AfterTrial::Verdict(Verdict::RunnerUp(4))
        );
        assert_eq!(ring.judge_trial(2.25, 1.8, 0.02, 0), Verdict::RunnerUp(4));
        assert_eq!(
            ring.judge_trial(2.25, 2.22, 0.02, 0),
            Verdict::Kept,
            "within the gain"
        );
        assert_eq!(
            ring.judge_trial(2.25, 1.0, 0.02, 0),
            Verdict::RunnerUp(4),
            "the winner held its estimate: no search again, however far the trial's"
        );
        let clear = Prediction {
            runner_up: Some((5, 2.6)),
            third: Some((4, 2.7)),
            ..native
        };
        assert_eq!(
            clear.assess_race(2.25, 0.02),
            Judgement::Verdict(Verdict::Kept),
            "not a close race"
        );
        assert_eq!(
            clear.assess_race(3.0, 0.02),
            Judgement::Trial(5),
            "a miss still tries the runner-up"
        );
        assert_eq!(
            clear.after_trial(&trial(3.0, 3.1, 1.0), 0.02, 0),
            AfterTrial::Verdict(Verdict::Kept),
            "but not the third"
        );
    }

    #[test]
    fn a_runner_up_that_missed_too_but_did_better_reopens_with_the_other_timing() {
        // Both slower than their samples by more than the margin; the runner-up still clearly
        // better: the samples misled about both, so search again, timed otherwise.
        let p = predicted(10.0, 11.0);
        assert_eq!(
            p.judge_trial(20.0, 15.0, 0.02, 0),
            Verdict::Reopen(Timing::Period)
        );
        let period = Prediction {
            timing: Timing::Period,
            ..p
        };
        assert_eq!(
            period.judge_trial(20.0, 15.0, 0.02, 0),
            Verdict::Reopen(Timing::Local)
        );
        assert_eq!(
            p.judge_trial(20.0, 15.0, 0.02, 1),
            Verdict::RunnerUp(0),
            "a second wrong decision searches no more"
        );
    }

    #[test]
    fn calls_a_small_share_of_their_period_keep_the_runner_up_instead_of_a_period_search() {
        let p = predicted(10.0, 11.0);
        let reopen = AfterTrial::Verdict(Verdict::Reopen(Timing::Period));
        assert_eq!(p.after_trial(&trial(20.0, 15.0, 0.9), 0.02, 0), reopen);
        assert_eq!(
            p.after_trial(&trial(20.0, 15.0, 0.02), 0.02, 0),
            AfterTrial::Verdict(Verdict::RunnerUp(0))
        );
        let period = Prediction {
            timing: Timing::Period,
            ..p
        };
        assert_eq!(
            period.after_trial(&trial(20.0, 15.0, 0.02), 0.02, 0),
            AfterTrial::Verdict(Verdict::Reopen(Timing::Local)),
            "a local search measures the calls alone"
        );
        assert_eq!(call_share(Some(100), &[10, 20], 400), 0.1);
        assert_eq!(call_share(None, &[10], 400), 1.0);
    }

    #[test]
    fn a_miss_the_runner_up_shares_in_production_keeps_the_decision() {
        // Predicted 30 (runner-up 31), realised 40: a miss; the runner-up then realises 41.
        let p = predicted(30.0, 31.0);
        assert_eq!(p.assess(40.0, 0.02), Judgement::Trial(0));
        assert_eq!(p.assess(36.0, 0.02), Judgement::Verdict(Verdict::Kept));
        assert_eq!(p.judge_trial(40.0, 41.0, 0.02, 0), Verdict::Kept);
        assert_eq!(
            p.judge_trial(40.0, 39.5, 0.02, 0),
            Verdict::Kept,
            "within the gain"
        );
        assert_eq!(p.judge_trial(40.0, 30.0, 0.02, 0), Verdict::RunnerUp(0));
        assert_eq!(p.judge_trial(40.0, 41.0, 0.02, 1), Verdict::Kept);
    }

    #[test]
    fn a_prediction_holds_within_pmax_or_a_tenth_of_a_microsecond() {
        assert!(prediction_holds(0.15, 0.2, 0.1), "sub-microsecond noise");
        assert!(!prediction_holds(0.15, 0.3, 0.1));
        assert!(prediction_holds(100.0, 110.0, 0.1));
        assert!(
            !prediction_holds(100.0, 110.2, 0.1),
            "the floor is negligible here"
        );
    }

    #[test]
    fn realised_time_is_measured_as_the_search_measured() {
        let durations = [10, 30, 20];
        assert_eq!(realised(Timing::Local, Some(100), &durations, 250), 20.0);
        assert_eq!(realised(Timing::Barrier, None, &[40], 250), 40.0);
        assert_eq!(realised(Timing::Period, Some(100), &durations, 250), 50.0);
        assert_eq!(realised(Timing::Period, None, &[], 250), 0.0);
    }

    #[test]
    fn a_tail_counts_in_the_realised_time() {
        // Native's 64 KiB alltoall on the rig: 1.4 ms calls, three of sixteen 12 ms.
        let mut tailed = vec![1400; 13];
        tailed.extend([12_000; 3]);
        assert_eq!(realised(Timing::Barrier, None, &tailed, 0), 3387.5);
    }

    #[test]
    fn the_report_names_the_runner_up_in_microseconds() {
        let check = predicted(1000.0, 2000.0).report(
            3000.0,
            Some(5000.0),
            Verdict::RunnerUp(0),
            &["native"],
            2.0,
        );
        assert_eq!(check.predicted_us, 2.0);
        assert_eq!(check.realised_us, 6.0);
        assert_eq!(check.runner_up.as_deref(), Some("native"));
        assert_eq!(check.runner_up_us, Some(4.0));
        assert_eq!(check.runner_up_realised_us, Some(10.0));
        assert_eq!(
            (check.timing.as_str(), check.verdict.as_str()),
            ("local", "runner_up")
        );
    }

    #[test]
    fn a_trial_is_judged_against_the_winner_around_it() {
        let native = Prediction {
            runner_up: Some((4, 105.0)),
            timing: Timing::Barrier,
            ..predicted(100.0, 0.0)
        };
        // The loop got faster: the winner's window after the trial took 80, so the codelet on
        // trial, 90, did worse than the winner at its time.
        let before_alone = trial(100.0, 90.0, 1.0);
        let around = Around {
            after: Some(trial(80.0, 0.0, 1.0).before),
            ..before_alone
        };
        assert_eq!(
            native.after_trial(&around, 0.02, 0),
            AfterTrial::Verdict(Verdict::Kept)
        );
        assert_eq!(
            native.after_trial(&before_alone, 0.02, 0),
            AfterTrial::Verdict(Verdict::RunnerUp(4)),
            "judged by the window before alone, the trend replaced native"
        );
        // A tail in the window before, the pace the same (the median 80 on both sides): the
        // mean of the two windows, 105, which the codelet on trial beats.
        let tailed = Around {
            before: Window {
                realised: 130.0,
                median: 80.0,
                ..around.before
            },
            ..around
        };
        assert_eq!(
            native.after_trial(&tailed, 0.02, 0),
            AfterTrial::Verdict(Verdict::RunnerUp(4))
        );
    }

    #[test]
    fn a_winner_whose_window_has_a_tail_tries_the_best_paced_codelet() {
        // native predicted 10, `linear` (1) 11 and `ring` (4), the best that paces, 13; native's
        // window: a mean of 30 over a median call of 10.
        let native = Prediction {
            runner_up: Some((1, 11.0)),
            third: Some((2, 12.0)),
            paced: Some((4, 13.0)),
            timing: Timing::Barrier,
            ..predicted(10.0, 0.0)
        };
        let window = |realised, median| Window {
            realised,
            least: realised,
            call_share: 1.0,
            median,
        };
        let faced = native.facing(&window(30.0, 10.0), 0.02);
        assert_eq!(faced.runner_up, Some((4, 13.0)));
        assert_eq!(faced.third, Some((1, 11.0)), "the runner-up comes after it");
        assert_eq!(faced.assess_race(30.0, 0.02), Judgement::Trial(4));
        for (unchanged, why) in [
            (
                native.facing(&window(30.0, 25.0), 0.02),
                "no tail: slow throughout",
            ),
            (
                native.facing(&window(12.0, 5.0), 0.02),
                "a tail, but no miss",
            ),
            (
                Prediction {
                    timing: Timing::Period,
                    ..native
                }
                .facing(&window(30.0, 10.0), 0.02),
                "a period is no call's duration",
            ),
            (
                Prediction {
                    paced: Some((4, 29.9)),
                    ..native
                }
                .facing(&window(30.0, 10.0), 0.02),
                "the paced codelet is not estimated clearly faster",
            ),
            (
                Prediction {
                    paced: Some((1, 11.0)),
                    ..native
                }
                .facing(&window(30.0, 10.0), 0.02),
                "the runner-up paces",
            ),
        ] {
            assert_eq!(unchanged.runner_up, native.runner_up, "{why}");
            assert_eq!(unchanged.third, native.third, "{why}");
        }
    }

    #[test]
    fn a_trial_that_beats_a_tailed_winner_replaces_it_without_a_second_search() {
        // Both missed their estimates (10 and 11; 20 and 15 realised), which reopens the search
        // (`calls_a_small_share_of_their_period_keep_the_runner_up_instead_of_a_period_search`),
        // unless the winner's window had a tail, which explains its miss, and the codelet on
        // trial paces.
        let p = Prediction {
            paced: Some((0, 11.0)),
            ..predicted(10.0, 11.0)
        };
        let untailed = trial(20.0, 15.0, 0.9);
        let tailed = Around {
            before: Window {
                median: 12.0,
                ..untailed.before
            },
            ..untailed
        };
        assert_eq!(
            p.after_trial(&untailed, 0.02, 0),
            AfterTrial::Verdict(Verdict::Reopen(Timing::Period))
        );
        assert_eq!(
            p.after_trial(&tailed, 0.02, 0),
            AfterTrial::Verdict(Verdict::RunnerUp(0))
        );
        let bursts = Prediction { paced: None, ..p };
        assert_eq!(
            bursts.after_trial(&tailed, 0.02, 0),
            AfterTrial::Verdict(Verdict::Reopen(Timing::Period)),
            "a codelet on trial that bursts may have a tail of its own"
        );
    }

    #[test]
    fn without_an_alternative_nothing_is_wrong() {
        let alone = Prediction {
            winner: 1.0,
            runner_up: None,
            third: None,
            paced: None,
            timing: Timing::Period,
        };
        assert_eq!(alone.assess(100.0, 0.02), Judgement::Verdict(Verdict::Kept));
        assert_eq!(alone.judge_trial(100.0, 1.0, 0.02, 1), Verdict::Kept);
    }
}
