//! The library's private duplicates of application communicators (kept per communicator by
//! `comms`).

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, MPI_Comm, comm_rank, comm_size};

/// A duplicate of `user` (the same group and ranks, a new context) that reports errors as return
/// codes (the caller invokes the application's error handler on its own communicator).
/// Collective over `user`. Made by MPI_Comm_split, not MPI_Comm_dup: a dup copies the
/// application's cached attributes, running its copy callbacks (and, when the duplicate is freed,
/// its delete callbacks) for a communicator it never made.
pub fn duplicate(user: MPI_Comm) -> MpiResult<Comm> {
    let mut dup = user;
    // SAFETY: writes one handle; collective over `user`, as the caller arranges. One color and
    // the rank as key keep the group and its order.
    check(unsafe { ffi::PMPI_Comm_split(user, 0, comm_rank(user), &mut dup) })?;
    // SAFETY: sets the error handler of our own communicator.
    check(unsafe { ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN) })?;
    Ok(Comm {
        raw: dup,
        rank: comm_rank(dup),
        size: comm_size(dup),
    })
}
