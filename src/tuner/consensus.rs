//! The only place that talks across ranks about tuning decisions: one small allreduce on the
//! private communicator per checkpoint, round or drift check, at the same instance on every rank
//! (a checkpoint's is started there and finished `checkpoints::FINISH_AFTER` instances later).
//! Every outcome is computed from the reduced values, so it is the same everywhere.

use crate::mpi::datatype::MpiResult;
use crate::mpi::{Comm, StartedMinMax};
use commtune_tune::trial::Window;
use commtune_tune::{Agreed, Timing};

/// What a checkpoint found about the key each rank is at.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Checkpoint {
    /// Every rank is at the same key and it has warmed up: the history's prediction when every
    /// rank predicted the same winner, time and timing; `not_worth_until`: None when every rank
    /// found a search worth its cost (do no harm), else the communicator instance from which
    /// every rank will (the latest of the ranks').
    Agreed {
        prediction: Option<AgreedPrediction>,
        not_worth_until: Option<u64>,
        /// What one of the tuner's small collectives takes in calls of the key: the least of
        /// the ranks' (0 where some rank has not timed one), which picks the timing of its
        /// search under COMMTUNE_TIMING=auto.
        collective_over_call: f64,
    },
    /// Every rank proposed a key, but not the same one.
    Disagreed,
    /// Some ranks proposed a key, others had none ready.
    Partial,
    /// No rank had a key ready.
    Nothing,
}

/// A prediction from the history as every rank made it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AgreedPrediction {
    /// Registry index.
    pub winner: usize,
    /// Microseconds per call, the largest of the ranks'.
    pub us: f64,
    /// The prediction's runner-up (registry index), where every rank named the same.
    pub runner_up: Option<usize>,
}

/// One rank's prediction from the history.
#[derive(Clone, Copy)]
pub struct Proposed {
    /// Registry indices.
    pub winner: usize,
    pub runner_up: Option<usize>,
    /// Microseconds per call.
    pub us: f64,
    /// The timing its times were measured with when not the job's (then the key's).
    pub timing: Option<Timing>,
}

/// One rank's view at a checkpoint.
pub struct Vote {
    /// The agreement hash of the key it is at, or None when the key has not warmed up.
    pub key: Option<u64>,
    /// The history's prediction.
    pub predicted: Option<Proposed>,
    /// None when a search of the key pays for itself now, else the communicator instance from
    /// which it will (`checkpoints::worth_at`).
    pub not_worth_until: Option<u64>,
    /// What one of the tuner's small collectives takes on this rank in calls of the key (0:
    /// not known yet, or the key is still warming up).
    pub collective_over_call: f64,
    /// What a checkpoint costs this rank in calls of the key (0: not known yet, or the key is
    /// still warming up).
    pub checkpoint_over_call: f64,
}

/// The predicted times of ranks that predicted alike differ only as their clocks' calibrations
/// do (an entry learnt in this run is converted from clock ticks on each rank).
const SAME_TIME: f64 = 0.01;

/// What a checkpoint found, and what it costs in calls (the largest of the ranks' views; 0 where
/// some rank does not know it yet or is at a call still warming up), whatever it found: a
/// communicator whose calls are all settled finds nothing at every checkpoint, and those must
/// space out by their cost too.
pub struct Checkpointed {
    pub found: Checkpoint,
    pub checkpoint_over_call: f64,
}

/// A checkpoint's reduction in flight: started at the checkpoint's instance, finished
/// `checkpoints::FINISH_AFTER` instances later (or when the communicator is freed, or at
/// MPI_Finalize), so that its latency overlaps the application's calls between.
pub struct StartedCheckpoint(StartedMinMax<9>);

/// Starts the reduction of each rank's vote: a rank's own view of any of it never starts
/// anything alone.
pub fn start_checkpoint(comm: &Comm, vote: &Vote) -> MpiResult<StartedCheckpoint> {
    // Hashes are cut to 62 bits so that negating them (to get the minimum from MPI_MAX) cannot
    // overflow; 0 is "no proposal". A time's bits (never negative) order as the time does.
    let bits = order_bits;
    let hash = vote.key.map_or(0, |h| (h >> 2).max(1) as i64);
    let ready = i64::from(vote.key.is_some());
    let winner = vote.predicted.map_or(0, |p| p.winner as i64 + 1);
    let runner_up = vote
        .predicted
        .and_then(|p| p.runner_up)
        .map_or(0, |r| r as i64 + 1);
    let time = vote.predicted.map_or(0, |p| bits(p.us));
    // A prediction of another timing makes the key search and check with it: its ranks must
    // agree on the timing too (barrier timing holds barriers the others do not).
    let timing = vote
        .predicted
        .map_or(0, |p| p.timing.map_or(1, |t| t as i64 + 2));
    // 0 is "worth it now"; an instance is at least 1.
    let until = vote
        .not_worth_until
        .map_or(0, |at| i64::try_from(at.max(1)).unwrap_or(i64::MAX));
    let ratio = bits(vote.checkpoint_over_call);
    let collective = bits(vote.collective_over_call);
    comm.start_min_max_i64([
        hash, ready, winner, runner_up, time, timing, until, ratio, collective,
    ])
    .map(StartedCheckpoint)
}

impl StartedCheckpoint {
    /// Waits for the reduction: what the checkpoint found, alike on every rank.
    pub fn finish(self) -> MpiResult<Checkpointed> {
        let [
            hash,
            ready,
            winner,
            runner_up,
            time,
            timing,
            until,
            ratio,
            collective,
        ] = self.0.wait()?;
        let value = |bits: i64| f64::from_bits(bits as u64);
        let found = match (ready.max, ready.min) {
            (0, _) => Checkpoint::Nothing,
            (_, 0) => Checkpoint::Partial,
            _ if hash.same_everywhere() => Checkpoint::Agreed {
                prediction: (winner.min > 0
                    && winner.same_everywhere()
                    && timing.same_everywhere()
                    && value(time.max) <= value(time.min) * (1.0 + SAME_TIME))
                    .then(|| AgreedPrediction {
                        winner: (winner.min - 1) as usize,
                        us: value(time.max),
                        runner_up: (runner_up.min > 0 && runner_up.same_everywhere())
                            .then(|| (runner_up.min - 1) as usize),
                    }),
                not_worth_until: (until.max > 0).then_some(until.max as u64),
                collective_over_call: value(collective.min),
            },
            _ => Checkpoint::Disagreed,
        };
        Ok(Checkpointed {
            found,
            checkpoint_over_call: if ratio.min > 0 { value(ratio.max) } else { 0.0 },
        })
    }
}

/// The per-rank estimates of a round reduced to their maximum over ranks (the slowest rank sets
/// a collective's time), with the largest share of time any rank spent on losing codelets.
pub fn round(comm: &Comm, local: &[Agreed], wasted_share: f64) -> MpiResult<(Vec<Agreed>, f64)> {
    let mut values: Vec<f64> = local
        .iter()
        .flat_map(|a| [a.location, a.error])
        .chain([wasted_share])
        .collect();
    comm.allreduce_max_f64(&mut values)?;
    let wasted = values.pop().unwrap_or(0.0);
    let agreed = values
        .chunks_exact(2)
        .map(|pair| Agreed {
            location: pair[0],
            error: pair[1],
        })
        .collect();
    Ok((agreed, wasted))
}

/// The mean over ranks of the drift ratio (recent time / time after the decision): a collective
/// slows down everywhere, while one rank's noise should not reopen a search.
pub fn drift(comm: &Comm, ratio: f64) -> MpiResult<f64> {
    let mut values = [ratio];
    comm.allreduce_sum_f64(&mut values)?;
    Ok(values[0] / f64::from(comm.size.max(1)))
}

/// A time per call on each rank (never negative) reduced to the slowest rank's, as search
/// estimates are reduced: what every decision compares.
pub fn slowest(comm: &Comm, time: f64) -> MpiResult<f64> {
    let mut values = [time];
    comm.allreduce_max_f64(&mut values)?;
    Ok(values[0])
}

/// A production window's realised time per call on each rank (`ticks`, never negative) reduced to
/// the slowest rank's and the least's, and the calls' share of the window's time there
/// (`check::call_share`) to its least over ranks, and its median call (`check::median_call`) to
/// its largest: what a self-check and its trials compare.
pub fn window(comm: &Comm, ticks: f64, call_share: f64, median: f64) -> MpiResult<Window> {
    let [(realised, least), (_, call_share), (median, _)] =
        max_min(comm, [ticks, call_share, median])?;
    Ok(Window {
        realised,
        least,
        call_share,
        median,
    })
}

/// A non-negative number as an integer that orders as the number does (its bits); NaN, -0 and
/// negative numbers as 0, so that no value is `i64::MIN`, which `min_max_i64` negates.
fn order_bits(x: f64) -> i64 {
    if x > 0.0 { x.to_bits() as i64 } else { 0 }
}

/// Non-negative values reduced to their maximum and minimum over ranks.
fn max_min<const N: usize>(comm: &Comm, values: [f64; N]) -> MpiResult<[(f64, f64); N]> {
    let spreads = comm.min_max_i64(values.map(order_bits))?;
    let value = |bits: i64| f64::from_bits(bits as u64);
    Ok(spreads.map(|s| (value(s.max), value(s.min))))
}

#[cfg(test)]
mod tests {
    use super::order_bits;

    #[test]
    fn reduced_numbers_order_as_they_do_and_nothing_is_the_least_integer() {
        assert!(order_bits(1e-9) < order_bits(0.5));
        assert!(order_bits(0.5) < order_bits(3.0e6));
        for odd in [-0.0, f64::NAN, -1.0, 0.0] {
            assert_eq!(order_bits(odd), 0, "{odd}");
        }
        assert_eq!(f64::from_bits(order_bits(2.5) as u64), 2.5);
    }
}
