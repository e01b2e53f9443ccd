//! A codelet on trial in production. After a winner missed what was predicted, or won a close
//! race, another codelet runs a window of production calls, and where it does clearly better
//! the winner runs one more window after it: the codelet on trial is judged between two of the
//! winner's windows (an A-B-A comparison), so that neither a trend in the calls' pace nor a time
//! slice lost in one window decides alone. A collective's self-check (`check::Prediction::
//! after_trial`), the safety net of a history's prediction (collectives and halos alike) and the
//! simulator run their trials through `Trial`, each judging the windows by its own rule
//! (`Around`). A halo's self-check judges its runner-up by the one window before it
//! (`Trial::before`): each rank tunes its halo alone, and its lead checks keep comparing the
//! codelets in production.

use crate::settings::Timing;

/// Whether a codelet that realised `tried` per call in a trial window did clearly better (by
/// more than `gain`) than the one that realised `realised`.
///
/// A trial is how a check tells a codelet's miss from the machine's. The self-check tries the
/// search's runner-up after the winner missed its estimate (`Prediction::judge_trial`); the
/// safety net tries an alternative after a predicted winner missed its predicted time, which
/// another job measured: on a machine shared with other jobs the same codelet takes 10 to 16 %
/// longer from one run to the next (the 10 Gbit/s rig's halo, Open MPI on shared memory), more
/// than COMMTUNE_PMAX, so the predictions of second runs were dismissed and searched again, and
/// those runs took 1.18 to 1.20 times native's time against 1.06 to 1.11 for the first runs.
/// A predicted winner that the alternative does not beat stays: a search would find it again.
pub fn beaten(realised: f64, tried: f64, gain: f64) -> bool {
    tried < realised * (1.0 - gain)
}

/// The least share by which the safety net's alternative must beat a predicted winner to
/// dismiss the prediction (`prediction_gain`). A prediction stands on the history's search, one
/// window of production against it: at 8 bytes on the 1 Gbit/s rig, in second runs of a
/// 400-call alltoall, native's trial window measured 5.5, 7 and 11 % less than the predicted
/// `linear`'s window before it (3 of 4 runs), and each of those dismissals searched again at a
/// cost of more than the gain.
pub const PREDICTION_TRIAL_GAIN: f64 = 0.1;

/// The gain by which the safety net's alternative must beat a predicted winner: more than
/// COMMTUNE_MIN_GAIN (`min_gain`) and `PREDICTION_TRIAL_GAIN`.
pub fn prediction_gain(min_gain: f64) -> f64 {
    min_gain.max(PREDICTION_TRIAL_GAIN)
}

/// What a trial's rules read of a window: its time per call (agreed over ranks for a
/// collective; a halo's rank measures its own).
pub trait Timed: Copy {
    fn per_call(&self) -> f64;
}

/// A time per call alone: the safety net's windows (microseconds after a collective's
/// prediction, clock ticks after a halo's).
impl Timed for f64 {
    fn per_call(&self) -> f64 {
        *self
    }
}

/// What a window of a collective's production measured, agreed over ranks (`consensus::window`
/// in the library): clock ticks per call on the slowest rank (what decisions compare, as search
/// estimates are reduced) and on the least (for the report: a rank's time in a call includes its
/// wait for ranks that arrive later, and the rank that usually arrives last waits least), and the
/// calls' least share of the window's time over ranks (`check::call_share`): the codelet on
/// trial's decides whether a search timed by periods can resolve the key
/// (`check::Prediction::after_trial`); the winner's is carried along unread. And the median call
/// (`check::median_call`, the largest over ranks): what tells the winner's change of pace between
/// its windows from a rare long call in one of them (`Around::winner_time`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub realised: f64,
    pub least: f64,
    pub call_share: f64,
    pub median: f64,
}

/// A window of production calls whose mean call exceeds its median call by more than this
/// factor has a tail: a few calls far longer than the others (`Window::tailed`). Both are
/// the largest over ranks (`consensus::window`), and the slowest rank's median includes its wait
/// for the others. In 6 traced 64 KiB alltoall runs on the 1 Gbit/s rig, the windows of native
/// and `linear` had means of 1.43 to 2.5 times that median (1.6 ms), those of `pairwise` and
/// `linear_sync2`, which have no tail, 0.9 to 1.2.
pub const TAILED: f64 = 1.25;

impl Window {
    /// Its median call where that compares with its time per call: measured, and not under
    /// `period` timing (`timing`), whose windows' times are periods while their medians are
    /// calls'.
    fn comparable_median(&self, timing: Timing) -> Option<f64> {
        (timing != Timing::Period && self.median > 0.0).then_some(self.median)
    }

    /// Whether the window has a tail (`TAILED`): its mean call against its median.
    pub fn tailed(&self, timing: Timing) -> bool {
        self.comparable_median(timing)
            .is_some_and(|median| self.realised > median * TAILED)
    }
}

impl Timed for Window {
    fn per_call(&self) -> f64 {
        self.realised
    }
}

/// A codelet on trial (registry index `codelet`) against the winner's window before it
/// (`before`); once its own window ran and did clearly better, `tried` holds it while the winner
/// runs one more.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trial<W> {
    pub codelet: usize,
    pub before: W,
    pub tried: Option<W>,
}

/// A trial's windows, complete: the winner's before, the codelet on trial's, and the winner's
/// after it where the codelet on trial beat the one before (None: it did not, and ran no window
/// more).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Around<W> {
    pub codelet: usize,
    pub before: W,
    pub tried: W,
    pub after: Option<W>,
}

/// What follows a trial's window (`Trial::ended`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ended<W> {
    /// The winner runs one more window, after the codelet on trial.
    WinnerNext(Trial<W>),
    /// The trial's windows are complete, to be judged.
    Judged(Around<W>),
}

impl<W: Timed> Trial<W> {
    pub fn new(codelet: usize, before: W) -> Trial<W> {
        Trial {
            codelet,
            before,
            tried: None,
        }
    }

    /// The codelet production runs: the one on trial, then the winner (`winner`) for its
    /// window after it.
    pub fn running(&self, winner: usize) -> usize {
        if self.tried.is_some() {
            winner
        } else {
            self.codelet
        }
    }

    /// The trial once `window` (the one that just ended: the codelet on trial's, or the
    /// winner's after it) is in: the winner runs its window after the trial next where the
    /// codelet on trial did clearly better (by more than `gain`) than the winner's window before
    /// it; otherwise the trial is judged. A codelet on trial that did not costs no window more.
    pub fn ended(self, window: W, gain: f64) -> Ended<W> {
        let around = |tried, after| Around {
            codelet: self.codelet,
            before: self.before,
            tried,
            after,
        };
        match self.tried {
            Some(tried) => Ended::Judged(around(tried, Some(window))),
            None if beaten(self.before.per_call(), window.per_call(), gain) => {
                Ended::WinnerNext(Trial {
                    tried: Some(window),
                    ..self
                })
            }
            None => Ended::Judged(around(window, None)),
        }
    }
}

impl<W: Timed> Around<W> {
    /// The winner's latest window: what a trial that follows this one is judged against (a
    /// race's third, `check::AfterTrial::Trial`). Where this trial ran no window of the winner's
    /// after it, that is the window before this trial, two windows before the next one's.
    pub fn latest(&self) -> W {
        self.after.unwrap_or(self.before)
    }

    /// The winner's time per call in its faster window.
    pub fn winner_fastest(&self) -> f64 {
        let before = self.before.per_call();
        self.after
            .map_or(before, |after| after.per_call().min(before))
    }

    /// The safety net's rule: whether the codelet on trial did clearly better (by more than
    /// `gain`) than the winner in both windows around it, which dismisses a prediction.
    ///
    /// Both, since the window that missed the prediction can hold a lost time slice that the
    /// trial's has not. In second runs of 400-call 8-byte collectives on the 1 Gbit/s rig, the
    /// prediction (native, measured within 1 % of forced native alone) missed and was dismissed
    /// in 2 of 11 alltoall runs (one window measured 88 us against 43 predicted, one call of
    /// 1 ms in it) and 2 of 7 allgatherv runs (42.6 us against 37.7, then `bruck` 38.1 in its
    /// trial), when one window decided, and each dismissal searched at a cost of about a tenth
    /// of the run.
    pub fn beaten_on_both_sides(&self, gain: f64) -> bool {
        let tried = self.tried.per_call();
        let beats = |winner: W| beaten(winner.per_call(), tried, gain);
        beats(self.before) && self.after.is_some_and(beats)
    }
}

/// The share by which the winner's median call must fall between its windows around a trial
/// for the window after to judge the trial alone (`Around::winner_time`). A median of 16 calls
/// moves by a few percent from window to window with no trend at all (and by more where one
/// window holds more of a codelet's tail, whose calls push the body's median up), and the rule
/// always leans toward the winner; the rig's trend it is for fell by 20 % (below).
pub const PACE_FELL: f64 = 0.1;

impl Around<Window> {
    /// The self-check's rule (`check::Prediction::after_trial`): the winner's time around the
    /// trial (the window before alone where the codelet on trial did not beat it). Where the
    /// winner's pace fell between its windows (its median call after the trial under the one
    /// before by more than `PACE_FELL`), the window after: a tight loop's calls get faster over
    /// their first hundreds, and faster early than late, so the trial's window is nearer the
    /// pace of the window after than the mean of the two (which end of that range favours the
    /// winner: a decision stands unless clearly beaten). Otherwise the mean of the two windows
    /// (`winner_mean`), where a rare long call shows in one window's mean more than in its
    /// median, as under `period` timing (`timing`) and where no median was measured.
    ///
    /// On the 1 Gbit/s rig, 400-call 8-byte alltoall loops (6 traced runs, 7 December 2026):
    /// native's window before a trial of `linear` took 93 us per call (median call 112 us on its
    /// slowest rank), `linear`'s 79, native's after it 76 (median 89): the mean (84.5) had
    /// `linear` replace native, which then took 80 us per call against native's 74 to 79 in the
    /// other runs' production. `linear` forced alone takes 84 to 86 us per call there, native 78
    /// to 79 (5 runs each). In 40 runs alternating with the build that took the mean (two batches
    /// of 20, the first with a threshold of 2 %), trials replaced a native decision in 1 run
    /// against 12, times paired 0.981 and 0.997; the 8-byte allreduce, where `linear` is the
    /// best, and the 64 KiB alltoall (tails of its own) paired 0.998 to 0.999 and 0.98.
    pub fn winner_time(&self, timing: Timing) -> Window {
        match self.after {
            Some(after)
                if after
                    .comparable_median(timing)
                    .is_some_and(|median| median < self.before.median * (1.0 - PACE_FELL)) =>
            {
                after
            }
            _ => self.winner_mean(),
        }
    }

    /// The mean of the winner's two windows around the trial (the window before alone where
    /// there is no window after), the least rank's time too, for the report.
    ///
    /// The mean, not the faster as the safety net asks (`beaten_on_both_sides`): in replays of
    /// tests/data, the faster of the winner's windows had made the rig's 64 KiB alltoall 1.375
    /// times the best codelet at 400 calls, their mean 1.329, one window 1.302 (an older
    /// library, 29 November 2026): native's tail shows in fewer windows than not. And two
    /// windows, not one: a trial's window comes after the winner's, and a tight loop's calls get
    /// faster over its first hundreds. On the 1 Gbit/s rig, in 400-call loops of an 8-byte
    /// alltoall (6 runs with every call traced, 6 December 2026), native's calls came 121 to
    /// 178 us apart over the first 16, 104 to 139 over the next 16, and 84 to 97 after call 150.
    /// Judged by the window before alone, a trial replaced the winner in 7 of 15 runs (its
    /// window 2.5 to 8.6 % under the winner's), and those runs went on with `linear_sync8`,
    /// `linear_sync4` or `linear`, which forced alone take 1.10 to 1.16 times native's time.
    /// The windows before and after the trial take a steady trend out of the comparison.
    fn winner_mean(&self) -> Window {
        let Some(after) = self.after else {
            return self.before;
        };
        let mean = |before: f64, after: f64| (before + after) / 2.0;
        Window {
            realised: mean(self.before.realised, after.realised),
            least: mean(self.before.least, after.least),
            call_share: mean(self.before.call_share, after.call_share),
            median: mean(self.before.median, after.median),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(realised: f64) -> Window {
        Window {
            realised,
            least: realised / 2.0,
            call_share: 1.0,
            median: realised,
        }
    }

    /// The trial after the window that just ended (`window`), where it goes on.
    fn winner_next<W: Timed>(trial: Trial<W>, window: W, gain: f64) -> Trial<W> {
        match trial.ended(window, gain) {
            Ended::WinnerNext(trial) => trial,
            Ended::Judged(_) => panic!("beaten: the winner runs the window after"),
        }
    }

    /// The trial's windows after the window that just ended (`window`), where it is judged.
    fn judged<W: Timed>(trial: Trial<W>, window: W, gain: f64) -> Around<W> {
        match trial.ended(window, gain) {
            Ended::Judged(around) => around,
            Ended::WinnerNext(_) => panic!("judged at once"),
        }
    }

    #[test]
    fn a_codelet_beats_only_by_more_than_the_gain() {
        assert!(beaten(40.0, 30.0, 0.02));
        assert!(!beaten(40.0, 39.5, 0.02), "within the gain");
        assert!(!beaten(40.0, 41.0, 0.02));
        assert_eq!(prediction_gain(0.02), PREDICTION_TRIAL_GAIN);
        assert_eq!(prediction_gain(0.2), 0.2);
        assert!(!beaten(40.0, 37.0, prediction_gain(0.02)), "within 10 %");
    }

    #[test]
    fn a_trial_that_beats_the_window_before_it_waits_for_the_one_after() {
        let trial = Trial::new(4, window(100.0));
        assert_eq!(trial.running(0), 4);
        let not_beaten = judged(trial, window(99.0), 0.02);
        assert_eq!(not_beaten.after, None);
        assert_eq!(not_beaten.winner_mean(), window(100.0));
        assert_eq!(not_beaten.latest(), window(100.0));
        let waiting = winner_next(trial, window(90.0), 0.02);
        assert_eq!(waiting.running(0), 0, "the winner runs the window after");
        // The loop got faster: the winner's window after the trial took 80, so the codelet on
        // trial, 90, did worse than the winner at its time.
        let around = judged(waiting, window(80.0), 0.02);
        assert_eq!(around.tried, window(90.0));
        assert_eq!(around.winner_mean(), window(90.0));
        assert_eq!(around.latest(), window(80.0));
        assert_eq!(around.winner_fastest(), 80.0);
    }

    #[test]
    fn a_winner_whose_pace_fell_is_judged_by_its_window_after_the_trial() {
        let with_median = |realised, median| Window {
            median,
            ..window(realised)
        };
        // The rig's traced alltoall: native 93 (median 112), linear 79, native 76 (median 89).
        let sped_up = judged(
            winner_next(Trial::new(1, with_median(93.0, 112.0)), window(79.0), 0.02),
            with_median(76.0, 89.0),
            0.02,
        );
        assert_eq!(sped_up.winner_time(Timing::Local), with_median(76.0, 89.0));
        assert_eq!(
            sped_up.winner_time(Timing::Period).realised,
            84.5,
            "periods: the mean"
        );
        // More of a tail in the window before: its mean far above, its median a little.
        let tail = Around {
            before: with_median(3400.0, 1400.0),
            after: Some(with_median(1300.0, 1330.0)),
            ..sped_up
        };
        assert_eq!(tail.winner_time(Timing::Barrier).realised, 2350.0);
        // Slower after the trial, or no median measured: the mean.
        let slowed = Around {
            before: with_median(76.0, 89.0),
            after: Some(with_median(93.0, 112.0)),
            ..sped_up
        };
        assert_eq!(slowed.winner_time(Timing::Local).realised, 84.5);
        let unmeasured = Around {
            after: Some(with_median(76.0, 0.0)),
            ..sped_up
        };
        assert_eq!(unmeasured.winner_time(Timing::Local).realised, 84.5);
    }

    #[test]
    fn a_prediction_is_dismissed_only_when_beaten_on_both_sides_of_its_trial() {
        let gain = prediction_gain(0.02);
        // Not beaten before the trial: kept at once.
        assert!(!judged(Trial::new(0, 40.0), 37.0, gain).beaten_on_both_sides(gain));
        // Beaten: the winner runs another window, which decides.
        let waiting = winner_next(Trial::new(0, 42.6), 38.1, gain);
        assert!(!judged(waiting, 37.5, gain).beaten_on_both_sides(gain));
        let dismissed = judged(waiting, 43.0, gain);
        assert!(dismissed.beaten_on_both_sides(gain));
        assert_eq!(dismissed.winner_fastest(), 42.6);
    }
}
