//! MPI_Alltoall codelets.
//!
//! Every block has the same type signature on every rank (the standard requires it), so the
//! bytes of one block are the one size all ranks agree on; the counts and datatypes themselves
//! may differ between ranks and between the send and receive side. Codelets therefore address
//! blocks only as slices of the application's buffers in units of their datatype's extent
//! (`Blocks`), or as packed bytes (`bruck`).

mod bruck;
mod linear;
mod linear_sync;
mod pairwise;
mod pairwise_excl;

use std::ffi::c_int;

use commtune_report::Op;

use super::{Codelet, Facts, Operation, native};
use crate::mpi::datatype::{Buf, MpiResult, copy, pack, packed_buf};
use crate::mpi::{self, Alltoall, MPI_Comm};

/// Tag of alltoall codelet messages on the private communicator.
const TAG: i32 = 2;

static CODELETS: [Codelet<Alltoall>; 8] = [
    native(),
    linear::CODELET,
    linear_sync::CODELET_2,
    linear_sync::CODELET_4,
    linear_sync::CODELET_8,
    pairwise::CODELET,
    pairwise_excl::CODELET,
    bruck::CODELET,
];

impl Operation for Alltoall {
    const OP: Op = Op::Alltoall;

    fn codelets() -> &'static [Codelet<Self>] {
        &CODELETS
    }

    fn comm(&self) -> MPI_Comm {
        self.comm
    }

    fn facts(&self) -> Facts {
        let size = mpi::comm_size(self.comm);
        if mpi::is_intercomm(self.comm) {
            return Facts {
                size,
                intercomm: true,
                ..Facts::default()
            };
        }
        // Judged by bytes, which every rank agrees on, not by this rank's counts, which may
        // differ between ranks (a different datatype on each): a verdict that differed would run
        // a codelet on some ranks and native on others. Within the limit every count fits too
        // (a count exceeds the bytes only for empty datatypes, and then nothing moves), and so
        // does the largest message, `bruck`'s half of all blocks.
        let total = block_bytes(self).saturating_mul(i64::from(size));
        Facts {
            size,
            intercomm: false,
            counts_overflow_int: total > i64::from(c_int::MAX),
            bytes: total,
            ..Facts::default()
        }
    }

    fn native(&self) -> c_int {
        Alltoall::native(self)
    }
}

/// Bytes of data in one block: the same on every rank and on both sides (the receive side is
/// also meaningful with MPI_IN_PLACE).
fn block_bytes(call: &Alltoall) -> i64 {
    call.recvcount.saturating_mul(mpi::type_size(call.recvtype))
}

/// Block `i` of a buffer of blocks described by `first` (block 0).
fn block(first: &Buf, i: i32) -> Buf {
    first.slice(i64::from(i) * first.count, first.count)
}

/// The blocks of one call: where the block for each rank is and where each rank's block goes.
struct Blocks {
    /// Block 0 of the receive buffer.
    recv: Buf,
    source: Source,
}

enum Source {
    /// Block 0 of the application's send buffer.
    User(Buf),
    /// MPI_IN_PLACE: the outgoing blocks packed out of the receive buffer before anything
    /// arrives in it, `stride` bytes each (the own block stays where it is).
    Packed { bytes: Vec<u8>, stride: usize },
}

impl Blocks {
    /// The blocks of `call` for a rank of `comm_size` ranks; None when blocks are empty (then on
    /// every rank alike, so all skip the exchange together).
    fn new(call: &Alltoall, rank: i32, comm_size: i32) -> MpiResult<Option<Blocks>> {
        let stride = usize::try_from(block_bytes(call)).unwrap_or(0);
        if stride == 0 {
            return Ok(None);
        }
        let recv = Buf::new(call.recvbuf, call.recvcount, call.recvtype)?;
        let source = if mpi::is_in_place(call.sendbuf) {
            let mut bytes = vec![0u8; stride * comm_size as usize];
            for (i, slot) in bytes.chunks_exact_mut(stride).enumerate() {
                if i as i32 != rank {
                    pack_exact(&block(&recv, i as i32), slot)?;
                }
            }
            Source::Packed { bytes, stride }
        } else {
            Source::User(Buf::new(
                call.sendbuf.cast_mut(),
                call.sendcount,
                call.sendtype,
            )?)
        };
        Ok(Some(Blocks { recv, source }))
    }

    /// Where the block from `rank` goes.
    fn recv(&self, rank: i32) -> Buf {
        block(&self.recv, rank)
    }

    /// The block for `rank`. The buffer stays valid as long as `self`.
    fn send(&mut self, rank: i32) -> Buf {
        match &mut self.source {
            Source::User(first) => block(first, rank),
            Source::Packed { bytes, stride } => {
                let at = rank as usize * *stride;
                packed_buf(&mut bytes[at..at + *stride])
            }
        }
    }

    /// Puts this rank's own block in place (already there with MPI_IN_PLACE).
    fn keep_own(&mut self, rank: i32) -> MpiResult {
        match self.source {
            Source::User(first) => copy(&block(&first, rank), &self.recv(rank)),
            Source::Packed { .. } => Ok(()),
        }
    }
}

/// Packs `src` into `slot`, which must come out exactly full: packed blocks are sent as they
/// are and received as the other side's datatype, so their length must be the block's bytes.
fn pack_exact(src: &Buf, slot: &mut [u8]) -> MpiResult {
    if pack(src, slot)? == slot.len() {
        Ok(())
    } else {
        Err(mpi_sys::MPI_ERR_INTERN as c_int)
    }
}
