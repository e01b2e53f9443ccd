//! The tuner's knobs as values (parsed from COMMTUNE_* by the library's configuration), and how
//! search samples are timed.

use crate::policy::Search;
use crate::stats::Filter;

/// How search samples are timed (COMMTUNE_TIMING).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Timing {
    /// The call's duration on this rank; the decision takes the maximum over ranks.
    Local,
    /// As `Local`, after a barrier on the private communicator (worst case; distorts overlap).
    Barrier,
    /// From one entry of the key to the next: a whole application iteration. The first sample
    /// after a codelet switch is discarded, so each codelet runs twice in a row per round.
    Period,
}

impl Timing {
    /// The timing COMMTUNE_TIMING names.
    pub fn parse(name: &str) -> Option<Timing> {
        match name {
            "local" => Some(Timing::Local),
            "barrier" => Some(Timing::Barrier),
            "period" => Some(Timing::Period),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Timing::Local => "local",
            Timing::Barrier => "barrier",
            Timing::Period => "period",
        }
    }
}

/// The samples per codelet COMMTUNE_SAMPLES accepts.
pub const SAMPLES: std::ops::RangeInclusive<u32> = 1..=1000;

/// The tuner's knobs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Settings {
    pub search: Search,
    pub filter: Filter,
    pub timing: Timing,
    /// Samples per codelet at most (rounds of the search).
    pub samples: u32,
    /// Instances per sample: a block of consecutive instances of one codelet, the first
    /// discarded (`sampling`).
    pub block: u32,
    /// Calls of a key before it may be tuned.
    pub warmup: u64,
    /// Largest share of a key's expected time over the run that the search may spend on
    /// codelets that are not the best; below 1, a key is searched only when the calls expected
    /// to come can pay for the search (`budget`). 1: no limit.
    pub budget: f64,
    /// A codelet must beat native by more than this fraction of native's time.
    pub min_gain: f64,
    /// Instances of a key in production between drift checks.
    pub drift_interval: u64,
    /// Relative slow-down of the winner that counts as drift.
    pub drift_threshold: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            search: Search::Attributes,
            filter: Filter::Robust { nu: 5.0 },
            timing: Timing::Barrier,
            samples: 4,
            block: 1,
            warmup: 3,
            budget: 0.2,
            min_gain: 0.02,
            drift_interval: 256,
            drift_threshold: 0.5,
        }
    }
}

impl Settings {
    /// The settings of a halo episode's search: `block` episodes per sample and `samples`
    /// samples per codelet (COMMTUNE_HALO_BLOCK, COMMTUNE_HALO_SAMPLES), and `period` timing
    /// unless COMMTUNE_TIMING asks for `local`.
    ///
    /// A halo episode is not a collective: one rank's episode waits for whatever its peers are
    /// doing, so it says little about the exchange (on a 1 Gbit/s network each rank's estimates
    /// came out near random). Where the ranks exchange alike, every rank runs the same schedule
    /// of blocks from the same episode on (warm-up and do no harm count episodes alike), so a
    /// block's period is the period of the whole exchange with that codelet, the same on every
    /// rank. `barrier` means that here, as a rank alone holds no barrier.
    pub fn for_halo(self, block: u32, samples: u32) -> Settings {
        Settings {
            timing: match self.timing {
                Timing::Local => Timing::Local,
                Timing::Barrier | Timing::Period => Timing::Period,
            },
            block,
            samples,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_parse_their_names() {
        for timing in [Timing::Local, Timing::Barrier, Timing::Period] {
            assert_eq!(Timing::parse(timing.name()), Some(timing));
        }
    }

    #[test]
    fn a_halo_search_times_periods_unless_asked_for_local() {
        for (asked, halo) in [
            (Timing::Local, Timing::Local),
            (Timing::Barrier, Timing::Period),
            (Timing::Period, Timing::Period),
        ] {
            let collectives = Settings {
                timing: asked,
                ..Settings::default()
            };
            let settings = collectives.for_halo(8, 2);
            assert_eq!(
                (settings.timing, settings.block, settings.samples),
                (halo, 8, 2)
            );
            assert_eq!(settings.warmup, collectives.warmup);
        }
    }
}
