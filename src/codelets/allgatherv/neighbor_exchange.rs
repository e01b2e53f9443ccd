//! `neighbor_exchange`: the algorithm of Chen et al. as in Open MPI's
//! coll_base_allgatherv_intra_neighborexchange. Every rank alternates between its two ring
//! neighbours; the first step swaps one block, each later one forwards the pair of blocks
//! received in the step before, so p/2 steps suffice (half of `ring`'s). Even sizes only.

use super::exchange;
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Allgatherv, Comm};
use commtune_tune::schedule::neighbor_exchange_allgather;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allgatherv> = Codelet {
    name: "neighbor_exchange",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator, Requirement::EvenSize],
    run: Some(run),
};

fn run(call: &Allgatherv, comm: &Comm) -> MpiResult {
    exchange(call, comm, neighbor_exchange_allgather)
}
