//! `pairwise`: p-1 steps; in step s every rank sends to rank+s and receives from rank-s with one
//! MPI_Sendrecv. One message each way at a time, any communicator size.

use super::{Blocks, TAG};
use crate::codelets::{Codelet, FirstError, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Alltoall, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Alltoall> = Codelet {
    name: "pairwise",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
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
        let (to, from) = ((rank + s) % p, (rank - s).rem_euclid(p));
        errors.keep(comm.sendrecv(&blocks.send(to), to, &blocks.recv(from), from, TAG));
    }
    errors.result()
}
