//! `rabenseifner`: reduce-scatter by recursive halving (each step keeps half of the segments and
//! sends the other half to partner XOR 2^k), then allgather by recursive doubling. Other sizes
//! are folded onto the largest power of two first. Reduces out of rank order: commutative
//! operations only.

use super::{TAG, fold_in, fold_out, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{Buf, MpiResult, Scratch, reduce_local};
use crate::mpi::{Allreduce, Comm};
use commtune_tune::schedule::{Fold, segment};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allreduce> = Codelet {
    name: "rabenseifner",
    attributes: Attributes {
        partners: Partners::Pair,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator, Requirement::Commutative],
    run: Some(run),
};

fn run(call: &Allreduce, comm: &Comm) -> MpiResult {
    let result = start(call)?;
    let mut scratch = Scratch::new(call.count, call.datatype)?;
    let incoming = scratch.buf();
    let (rank, fold) = (comm.rank, Fold::new(comm.size));
    fold_in(comm, &fold, &result, &incoming, call.op)?;
    if let Some(v) = fold.virtual_rank(rank) {
        // Segments [lo, hi) of `pow2` equal parts of the vector.
        let range = |lo: i32, hi: i32| -> Buf {
            let first = segment(call.count, fold.pow2, lo).0;
            let end = if hi == fold.pow2 {
                call.count
            } else {
                segment(call.count, fold.pow2, hi).0
            };
            result.slice(first, end - first)
        };
        let (mut lo, mut hi) = (0, fold.pow2);
        let mut mask = fold.pow2 / 2;
        while mask > 0 {
            let peer = fold.real_rank(v ^ mask);
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if v & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let kept = range(keep.0, keep.1);
            let into = incoming.with_count(kept.count);
            comm.sendrecv(&range(give.0, give.1), peer, &into, peer, TAG)?;
            reduce_local(&into, &kept, call.op)?;
            (lo, hi) = keep;
            mask /= 2;
        }
        // v owns segment v; double the owned range each step.
        let mut mask = 1;
        while mask < fold.pow2 {
            let peer = fold.real_rank(v ^ mask);
            let mine_lo = v & !(mask - 1);
            let theirs_lo = mine_lo ^ mask;
            comm.sendrecv(
                &range(mine_lo, mine_lo + mask),
                peer,
                &range(theirs_lo, theirs_lo + mask),
                peer,
                TAG,
            )?;
            mask *= 2;
        }
    }
    fold_out(comm, &fold, &result)
}
