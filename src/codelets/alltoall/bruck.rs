//! `bruck`: Bruck's algorithm, ceil(log2 p) steps instead of p-1, each moving about half of all
//! blocks: good for many small blocks, wasteful for large ones.
//!
//! The blocks are packed (MPI_Pack) into one byte buffer rotated by the rank, so that slot i
//! holds the block for rank+i; in the step with distance 2^k the slots whose index has bit k set
//! go to rank+2^k and the same slots arrive from rank-2^k; at the end slot i holds the block from
//! rank-i, which is unpacked into its place. Intermediate ranks only forward bytes, so any pair
//! of datatypes works, and every rank agrees on the slot size: the bytes of one block.

use super::{TAG, block, block_bytes, pack_exact};
use crate::codelets::{Codelet, FirstError, Requirement};
use crate::mpi::datatype::{Buf, MpiResult, packed_buf, unpack};
use crate::mpi::{self, Alltoall, Comm};
use commtune_tune::schedule::{bruck_alltoall_slots, bruck_alltoall_source};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Alltoall> = Codelet {
    name: "bruck",
    attributes: Attributes {
        partners: Partners::Tree,
        uses_collectives: false,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Alltoall, comm: &Comm) -> MpiResult {
    let (p, rank) = (comm.size, comm.rank);
    let stride = usize::try_from(block_bytes(call)).unwrap_or(0);
    if stride == 0 {
        return Ok(());
    }
    let recv = Buf::new(call.recvbuf, call.recvcount, call.recvtype)?;
    // With MPI_IN_PLACE the outgoing blocks are in the receive buffer; all of them are packed
    // before anything is written there.
    let send = if mpi::is_in_place(call.sendbuf) {
        recv
    } else {
        Buf::new(call.sendbuf.cast_mut(), call.sendcount, call.sendtype)?
    };
    let mut slots = vec![0u8; stride * p as usize];
    for (i, slot) in slots.chunks_exact_mut(stride).enumerate() {
        pack_exact(&block(&send, (rank + i as i32) % p), slot)?;
    }
    let half = stride * (p as usize).div_ceil(2);
    let (mut outgoing, mut incoming) = (vec![0u8; half], vec![0u8; half]);
    let mut errors = FirstError::default();
    let mut distance = 1;
    while distance < p {
        let moved = bruck_alltoall_slots(p, distance);
        let len = moved.len() * stride;
        for (j, &i) in moved.iter().enumerate() {
            let at = i as usize * stride;
            outgoing[j * stride..(j + 1) * stride].copy_from_slice(&slots[at..at + stride]);
        }
        errors.keep(comm.sendrecv(
            &packed_buf(&mut outgoing[..len]),
            (rank + distance) % p,
            &packed_buf(&mut incoming[..len]),
            (rank - distance).rem_euclid(p),
            TAG,
        ));
        for (j, &i) in moved.iter().enumerate() {
            let at = i as usize * stride;
            slots[at..at + stride].copy_from_slice(&incoming[j * stride..(j + 1) * stride]);
        }
        distance <<= 1;
    }
    for (i, slot) in slots.chunks_exact(stride).enumerate() {
        errors.keep(unpack(
            slot,
            &block(&recv, bruck_alltoall_source(p, rank, i as i32)),
        ));
    }
    errors.result()
}
