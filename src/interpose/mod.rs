//! The Rust side of the shim's entry points: build the call record, find the key, hand the call
//! to the tuner or run the forced or native codelet, and measure it. With COMMTUNE_MODE=off every
//! entry point is one branch and the PMPI call (before MPI is initialised, two more queries).

mod collectives;
mod completion;
mod exports;
mod lifecycle;

use std::ffi::c_int;

use crate::codelets::{self, Operation};
use crate::config::Mode;
use crate::keys::{Entry, Key, Measured};
use crate::{clock, halo, runtime, tuner};

/// Runs `call`: tuned (COMMTUNE_MODE=tune, unless its operation is forced), or with the
/// forced or native codelet, measured on `key`'s entry `entry`.
#[inline]
fn dispatch<C: Operation>(call: &C, key: &'static Key, entry: &'static Entry) -> c_int {
    let config = runtime::config();
    let tuned = config.mode == Mode::Tune && config.forced(C::OP).is_none();
    // Every rank of the communicator is inside this call: halo episodes may be agreed on.
    halo::agree_at_collective(call.comm(), tuned);
    if tuned {
        return tuner::run(call, key, entry);
    }
    let index = forced_or_native(call, entry);
    let start = clock::now();
    codelets::inject_delay(call, index, entry.calls() + 1);
    let rc = codelets::execute(call, index);
    entry.record(clock::now().saturating_sub(start), index, Measured::Other);
    rc
}

/// The forced codelet (COMMTUNE_FORCE) when the call meets its requirements, else native.
fn forced_or_native<C: Operation>(call: &C, entry: &Entry) -> usize {
    match runtime::config().forced(C::OP) {
        Some(index) if index != 0 => {
            let forced = &C::codelets()[index];
            match forced.unmet(&call.facts()) {
                None => index,
                Some(unmet) => {
                    entry.note(format!(
                        "forced codelet {} not applicable ({}): ran native",
                        forced.name,
                        unmet.describe()
                    ));
                    0
                }
            }
        }
        _ => 0,
    }
}
