//! `linear_sync2`, `linear_sync4`, `linear_sync8`: nonblocking like `linear`, but at most K
//! requests in flight; whenever one completes the next is posted (MPI_Waitany). Throttling
//! keeps the network and the MPI library from drowning in messages on large communicators.
//!
//! The operations are posted in the order receive from rank-1, send to rank+1, receive from
//! rank-2, send to rank+2, ... This cannot deadlock for K >= 2: take the outstanding operation
//! with the smallest distance on any rank; its partner operation has the same distance, and if
//! the partner has not posted it yet, the partner's K outstanding operations all come earlier in
//! its order, so at least one of them has a smaller distance, a contradiction.

use super::{Blocks, TAG};
use crate::codelets::{Codelet, FirstError, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Alltoall, Comm, Requests};
use commtune_tune::{Attributes, Partners};

const fn codelet(name: &'static str, run: fn(&Alltoall, &Comm) -> MpiResult) -> Codelet<Alltoall> {
    Codelet {
        name,
        attributes: Attributes {
            partners: Partners::All,
            uses_collectives: false,
        },
        requires: &[Requirement::Intracommunicator],
        run: Some(run),
    }
}

pub const CODELET_2: Codelet<Alltoall> = codelet("linear_sync2", |call, comm| run(call, comm, 2));
pub const CODELET_4: Codelet<Alltoall> = codelet("linear_sync4", |call, comm| run(call, comm, 4));
pub const CODELET_8: Codelet<Alltoall> = codelet("linear_sync8", |call, comm| run(call, comm, 8));

fn run(call: &Alltoall, comm: &Comm, in_flight: usize) -> MpiResult {
    let (p, rank) = (comm.size, comm.rank);
    let Some(mut blocks) = Blocks::new(call, rank, p)? else {
        return Ok(());
    };
    blocks.keep_own(rank)?;
    let total = 2 * (p as usize - 1);
    // Operation 2(s-1) receives from rank-s, operation 2(s-1)+1 sends to rank+s.
    let mut post = |op: usize| {
        let s = (op / 2) as i32 + 1;
        if op.is_multiple_of(2) {
            let from = (rank - s).rem_euclid(p);
            comm.irecv(&blocks.recv(from), from, TAG)
        } else {
            let to = (rank + s) % p;
            comm.isend(&blocks.send(to), to, TAG)
        }
    };
    let mut errors = FirstError::default();
    // Fills `slot` with the next operation that could be posted; false when none is left.
    let mut refill = |slots: &mut Requests, slot: usize, next: &mut usize| {
        while *next < total {
            *next += 1;
            if let Some(request) = errors.keep(post(*next - 1)) {
                slots.set(slot, request);
                return true;
            }
        }
        false
    };
    let width = in_flight.min(total);
    let mut slots = Requests::new(width);
    let mut next = 0;
    for slot in 0..width {
        refill(&mut slots, slot, &mut next);
    }
    let mut completed = FirstError::default();
    while let Some((done, outcome)) = slots.waitany() {
        completed.keep(outcome);
        refill(&mut slots, done, &mut next);
    }
    errors.result().and(completed.result())
}
