//! The library's private duplicates of application communicators (kept per communicator by
//! `comms`).

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, MPI_Comm, comm_rank, comm_size};

/// A duplicate of `user` that reports errors as return codes (the caller invokes the
/// application's error handler on its own communicator). Collective over `user`.
pub fn duplicate(user: MPI_Comm) -> MpiResult<Comm> {
    let mut dup = user;
    // SAFETY: writes one handle; collective over `user`, as the caller arranges.
    check(unsafe { ffi::PMPI_Comm_dup(user, &mut dup) })?;
    // SAFETY: sets the error handler of our own communicator.
    check(unsafe { ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN) })?;
    Ok(Comm {
        raw: dup,
        rank: comm_rank(dup),
        size: comm_size(dup),
    })
}
