//! Private duplicates of application communicators, one per communicator, made on first use and
//! freed when the application frees its communicator.
//!
//! The duplicate hangs on the application's communicator as an attribute: MPI calls our delete
//! callback when that communicator is freed (from C, Fortran or anything else), so no MPI_Comm_free
//! wrapper is needed, and a handle value reused for a new communicator never finds a stale entry.

use std::ffi::{c_int, c_void};
use std::sync::{LazyLock, OnceLock};

use dashmap::DashMap;
use mpi_sys as ffi;
use rustc_hash::FxBuildHasher;

use super::datatype::{MpiResult, check};
use super::{Comm, HandleBits, MPI_Comm, SUCCESS, comm_rank, comm_size};

static PRIVATE: LazyLock<DashMap<usize, Comm, FxBuildHasher>> = LazyLock::new(DashMap::default);
static KEYVAL: OnceLock<c_int> = OnceLock::new();
/// What to call when a watched communicator is freed (with its handle bits).
type OnFree = fn(usize);
/// Communicators the tuner watches.
static WATCHED: LazyLock<DashMap<usize, OnFree, FxBuildHasher>> = LazyLock::new(DashMap::default);
static WATCH_KEYVAL: OnceLock<c_int> = OnceLock::new();

/// The private duplicate of `user`.
///
/// Creating it is collective over `user`: callers only ask from inside a collective call on
/// `user` that every rank makes with the same decision to use a codelet (DESIGN invariant 2).
pub fn private_comm(user: MPI_Comm) -> MpiResult<Comm> {
    if let Some(comm) = PRIVATE.get(&user.bits()) {
        return Ok(*comm);
    }
    let keyval = keyval(&KEYVAL, forget)?;
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

/// Calls `on_free(user's handle bits)` when the application frees `user` (a local call: it
/// only hangs an attribute on the communicator). Once per communicator; later calls do nothing.
pub fn watch(user: MPI_Comm, on_free: OnFree) -> MpiResult {
    if WATCHED.contains_key(&user.bits()) {
        return Ok(());
    }
    let keyval = keyval(&WATCH_KEYVAL, unwatch)?;
    WATCHED.insert(user.bits(), on_free);
    // SAFETY: the attribute value is unused; the callback only reads the handle.
    check(unsafe { ffi::PMPI_Comm_set_attr(user, keyval, std::ptr::null_mut()) })
}

extern "C" fn unwatch(
    user: MPI_Comm,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    if let Some((bits, on_free)) = WATCHED.remove(&user.bits()) {
        on_free(bits);
    }
    SUCCESS
}

type DeleteFn = extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;

fn keyval(slot: &OnceLock<c_int>, on_delete: DeleteFn) -> MpiResult<c_int> {
    if let Some(&k) = slot.get() {
        return Ok(k);
    }
    let mut keyval = 0;
    // SAFETY: registers two callbacks with the signatures MPI expects; writes one int.
    check(unsafe {
        ffi::PMPI_Comm_create_keyval(
            Some(not_copied),
            Some(on_delete),
            &mut keyval,
            std::ptr::null_mut(),
        )
    })?;
    Ok(*slot.get_or_init(|| keyval))
}

/// A duplicate of the application's communicator gets its own private communicator when it is
/// first used, not a copy of this one.
extern "C" fn not_copied(
    _old: MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _value_in: *mut c_void,
    _value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer to copy callbacks.
    unsafe { *flag = 0 };
    SUCCESS
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
