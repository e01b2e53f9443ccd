//! `pairwise_excl`: p-1 steps; in step s ranks rank and rank XOR s swap their blocks with one
//! MPI_Sendrecv, so every step is a perfect matching of exclusive pairs (power-of-two sizes,
//! where XOR stays inside the communicator).

use super::{Blocks, TAG};
use crate::codelets::{Codelet, FirstError, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Alltoall, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Alltoall> = Codelet {
    name: "pairwise_excl",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator, Requirement::PowerOfTwoSize],
    run: Some(run),
};

fn run(call: &Alltoall, comm: &Comm) -> MpiResult {
    let (p, rank) = (comm.size, comm.rank);
    let Some(mut blocks) = Blocks::new(call, rank, p)? else {
        return Ok(());
    };
    let mut errors = FirstError::default();
    errors.keep(blocks.keep_own(rank));
    for s in 1..p {
        let partner = rank ^ s;
        errors.keep(comm.sendrecv(
            &blocks.send(partner),
            partner,
            &blocks.recv(partner),
            partner,
            TAG,
        ));
    }
    errors.result()
}
