//! MPI_Init, MPI_Init_thread, MPI_Finalize, MPI_Abort and MPI_Op_free.

use std::ffi::{c_char, c_int};

use crate::keys::{self, Handle};
use crate::mpi::{HandleBits, MPI_Comm, MPI_Op};
use crate::{halo, mpi, runtime};

/// MPI_Init (`required` < 0) or MPI_Init_thread.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_init(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let rc = if required < 0 {
        mpi::init(argc, argv)
    } else {
        mpi::init_thread(argc, argv, required, provided)
    };
    if rc == mpi::SUCCESS && runtime::enabled() {
        runtime::initialized();
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_finalize() -> c_int {
    halo::post_deferred();
    if runtime::enabled() {
        halo::finalizing();
    }
    let gathered = runtime::finalizing();
    let rc = mpi::finalize();
    runtime::finalized(gathered);
    rc
}

/// MPI_Abort: this rank's report first (without communication, and waiting for it a bounded
/// time only), then the abort.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_abort(comm: MPI_Comm, code: c_int) -> c_int {
    if runtime::enabled() {
        runtime::aborting(code);
    }
    mpi::abort(comm, code)
}

/// MPI_Op_free. Operations have no attributes to hang a delete callback on, so the freeing call
/// itself tells the keys described with the operation: MPI may hand its handle out again for an
/// operation that is not commutative.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_op_free(op: *mut MPI_Op) -> c_int {
    halo::post_deferred();
    // SAFETY: MPI requires a pointer to a valid handle; a null one is left to MPI to report.
    if runtime::enabled()
        && let Some(op) = unsafe { op.as_ref() }
    {
        keys::freed(Handle::Op(op.bits()));
    }
    mpi::op_free(op)
}
