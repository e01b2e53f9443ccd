//! `linear`: the MPI library's MPI_Gatherv of all blocks to rank 0, then its MPI_Bcast of the
//! whole result as one element of an indexed datatype that covers exactly the blocks (the gaps
//! between them stay untouched).

use std::ffi::c_int;

use super::{Gathered, start};
use crate::codelets::{Codelet, Requirement};
use crate::mpi::datatype::{Buf, MpiResult, Scratch, copy};
use crate::mpi::{self, Allgatherv, Comm};
use commtune_tune::{Attributes, Partners};

pub const CODELET: Codelet<Allgatherv> = Codelet {
    name: "linear",
    attributes: Attributes {
        partners: Partners::All,
        uses_collectives: true,
    },
    requires: &[Requirement::Intracommunicator],
    run: Some(run),
};

fn run(call: &Allgatherv, comm: &Comm) -> MpiResult {
    let (p, rank) = (comm.size, comm.rank);
    let Some(result) = Gathered::new(call, p)? else {
        return Ok(());
    };
    let counts = result.int_counts()?;
    if rank == 0 {
        start(call, &result, rank)?;
        gather_at_root(comm, &result, &counts)?;
    } else {
        // The own block goes out from where the application has it: the broadcast fills in the
        // whole result, this block included. (An empty block is sent as zero elements of
        // recvtype: its send count may be anything for an empty datatype.)
        let own = if mpi::is_in_place(call.sendbuf) || result.counts[rank as usize] == 0 {
            result.block(rank)
        } else {
            Buf::new(call.sendbuf.cast_mut(), call.sendcount, call.sendtype)?
        };
        // Counts and displacements are significant only at the root.
        comm.gatherv(Some(&own), &result.base, &counts, &counts, 0)?;
    }
    let all: Vec<i32> = (0..p).collect();
    comm.bcast(&result.select(&all)?.buf, 0)
}

/// The root's side of the MPI_Gatherv: straight into the result, its own block in place.
fn gather_at_root(comm: &Comm, result: &Gathered, counts: &[c_int]) -> MpiResult {
    let displs: Option<Vec<c_int>> = result
        .displs
        .iter()
        .map(|&d| c_int::try_from(d).ok())
        .collect();
    if let Some(displs) = displs {
        return comm.gatherv(None, &result.base, counts, &displs, 0);
    }
    // Displacements beyond int (only in the MPI-4 large-count call), which MPI_Gatherv cannot
    // take: gather the blocks back to back into a scratch buffer, then copy each into place.
    // The offsets fit: the elements are no more than the result's bytes (Facts).
    let mut offsets = Vec::with_capacity(counts.len());
    let mut total: c_int = 0;
    for &c in counts {
        offsets.push(total);
        total = total
            .checked_add(c)
            .ok_or(mpi_sys::MPI_ERR_COUNT as c_int)?;
    }
    let mut scratch = Scratch::new(i64::from(total), result.base.datatype)?;
    let gathered = scratch.buf();
    comm.gatherv(Some(&result.block(0)), &gathered, counts, &offsets, 0)?;
    for i in 1..counts.len() {
        let block = gathered.slice(i64::from(offsets[i]), i64::from(counts[i]));
        copy(&block, &result.block(i as i32))?;
    }
    Ok(())
}
