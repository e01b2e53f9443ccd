//! `bruck`: Bruck's allgather for any size; ceil(log2 p) steps, in the step with distance d
//! every rank sends the blocks it holds (its own and the d-1 after it) to rank-d and receives
//! the next d from rank+d. The blocks go straight to their places through indexed datatypes, so
//! the final rotation of the textbook version is not needed.

use super::exchange;
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Allgatherv, Comm};
use commtune_tune::schedule::bruck_allgather;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allgatherv> = Codelet {
    name: "bruck",
    attributes: Attributes {
        partners: Partners::Tree,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allgatherv, comm: &Comm) -> MpiResult {
    exchange(call, comm, bruck_allgather)
}
