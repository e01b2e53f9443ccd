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

/// What COMMTUNE_TIMING takes: `auto` (`Settings::search_timing`) or one timing for every key.
pub const TIMINGS: [&str; 4] = ["auto", "local", "barrier", "period"];

/// Under COMMTUNE_TIMING=auto, a key where one of the tuner's own small collectives (a barrier,
/// the fastest of those do no harm timed) takes at least this share of the key's mean call is
/// searched with `local` timing, the others with `barrier` timing. There a barrier before each
/// sample costs about as much as the sample, and the ranks' skew that local timing charges a
/// codelet for is small beside its call.
///
/// What the library measured (the report's `collective_over_call`): on the 1 Gbit/s rig 0.57
/// to 0.86 at 8 bytes (allreduce, alltoall, allgatherv), 0.60 to 0.77 at 1 KiB (allreduce;
/// alltoall per rank), 0.33 at 8 KiB, 0.08 at 64 KiB; on shared memory, 2 ranks, a few doubles:
/// 0.38 to 0.55 under Open MPI, 0.51 to 1.44 under MPICH (busy polling).
///
/// On the rig, alternating first runs, tuned / native (medians) with barrier timing and with
/// local (what auto chooses there): 400 calls, allreduce 8 B 1.236 and 1.209 (20 runs each),
/// alltoall 8 B 1.210 and 1.124 (20), allgatherv 8 B 1.228 and 1.139 (20); with barrier and
/// with auto, alltoall 1 KiB per rank 1.325 and 1.071 (12); 2000 calls, alltoall 1 KiB 1.161
/// and 1.062 (10), allreduce 8 B 1.020 and 1.085 (10; single runs spread from 0.84 to 1.36).
/// Later batches with auto itself, 400 calls, barrier and auto: 16 runs each came out even
/// (allreduce 8 B 77.4 and 76.6 us per call, alltoall 8 B 96.0 and 95.7 us); 40 runs each
/// favoured auto at every operation: allreduce 8 B 72.9 and 70.0 us (medians of the runs'
/// ratios to native 1.115 and 1.030), alltoall 95.1 and 88.3 us (1.178 and 1.079), allgatherv
/// 82.0 and 79.9 us (1.103 and 1.086); single runs spread from 0.69 to 1.77.
///
/// Replayed over the rig's traces (`commtune simulate`, the library's defaults otherwise, 40
/// replays per key; the simulator's ratio is a barrier's latency over native's steady call,
/// lower than the library's): local timing did better at every key at 0.52 to 0.77 (8 bytes at
/// 1 and 10 Gbit/s, 1 KiB allreduce): at 400 calls 1.09 to 1.32 of the best codelet with
/// barrier timing, 1.08 to 1.20 with local; at 2000 calls by 0.007 to 0.05. At 0.45 (the 1 KiB
/// alltoall, which the library measured at 0.60 and above and ran better locally) it replayed
/// worse, 1.061 against 1.206 at 2000 calls; at 0.35 (8 KiB) and 0.17 (shared memory's 16-byte
/// alltoall) mixed within 0.05; at 0.06 and below up to 1.33 (the rig's 1 MiB allgatherv,
/// where local timing charges ring for its predecessor's skew).
pub const LOCAL_TIMING_FROM: f64 = 0.5;

/// The samples per codelet COMMTUNE_SAMPLES accepts.
pub const SAMPLES: std::ops::RangeInclusive<u32> = 1..=1000;

/// The tuner's knobs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Settings {
    pub search: Search,
    pub filter: Filter,
    /// How search samples are timed: every key with `timing`, or under COMMTUNE_TIMING=auto
    /// (`auto_timing`, `timing` then `Barrier`) as `search_timing` says.
    pub timing: Timing,
    pub auto_timing: bool,
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
            auto_timing: true,
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
    /// The timing of a key's search, where one of the tuner's small collectives takes
    /// `collective_over_call` of the key's calls (the same on every rank; 0 when not known).
    pub fn search_timing(&self, collective_over_call: f64) -> Timing {
        if self.auto_timing && collective_over_call >= LOCAL_TIMING_FROM {
            Timing::Local
        } else {
            self.timing
        }
    }

    /// These settings with COMMTUNE_TIMING=`name` (one of `TIMINGS`), or None.
    pub fn with_timing(self, name: &str) -> Option<Settings> {
        let (timing, auto_timing) = match name {
            "auto" => (Timing::Barrier, true),
            name => (Timing::parse(name)?, false),
        };
        Some(Settings {
            timing,
            auto_timing,
            ..self
        })
    }

    /// COMMTUNE_TIMING's value.
    pub fn timing_name(&self) -> &'static str {
        if self.auto_timing {
            "auto"
        } else {
            self.timing.name()
        }
    }

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
            // Halo episodes' calls are timed by period whatever their length.
            auto_timing: false,
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
    fn auto_times_locally_where_a_barrier_costs_half_a_call() {
        let auto = Settings::default();
        assert_eq!(auto.timing_name(), "auto");
        assert_eq!(auto.search_timing(0.0), Timing::Barrier, "not known yet");
        assert_eq!(auto.search_timing(0.3), Timing::Barrier);
        assert_eq!(auto.search_timing(LOCAL_TIMING_FROM), Timing::Local);
        assert_eq!(auto.search_timing(2.0), Timing::Local);
        for name in TIMINGS {
            let settings = auto.with_timing(name).unwrap();
            assert_eq!(settings.timing_name(), name);
            if name != "auto" {
                assert_eq!(settings.search_timing(2.0).name(), name, "asked for");
            }
        }
        assert_eq!(auto.with_timing("fast"), None);
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
