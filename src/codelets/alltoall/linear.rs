//! `linear`: every receive and every send posted at once (MPI_Irecv, MPI_Isend), then one
//! MPI_Waitall. Lets the network overlap everything; floods it for large communicators.

use super::{Blocks, TAG};
use crate::codelets::{Codelet, FirstError, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Alltoall, Comm, Requests};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Alltoall> = Codelet {
    name: "linear",
    attributes: Attributes {
        partners: Partners::All,
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
    let mut requests = Requests::new(0);
    let mut errors = FirstError::default();
    // Receives first, so that most messages find theirs posted; both in distance order so that
    // everyone starts with its nearest neighbours rather than all with rank 0.
    for s in 1..p {
        let from = (rank - s).rem_euclid(p);
        if let Some(r) = errors.keep(comm.irecv(&blocks.recv(from), from, TAG)) {
            requests.push(r);
        }
    }
    for s in 1..p {
        let to = (rank + s) % p;
        if let Some(r) = errors.keep(comm.isend(&blocks.send(to), to, TAG)) {
            requests.push(r);
        }
    }
    errors.keep(blocks.keep_own(rank));
    // MPI_Waitall completes every request, failed ones included.
    errors.keep(requests.waitall());
    errors.result()
}
