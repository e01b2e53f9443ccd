//! The only place that talks across ranks about tuning decisions: one small allreduce on the
//! private communicator per checkpoint, round or drift check, at the same instance on every rank.
//! Every outcome is computed from the reduced values, so it is the same everywhere.

use crate::mpi::Comm;
use crate::mpi::datatype::MpiResult;
use commtune_tune::Agreed;

/// What a checkpoint found about the key each rank is at.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Checkpoint {
    /// Every rank is at the same key and it has warmed up: the history's prediction when every
    /// rank predicted the same winner (registry index) and time (microseconds per call, the
    /// largest of the ranks'); `search`: every rank found a search worth its cost (do no harm).
    Agreed {
        prediction: Option<(usize, f64)>,
        search: bool,
    },
    /// Every rank proposed a key, but not the same one.
    Disagreed,
    /// Some ranks proposed a key, others had none ready.
    Partial,
    /// No rank had a key ready.
    Nothing,
}

/// The predicted times of ranks that predicted alike differ only as their clocks' calibrations
/// do (an entry learnt in this run is converted from clock ticks on each rank).
const SAME_TIME: f64 = 0.01;

/// Reduces each rank's proposal (the key's agreement hash, or None when its key has not warmed
/// up), its prediction (winner index and microseconds per call, or None) and whether it finds
/// a search worth its cost: a rank's own view of any of them never starts anything alone.
pub fn checkpoint(
    comm: &Comm,
    proposal: Option<u64>,
    predicted: Option<(usize, f64)>,
    worth_searching: bool,
) -> MpiResult<Checkpoint> {
    // Hashes are cut to 62 bits so that negating them (to get the minimum from MPI_MAX) cannot
    // overflow; 0 is "no proposal". A time's bits (never negative) order as the time does.
    let hash = proposal.map_or(0, |h| (h >> 2).max(1) as i64);
    let ready = i64::from(proposal.is_some());
    let winner = predicted.map_or(0, |(w, _)| w as i64 + 1);
    let time = predicted.map_or(0, |(_, us)| us.max(0.0).to_bits() as i64);
    let worth = i64::from(worth_searching);
    let [hash, ready, winner, time, worth] =
        comm.min_max_i64([hash, ready, winner, time, worth])?;
    let us = |bits: i64| f64::from_bits(bits as u64);
    Ok(match (ready.max, ready.min) {
        (0, _) => Checkpoint::Nothing,
        (_, 0) => Checkpoint::Partial,
        _ if hash.same_everywhere() => Checkpoint::Agreed {
            prediction: (winner.min > 0
                && winner.same_everywhere()
                && us(time.max) <= us(time.min) * (1.0 + SAME_TIME))
                .then(|| ((winner.min - 1) as usize, us(time.max))),
            search: worth.min == 1,
        },
        _ => Checkpoint::Disagreed,
    })
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

/// A decision's realised time per call, reduced as search estimates are (maximum over ranks).
pub fn realised(comm: &Comm, ticks: f64) -> MpiResult<f64> {
    let mut values = [ticks];
    comm.allreduce_max_f64(&mut values)?;
    Ok(values[0])
}
