//! The only place that talks across ranks about tuning decisions: one small allreduce on the
//! private communicator per checkpoint, round or drift check, at the same instance on every rank.
//! Every outcome is computed from the reduced values, so it is the same everywhere.

use crate::mpi::Comm;
use crate::mpi::datatype::MpiResult;
use commtune_tune::Agreed;

/// What a checkpoint found about the key each rank is at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Checkpoint {
    /// Every rank is at the same key and it is ready to be tuned.
    Agreed,
    /// Every rank proposed a key, but not the same one.
    Disagreed,
    /// Some ranks proposed a key, others had none ready.
    Partial,
    /// No rank had a key ready.
    Nothing,
}

/// Reduces each rank's proposal (the key's agreement hash, or None when its key is not ready).
pub fn checkpoint(comm: &Comm, proposal: Option<u64>) -> MpiResult<Checkpoint> {
    // Hashes are cut to 62 bits so that negating them (to get the minimum from MPI_MAX) cannot
    // overflow; 0 is "no proposal".
    let hash = proposal.map_or(0, |h| (h >> 2).max(1) as i64);
    let ready = i64::from(proposal.is_some());
    let [hash, ready] = comm.min_max_i64([hash, ready])?;
    Ok(match (ready.max, ready.min) {
        (0, _) => Checkpoint::Nothing,
        (_, 0) => Checkpoint::Partial,
        _ if hash.same_everywhere() => Checkpoint::Agreed,
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
