//! MPI_Allreduce codelets.
//!
//! Every codelet first puts this rank's input into the result buffer and reduces there, with
//! MPI_Reduce_local on the application's datatype (derived datatypes included). Operands are
//! always combined lower ranks first, so non-commutative operations keep the rank order the
//! standard requires wherever a codelet allows them, and both partners of an exchange compute
//! bitwise the same value: every rank ends with identical bytes.

mod binomial;
mod linear;
mod nonoverlapping;
mod rabenseifner;
mod recursive_doubling;
mod ring;

use std::ffi::c_int;

use commtune_report::Op;

use super::{Codelet, Facts, Operation, native};
use crate::mpi::datatype::{Buf, MpiResult, copy, is_commutative, reduce_local};
use crate::mpi::{self, Allreduce, Comm, MPI_Comm, MPI_Op};
use commtune_tune::schedule::Fold;

/// Tag of allreduce codelet messages on the private communicator.
const TAG: i32 = 1;

static CODELETS: [Codelet<Allreduce>; 7] = [
    native(),
    linear::CODELET,
    nonoverlapping::CODELET,
    recursive_doubling::CODELET,
    ring::CODELET,
    rabenseifner::CODELET,
    binomial::CODELET,
];

impl Operation for Allreduce {
    const OP: Op = Op::Allreduce;

    fn codelets() -> &'static [Codelet<Self>] {
        &CODELETS
    }

    fn comm(&self) -> MPI_Comm {
        self.comm
    }

    fn facts(&self) -> Facts {
        Facts {
            size: mpi::comm_size(self.comm),
            intercomm: mpi::is_intercomm(self.comm),
            commutative: is_commutative(self.op),
            counts_overflow_int: self.count > i64::from(c_int::MAX),
            bytes: self.count.saturating_mul(mpi::type_size(self.datatype)),
        }
    }

    fn native(&self) -> c_int {
        Allreduce::native(self)
    }
}

/// The application's result buffer, holding this rank's input (copied from the send buffer
/// unless the call is in place).
fn start(call: &Allreduce) -> MpiResult<Buf> {
    let result = Buf::new(call.recvbuf, call.count, call.datatype)?;
    if !mpi::is_in_place(call.sendbuf) {
        copy(
            &Buf::new(call.sendbuf.cast_mut(), call.count, call.datatype)?,
            &result,
        )?;
    }
    Ok(result)
}

/// Folds the communicator onto the largest power of two (see `Fold`): the even rank of each of
/// the first pairs hands its vector to the odd one, which combines them in rank order.
fn fold_in(comm: &Comm, fold: &Fold, result: &Buf, incoming: &Buf, op: MPI_Op) -> MpiResult {
    if comm.rank >= fold.paired {
        return Ok(());
    }
    if comm.rank % 2 == 0 {
        comm.send(result, comm.rank + 1, TAG)
    } else {
        comm.recv(incoming, comm.rank - 1, TAG)?;
        combine_lower(incoming, result, op)
    }
}

/// Gives the result to the ranks that sat out of the power-of-two part.
fn fold_out(comm: &Comm, fold: &Fold, result: &Buf) -> MpiResult {
    if comm.rank >= fold.paired {
        return Ok(());
    }
    if comm.rank % 2 == 1 {
        comm.send(result, comm.rank - 1, TAG)
    } else {
        comm.recv(result, comm.rank + 1, TAG)
    }
}

/// `mine = mine op higher`, where `higher` holds the operands of higher ranks; `higher` is
/// overwritten.
fn combine_higher(mine: &Buf, higher: &Buf, op: MPI_Op) -> MpiResult {
    reduce_local(mine, higher, op)?;
    copy(higher, mine)
}

/// `mine = lower op mine`, where `lower` holds the operands of lower ranks.
fn combine_lower(lower: &Buf, mine: &Buf, op: MPI_Op) -> MpiResult {
    reduce_local(lower, mine, op)
}
