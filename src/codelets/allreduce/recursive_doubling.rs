//! `recursive_doubling`: log2(p) exchange steps with partner rank XOR 2^k, each side combining
//! the two partial results lower half first. Other sizes are folded onto the largest power of
//! two: the first 2(p - 2^k) ranks pair up and the even one of each pair sits out.

use super::{TAG, combine_higher, combine_lower, fold_in, fold_out, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{MpiResult, Scratch};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::schedule::Fold;
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "recursive_doubling",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    let mut scratch = Scratch::new(call.count, call.datatype)?;
    let incoming = scratch.buf();
    let (rank, fold) = (comm.rank, Fold::new(comm.size));
    fold_in(comm, &fold, &result, &incoming, call.op)?;
    if let Some(v) = fold.virtual_rank(rank) {
        let mut mask = 1;
        while mask < fold.pow2 {
            let partner = v ^ mask;
            let peer = fold.real_rank(partner);
            comm.sendrecv(&result, peer, &incoming, peer, TAG)?;
            if partner < v {
                combine_lower(&incoming, &result, call.op)?;
            } else {
                combine_higher(&result, &incoming, call.op)?;
            }
            mask <<= 1;
        }
    }
    fold_out(comm, &fold, &result)
}
