//! `ring`: the vector is cut into one segment per rank; p-1 steps around the ring reduce each
//! segment on one rank (reduce-scatter), p-1 more steps pass the reduced segments on
//! (allgather). Bandwidth-optimal for long vectors; reduces in ring order, hence commutative
//! operations only.

use super::{TAG, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{MpiResult, Scratch, reduce_local};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::schedule::segment;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "ring",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator, Requirement::Commutative],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    let (p, rank) = (comm.size, comm.rank);
    if p == 1 {
        return Ok(());
    }
    let part = |i: i32| {
        let (first, len) = segment(call.count, p, i.rem_euclid(p));
        result.slice(first, len)
    };
    let mut scratch = Scratch::new(segment(call.count, p, 0).1, call.datatype)?;
    let incoming = scratch.buf();
    let (right, left) = ((rank + 1) % p, (rank + p - 1) % p);
    // After step s, segment rank-s-1 holds the operands of s+2 ranks.
    for s in 0..p - 1 {
        let (send, recv) = (part(rank - s), part(rank - s - 1));
        let into = incoming.with_count(recv.count);
        comm.sendrecv(&send, right, &into, left, TAG)?;
        reduce_local(&into, &recv, call.op)?;
    }
    // Rank r now owns the complete segment r+1.
    for s in 0..p - 1 {
        comm.sendrecv(&part(rank + 1 - s), right, &part(rank - s), left, TAG)?;
    }
    Ok(())
}
