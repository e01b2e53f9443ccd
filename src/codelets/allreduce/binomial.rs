//! `binomial`: a binomial-tree reduction to rank 0 (each parent combines its own subtree, lower
//! ranks, with its child's, higher ranks, so the rank order holds) and a binomial-tree broadcast.

use super::{TAG, combine_higher, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{MpiResult, Scratch};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "binomial",
    attributes: Attributes {
        partners: Partners::Tree,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    let (p, rank) = (comm.size, comm.rank);
    let mut scratch = Scratch::new(call.count, call.datatype)?;
    let incoming = scratch.buf();
    let mut mask = 1;
    while mask < p {
        if rank & mask != 0 {
            comm.send(&result, rank - mask, TAG)?;
            break;
        }
        if rank + mask < p {
            comm.recv(&incoming, rank + mask, TAG)?;
            combine_higher(&result, &incoming, call.op)?;
        }
        mask <<= 1;
    }
    // Broadcast: receive from the parent (rank without its lowest set bit), send to children.
    let mut mask = 1;
    while mask < p {
        if rank & mask != 0 {
            comm.recv(&result, rank - mask, TAG)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rank + mask < p {
            comm.send(&result, rank + mask, TAG)?;
        }
        mask >>= 1;
    }
    Ok(())
}
