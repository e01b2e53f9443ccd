//! The Rust side of the shim's entry points: build the call record, find the key, choose the
//! codelet, run and measure it. With COMMTUNE_MODE=off, or before MPI is initialised, every entry
//! point is one branch and the PMPI call.

mod collectives;
mod completion;
mod lifecycle;

use std::ffi::c_int;

use crate::codelets::{Codelet, Operation};
use crate::keys::Entry;
use crate::{clock, mpi, runtime};

/// Runs `call` with the codelet chosen for it and records the duration on `entry`.
fn dispatch<C: Operation>(call: &C, entry: &Entry) -> c_int {
    let codelet = choose(call, entry);
    let start = clock::now();
    let rc = match codelet.run {
        None => call.native(),
        Some(run) => {
            let rc = match mpi::private_comm(call.comm()).and_then(|comm| run(call, &comm)) {
                Ok(()) => mpi::SUCCESS,
                Err(rc) => rc,
            };
            if rc != mpi::SUCCESS {
                // What the application's MPI call would have done with the error.
                mpi::call_errhandler(call.comm(), rc);
            }
            rc
        }
    };
    entry.record(clock::now().saturating_sub(start), codelet.name);
    rc
}

/// The forced codelet (COMMTUNE_FORCE) when the call meets its requirements, else native.
fn choose<C: Operation>(call: &C, entry: &Entry) -> &'static Codelet<C> {
    let codelets = C::codelets();
    match runtime::config().forced(C::OP) {
        Some(index) if index != 0 => {
            let forced = &codelets[index];
            match forced.unmet(&call.facts()) {
                None => forced,
                Some(unmet) => {
                    entry.note(format!(
                        "forced codelet {} not applicable ({}): ran native",
                        forced.name,
                        unmet.describe()
                    ));
                    &codelets[0]
                }
            }
        }
        _ => &codelets[0],
    }
}
