//! The Rust side of the shim's entry points: build the call record, find the key, run the call
//! and measure it. With COMMTUNE_MODE=off, or before MPI is initialised, every entry point is one
//! branch and the PMPI call.

mod collectives;
mod completion;
mod lifecycle;

use std::ffi::c_int;

use crate::clock;
use crate::keys::Entry;

/// Runs `call` and records its duration on `entry`.
#[inline]
fn timed(entry: &Entry, call: impl FnOnce() -> c_int) -> c_int {
    let start = clock::now();
    let rc = call();
    entry.record(clock::now().saturating_sub(start), "native");
    rc
}
