//! `ring`: p-1 steps around the ring; in step s every rank passes block rank-s to its right
//! neighbour and receives block rank-s-1 from its left one. Bandwidth-optimal, one neighbour
//! each way: good for large blocks.

use super::exchange;
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Allgatherv, Comm};
use commtune_tune::schedule::ring_allgather;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allgatherv> = Codelet {
    name: "ring",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allgatherv, comm: &Comm) -> MpiResult {
    exchange(call, comm, ring_allgather)
}
