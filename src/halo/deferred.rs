//! Halo operations posted later than the application asked (the `irecv_first` codelet's sends,
//! the `pairwise` codelet's messages, the `neighbor` codelet's posts until the episode's last),
//! and the rule that makes this safe: every MPI entry point posts them before doing anything
//! else (the generated wrappers of build/entry_points.rs, and the hand-written ones through
//! `post_all`), so no MPI call can block while an operation waits.
//!
//! The list is process-wide, not per thread: a thread that blocks in MPI while another thread's
//! sends wait would otherwise deadlock.

use std::ffi::c_int;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use super::neighbor;
use super::persistent::{self, Reserved};

/// Read by the C wrappers (shim/commtune.h): nonzero while operations wait. Bit 0: `DEFERRED`
/// holds operations; the rest counts the threads holding a `neighbor` instance's posts (in steps
/// of 2).
#[unsafe(no_mangle)]
pub static commtune_deferred_pending: AtomicI32 = AtomicI32::new(0);
const LISTED: i32 = 1;
const NEIGHBOR_HOLDER: i32 = 2;

/// This thread holds a `neighbor` instance's posts.
pub fn neighbor_holds() {
    commtune_deferred_pending.fetch_add(NEIGHBOR_HOLDER, Ordering::Release);
}

/// This thread no longer holds them.
pub fn neighbor_released() {
    commtune_deferred_pending.fetch_sub(NEIGHBOR_HOLDER, Ordering::Release);
}

/// Held operations; for those that may be exchanged step by step (`pairwise`), this rank's rank
/// in their communicator.
static DEFERRED: Mutex<Vec<(Reserved, Option<c_int>)>> = Mutex::new(Vec::new());

/// Holds `request` (a persistent request the application already holds) until `post_all`, or,
/// with `stepwise` (this rank's rank in the message's communicator), until the MPI_Waitall that
/// completes it (`take_all`).
pub fn defer(request: Reserved, stepwise: Option<c_int>) {
    let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
    deferred.push((request, stepwise));
    commtune_deferred_pending.fetch_or(LISTED, Ordering::Release);
}

/// Whether any operation is held.
#[inline]
pub fn any() -> bool {
    commtune_deferred_pending.load(Ordering::Acquire) != 0
}

/// Every held operation, to be started by the caller.
pub fn take_all() -> Vec<(Reserved, Option<c_int>)> {
    let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
    commtune_deferred_pending.fetch_and(!LISTED, Ordering::Release);
    std::mem::take(&mut *deferred)
}

/// Starts every deferred operation.
#[inline]
pub fn post_all() {
    if any() {
        commtune_post_deferred();
    }
}

/// Starts the held operations of `DEFERRED` only (a call that cannot block may leave a
/// `neighbor` instance held).
pub fn post_listed() {
    if commtune_deferred_pending.load(Ordering::Acquire) & LISTED != 0 {
        start_listed();
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_post_deferred() {
    neighbor::flush();
    start_listed();
}

fn start_listed() {
    // A request MPI refuses to start stays an inactive handle the application can complete.
    take_all().into_iter().for_each(|(r, _)| {
        persistent::begin(r);
    });
}
