//! MPI_Allgatherv codelets.
//!
//! Block i of the result (rank i's contribution) is recvcounts[i] elements of recvtype at
//! displs[i] extents after the receive buffer; blocks may come in any order with gaps between
//! them, and only their bytes may be written. A block has the same type signature on every rank,
//! but counts, displacements and datatypes may differ between ranks, so codelets address blocks
//! only through `Gathered`: as slices of the receive buffer, or several at once through an indexed
//! datatype that lists them in the order both sides of a message agree on.

mod bruck;
mod linear;
mod neighbor_exchange;
mod recursive_doubling;
mod ring;

use std::ffi::c_int;

use commtune_report::Op;

use super::{Codelet, Facts, FirstError, Operation, native};
use crate::mpi::datatype::{Buf, Indexed, MpiResult, copy};
use crate::mpi::{self, Allgatherv, Comm, MPI_Comm};
use commtune_tune::schedule::Exchange;

/// Tag of allgatherv codelet messages on the private communicator.
const TAG: i32 = 3;

static CODELETS: [Codelet<Allgatherv>; 6] = [
    native(),
    linear::CODELET,
    ring::CODELET,
    recursive_doubling::CODELET,
    bruck::CODELET,
    neighbor_exchange::CODELET,
];

impl Operation for Allgatherv {
    const OP: Op = Op::Allgatherv;

    fn codelets() -> &'static [Codelet<Self>] {
        &CODELETS
    }

    fn comm(&self) -> MPI_Comm {
        self.comm
    }

    fn facts(&self) -> Facts {
        let size = mpi::comm_size(self.comm);
        if mpi::is_intercomm(self.comm) {
            // The arrays have one entry per rank of the remote group: not read here at all.
            return Facts {
                size,
                intercomm: true,
                ..Facts::default()
            };
        }
        // Judged by the bytes of the result, which every rank agrees on, not by this rank's
        // counts and displacements, which may differ between ranks: a verdict that differed would
        // run a codelet on some ranks and native on others. Within the limit every count fits
        // (counts exceed bytes only for empty datatypes, and then nothing moves); displacements
        // never need to fit (`Indexed` and `linear` take any).
        let total = total_bytes(self, size);
        Facts {
            size,
            intercomm: false,
            counts_overflow_int: total > i64::from(c_int::MAX),
            bytes: total,
            ..Facts::default()
        }
    }

    fn native(&self) -> c_int {
        Allgatherv::native(self)
    }
}

/// Bytes of the whole result (saturating): the same on every rank.
fn total_bytes(call: &Allgatherv, size: i32) -> i64 {
    let elements = (0..size.max(0) as usize)
        .map(|i| call.recvcounts.get(i).max(0))
        .fold(0i64, i64::saturating_add);
    elements.saturating_mul(mpi::type_size(call.recvtype))
}

/// The result buffer of one call and where each rank's block lies in it.
struct Gathered {
    /// The receive buffer as elements of recvtype (count unused).
    base: Buf,
    counts: Vec<i64>,
    displs: Vec<i64>,
}

impl Gathered {
    /// The result of `call` for `size` ranks; None when it has no bytes at all (then on every
    /// rank alike, so all skip the exchange together).
    fn new(call: &Allgatherv, size: i32) -> MpiResult<Option<Gathered>> {
        if total_bytes(call, size) == 0 {
            return Ok(None);
        }
        let n = size as usize;
        Ok(Some(Gathered {
            base: Buf::new(call.recvbuf, 0, call.recvtype)?,
            counts: (0..n).map(|i| call.recvcounts.get(i)).collect(),
            displs: (0..n).map(|i| call.displs.get(i)).collect(),
        }))
    }

    /// The block of rank `i`.
    fn block(&self, i: i32) -> Buf {
        let i = i as usize;
        self.base.slice(self.displs[i], self.counts[i])
    }

    fn int_counts(&self) -> MpiResult<Vec<c_int>> {
        self.counts
            .iter()
            .map(|&c| c_int::try_from(c).map_err(|_| mpi_sys::MPI_ERR_COUNT as c_int))
            .collect()
    }

    /// The blocks of `ranks`, in this order, as one buffer.
    fn select(&self, ranks: &[i32]) -> MpiResult<Selection> {
        if let [only] = ranks {
            return Ok(Selection {
                buf: self.block(*only),
                _datatype: None,
            });
        }
        let counts = ranks
            .iter()
            .map(|&r| {
                c_int::try_from(self.counts[r as usize])
                    .map_err(|_| mpi_sys::MPI_ERR_COUNT as c_int)
            })
            .collect::<MpiResult<Vec<c_int>>>()?;
        let displs: Vec<i64> = ranks.iter().map(|&r| self.displs[r as usize]).collect();
        let datatype = Indexed::new(&counts, &displs, self.base.datatype)?;
        Ok(Selection {
            buf: Buf::new(self.base.ptr, 1, datatype.datatype())?,
            _datatype: Some(datatype),
        })
    }
}

/// Some blocks of the result as one buffer: the block itself, or one element of an indexed
/// datatype over the receive buffer, which lives (and is freed) with the selection.
struct Selection {
    buf: Buf,
    _datatype: Option<Indexed>,
}

/// Puts this rank's own block into the result (already there with MPI_IN_PLACE).
fn start(call: &Allgatherv, result: &Gathered, rank: i32) -> MpiResult {
    // An empty own block needs no copy, and its send count may be anything for an empty
    // datatype.
    if mpi::is_in_place(call.sendbuf) || result.counts[rank as usize] == 0 {
        return Ok(());
    }
    let send = Buf::new(call.sendbuf.cast_mut(), call.sendcount, call.sendtype)?;
    copy(&send, &result.block(rank))
}

/// Runs an allgather schedule: each step one MPI_Sendrecv of the listed blocks.
fn exchange(call: &Allgatherv, comm: &Comm, schedule: fn(i32, i32) -> Vec<Exchange>) -> MpiResult {
    let Some(result) = Gathered::new(call, comm.size)? else {
        return Ok(());
    };
    let mut errors = FirstError::default();
    errors.keep(start(call, &result, comm.rank));
    for step in schedule(comm.size, comm.rank) {
        // Selections only fail when MPI runs out of datatypes: then the schedule cannot go on.
        let (send, recv) = (result.select(&step.send)?, result.select(&step.recv)?);
        errors.keep(comm.sendrecv(&send.buf, step.to, &recv.buf, step.from, TAG));
    }
    errors.result()
}
