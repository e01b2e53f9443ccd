//! `recursive_doubling`: log2(p) steps; in step k ranks rank and rank XOR 2^k swap all the
//! blocks their group of 2^k ranks has gathered so far (one indexed datatype per side), so the
//! data doubles every step. Power-of-two sizes only.

use super::exchange;
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::MpiResult;
use crate::mpi::{Allgatherv, Comm};
use commtune_tune::schedule::recursive_doubling_allgather;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allgatherv> = Codelet {
    name: "recursive_doubling",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator, Requirement::PowerOfTwoSize],
    run: Some(run),
};

fn run(call: &Allgatherv, comm: &Comm) -> MpiResult {
    exchange(call, comm, recursive_doubling_allgather)
}
