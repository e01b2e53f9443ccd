//! The library's life in the process: loading (in every process it is preloaded into, launchers
//! included), MPI_Init and MPI_Init_thread, MPI_Finalize (the report), MPI_Abort (this rank's
//! partial report), the exit of a process that never finalized (the fallback report), and
//! MPI_Op_free (operations have no attribute to watch).

use std::ffi::{c_char, c_int};
use std::sync::mpsc;
use std::time::Duration;

use crate::keys::{self, Handle};
use crate::mpi::{HandleBits, MPI_Comm, MPI_Op};
use crate::say::say;
use crate::{codelets, comms, config, halo, mpi, report, runtime, site, tuner};

/// The library constructor: runs in every process the library is loaded into (launchers and
/// proxies too, which never initialise MPI).
#[ctor::ctor(unsafe)]
fn load() {
    mpi::refuse_other_mpi();
    let (config, problems) = config::parse(std::env::vars_os(), codelets::names);
    runtime::set_config(config, problems);
    // The same order on every rank: the agreement frees communicators of its own.
    comms::on_free(keys::comm_freed);
    comms::on_free(codelets::halo::persistent::comm_freed);
    comms::on_free(tuner::comm_freed);
    comms::on_free(halo::comm_freed);
    mpi::at_exit(at_exit);
}

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
    // Every rank is inside MPI_Init: the private duplicate of MPI_COMM_WORLD that the at-exit
    // fallback needs is made now (collective).
    if rc == mpi::SUCCESS
        && runtime::enabled()
        && let Some(process) = runtime::started()
    {
        let _ = crate::comms::private(mpi::comm_world());
        prepare();
        tuner::knowledge::start(process);
        crate::halo::history::start(process);
    }
    rc
}

/// MPI_Init (`required` < 0) or MPI_Init_thread through MPICH's `use mpi_f08` bindings
/// (shim/fortran_mpich.c), which call PMPI_Init directly and make most other calls unseen too.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_init_f08(required: c_int, provided: *mut c_int) -> c_int {
    mpi::mpich_f08_in_use();
    commtune_init(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        required,
        provided,
    )
}

/// Builds what the first intercepted call would otherwise pay for (ARCHITECTURE.md, invariant
/// 7): the tables of keys and sites, the main program's path, the host name (the report's).
fn prepare() {
    keys::prepare();
    site::prepare();
    runtime::host_name();
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_finalize() -> c_int {
    halo::post_deferred();
    if runtime::enabled() {
        halo::finalizing();
        tuner::finalizing();
    }
    // Every rank is here, so rank 0 gathers the report before MPI goes away, and writes it once
    // MPI is finalized.
    let gathered = if runtime::enabled() && runtime::process().is_some() {
        runtime::to_report().and_then(report::gather)
    } else {
        None
    };
    let rc = mpi::finalize();
    if let (Some(gathered), Some(process)) = (gathered, runtime::process()) {
        gathered.publish(process, runtime::config());
    }
    rc
}

/// How long MPI_Abort waits for this rank's report at most.
const ABORT_PATIENCE: Duration = Duration::from_secs(2);

/// MPI_Abort: this rank writes what it measured, marked partial with the abort code, then the
/// abort goes on. No communication (the other ranks may be anywhere), and the abort never waits
/// long: the report is written by a helper thread, given at most `ABORT_PATIENCE` (a lock held by
/// the thread whose MPI call failed, or by a thread blocked in MPI, must not hold the abort up).
#[unsafe(no_mangle)]
pub extern "C" fn commtune_abort(comm: MPI_Comm, code: c_int) -> c_int {
    if runtime::enabled()
        && runtime::process().is_some()
        && let Some(process) = runtime::to_report()
    {
        let (done, finished) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("commtune-abort".into())
            .spawn(move || {
                report::write_aborted(process, runtime::config(), code);
                let _ = done.send(());
            });
        if writer.is_ok() && finished.recv_timeout(ABORT_PATIENCE).is_err() {
            say!(
                "commtune: rank {}: no report: it was not written within {} s of MPI_Abort",
                process.rank,
                ABORT_PATIENCE.as_secs()
            );
        }
    }
    mpi::abort(comm, code)
}

/// The fallback when MPI_Finalize was not seen: rank 0 writes what it measured itself.
extern "C" fn at_exit() {
    if let Some(process) = runtime::to_report() {
        report::write_at_exit(process, runtime::config());
    }
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
