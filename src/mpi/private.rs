//! Private duplicates of application communicators, one per communicator, made on first use and
//! freed when the application frees its communicator.
//!
//! The duplicate hangs on the application's communicator as an attribute (see `watch`): MPI
//! calls our delete callback when that communicator is freed, and we free the duplicate.

use std::ffi::{c_int, c_void};
use std::sync::{LazyLock, OnceLock};

use dashmap::DashMap;
use mpi_sys as ffi;
use rustc_hash::FxBuildHasher;

use super::datatype::{MpiResult, check};
use super::watch::comm_keyval;
use super::{Comm, HandleBits, MPI_Comm, SUCCESS, comm_rank, comm_size};

static PRIVATE: LazyLock<DashMap<usize, Comm, FxBuildHasher>> = LazyLock::new(DashMap::default);
static KEYVAL: OnceLock<c_int> = OnceLock::new();

/// The private duplicate of `user`.
///
/// Creating it is collective over `user`: callers only ask from inside a collective call on
/// `user` that every rank makes with the same decision to use a codelet (DESIGN invariant 2).
pub fn private_comm(user: MPI_Comm) -> MpiResult<Comm> {
    if let Some(comm) = PRIVATE.get(&user.bits()) {
        return Ok(*comm);
    }
    let keyval = comm_keyval(&KEYVAL, forget)?;
    let mut dup = user;
    // SAFETY: writes one handle; collective over `user` as documented above.
    check(unsafe { ffi::PMPI_Comm_dup(user, &mut dup) })?;
    // Errors inside codelets come back as return codes; the application's own error handler is
    // invoked on its communicator by the caller.
    // SAFETY: sets the error handler of our own communicator.
    check(unsafe { ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN) })?;
    let comm = Comm {
        raw: dup,
        rank: comm_rank(dup),
        size: comm_size(dup),
    };
    PRIVATE.insert(user.bits(), comm);
    // SAFETY: the attribute value is the duplicate's handle bits, read back only by `forget`.
    check(unsafe { ffi::PMPI_Comm_set_attr(user, keyval, dup.bits() as *mut c_void) })?;
    Ok(comm)
}

/// The private duplicate of `user` if it was made already (never collective).
pub fn existing_private_comm(user: MPI_Comm) -> Option<Comm> {
    PRIVATE.get(&user.bits()).map(|c| *c)
}

/// The application freed its communicator: free ours.
extern "C" fn forget(
    user: MPI_Comm,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    if let Some((_, comm)) = PRIVATE.remove(&user.bits()) {
        let mut raw = comm.raw;
        // SAFETY: frees the duplicate this module created; the application is inside
        // MPI_Comm_free on `user` on every rank, so this collective free matches everywhere.
        unsafe { ffi::PMPI_Comm_free(&mut raw) };
    }
    SUCCESS
}
