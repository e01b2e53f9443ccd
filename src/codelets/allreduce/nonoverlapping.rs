//! `nonoverlapping`: the MPI library's MPI_Reduce to rank 0 followed by its MPI_Bcast.

use super::start;
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{Buf, MpiResult};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "nonoverlapping",
    attributes: Attributes {
        partners: Partners::Tree,
        uses_collectives: true,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    if comm.rank == 0 {
        comm.reduce(None, &result, call.op, 0)?;
    } else {
        // The receive buffer is not used off the root; MPI forbids it to alias the send buffer.
        let unused = Buf {
            ptr: std::ptr::null_mut(),
            ..result
        };
        comm.reduce(Some(&result), &unused, call.op, 0)?;
    }
    comm.bcast(&result, 0)
}
