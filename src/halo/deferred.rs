//! Halo operations posted later than the application asked (the `irecv_first` codelet's sends),
//! and the rule that makes this safe: every MPI entry point posts them before doing anything
//! else (the generated wrappers of build/entry_points.rs, and the hand-written ones through
//! `post_all`), so no MPI call can block while an operation waits.
//!
//! The list is process-wide, not per thread: a thread that blocks in MPI while another thread's
//! sends wait would otherwise deadlock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use super::persistent::{self, Reserved};

/// Read by the C wrappers (shim/commtune.h): nonzero while `DEFERRED` holds operations.
#[unsafe(no_mangle)]
pub static commtune_deferred_pending: AtomicI32 = AtomicI32::new(0);

static DEFERRED: Mutex<Vec<Reserved>> = Mutex::new(Vec::new());

/// Holds `request` (a persistent request the application already holds) until `post_all`.
pub fn defer(request: Reserved) {
    let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
    deferred.push(request);
    commtune_deferred_pending.store(1, Ordering::Release);
}

/// Starts every deferred operation.
#[inline]
pub fn post_all() {
    if commtune_deferred_pending.load(Ordering::Acquire) != 0 {
        commtune_post_deferred();
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_post_deferred() {
    let waiting = {
        let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
        commtune_deferred_pending.store(0, Ordering::Release);
        std::mem::take(&mut *deferred)
    };
    // A request MPI refuses to start stays an inactive handle the application can complete.
    waiting.into_iter().for_each(|r| {
        persistent::begin(r);
    });
}
