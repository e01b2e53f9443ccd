//! The library's private duplicates of application communicators (kept per communicator by
//! `comms`).

use std::ffi::c_int;

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, HandleBits, MPI_Comm, comm_free, comm_rank, comm_size};

/// A duplicate of `user` (the same group and ranks, a new context) that reports errors as return
/// codes (the caller invokes the application's error handler on its own communicator).
/// Collective over `user`. Made by MPI_Comm_split, not MPI_Comm_dup: a dup copies the
/// application's cached attributes, running its copy callbacks (and, when the duplicate is freed,
/// its delete callbacks) for a communicator it never made.
///
/// It fails on every rank where one rank does not `join` (its own limit), or where MPI has no
/// context left for it (MPICH has about 2000 per process): the caller then runs the application's
/// calls natively, so the split reports to no error handler of the application's, whose default
/// would abort the job (`errors_returned`).
pub fn duplicate(user: MPI_Comm, join: bool) -> MpiResult<Comm> {
    let mut dup = user;
    // A rank that does not join gets no communicator, and the others one without it.
    let color = if join { 0 } else { ffi::MPI_UNDEFINED };
    let split = super::errors_returned(user, || {
        // SAFETY: writes one handle; collective over `user`, as the caller arranges. One color
        // and the rank as key keep the group and its order.
        unsafe { ffi::PMPI_Comm_split(user, color, comm_rank(user), &mut dup) }
    });
    check(split)?;
    // SAFETY: reads a constant handle MPI set up at load time.
    let null = unsafe { ffi::RSMPI_COMM_NULL };
    if dup.bits() == null.bits() {
        return Err(ffi::MPI_ERR_COMM as c_int);
    }
    if comm_size(dup) != comm_size(user) {
        // Collective over the ranks that joined, which all see the same size.
        comm_free(dup);
        return Err(ffi::MPI_ERR_COMM as c_int);
    }
    // SAFETY: sets our own communicator's handler (it inherited what `user` had at the split,
    // MPI_ERRORS_RETURN unless the application's could not be set aside).
    unsafe { ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN) };
    Ok(Comm {
        raw: dup,
        rank: comm_rank(dup),
        size: comm_size(dup),
    })
}
