//! `linear`: every rank sends its vector to rank 0, which reduces them in rank order and sends
//! the result back to each rank (ADCL's own reduce + broadcast).

use super::{TAG, combine_higher, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{MpiResult, Scratch};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "linear",
    attributes: Attributes {
        partners: Partners::All,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    if comm.rank != 0 {
        comm.send(&result, 0, TAG)?;
        return comm.recv(&result, 0, TAG);
    }
    let mut scratch = Scratch::new(call.count, call.datatype)?;
    let incoming = scratch.buf();
    for from in 1..comm.size {
        comm.recv(&incoming, from, TAG)?;
        combine_higher(&result, &incoming, call.op)?;
    }
    for to in 1..comm.size {
        comm.send(&result, to, TAG)?;
    }
    Ok(())
}
