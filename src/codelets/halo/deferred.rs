//! Halo operations posted later than the application asked (the `irecv_first` codelet's sends,
//! the `pairwise` codelet's messages, the `neighbor` codelet's posts until the episode's last),
//! and the rule that makes this safe: every MPI entry point posts them before doing anything
//! else (the generated wrappers of build/entry_points.rs call `commtune_post_deferred`, see
//! `halo`, and the hand-written ones through `halo::post_deferred`), so no MPI call can block
//! while an operation waits.
//!
//! The list is process-wide, not per thread: a thread that blocks in MPI while another thread's
//! sends wait would otherwise deadlock, and a thread's post must not overtake another thread's
//! held message of its channel where the program ordered the two (`post_others_listed`).
//! Whoever takes operations off the list starts them before releasing it: a thread that finds the
//! list empty (its own operations taken by another thread's MPI call) may then complete them at
//! once, so they must be active by then.

use std::ffi::c_int;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use super::persistent::{self, Reserved};

/// Read by the C wrappers (shim/commtune.h): nonzero while operations wait, or while an episode
/// the ranks may agree to run as `neighbor` is posted. Bit 0: `DEFERRED` holds operations; bit 1:
/// a `neighbor` instance's posts are held; the bits from 16 on count the episodes in progress
/// that watch for other MPI calls (`halo::episode`: the process's one, or under
/// MPI_THREAD_MULTIPLE each thread's).
#[unsafe(no_mangle)]
pub static commtune_deferred_pending: AtomicI32 = AtomicI32::new(0);
const LISTED: i32 = 1;
const NEIGHBOR_HOLDER: i32 = 2;
const WATCHER: i32 = 1 << 16;

/// An episode in progress watches for other MPI calls between its posts.
pub fn watch_begins() {
    commtune_deferred_pending.fetch_add(WATCHER, Ordering::Release);
}

/// It no longer does.
pub fn watch_ends() {
    commtune_deferred_pending.fetch_sub(WATCHER, Ordering::Release);
}

/// A `neighbor` instance's posts are held.
pub fn neighbor_holds() {
    commtune_deferred_pending.fetch_add(NEIGHBOR_HOLDER, Ordering::Release);
}

/// They no longer are.
pub fn neighbor_released() {
    commtune_deferred_pending.fetch_sub(NEIGHBOR_HOLDER, Ordering::Release);
}

/// Held operations in posting order; for those that may be exchanged step by step (`pairwise`),
/// this rank's rank in their communicator.
struct Held {
    operations: Vec<(Reserved, Option<c_int>)>,
    /// The thread that posted each (`this_thread`).
    threads: Vec<u64>,
}

static DEFERRED: Mutex<Held> = Mutex::new(Held {
    operations: Vec::new(),
    threads: Vec::new(),
});

/// Threads that held an operation so far.
static THREADS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THIS_THREAD: u64 = THREADS.fetch_add(1, Ordering::Relaxed);
}

fn this_thread() -> u64 {
    THIS_THREAD.with(|t| *t)
}

fn held() -> std::sync::MutexGuard<'static, Held> {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Holds `request` (a persistent request the application already holds) until `post_all`, or,
/// with `stepwise` (this rank's rank in the message's communicator), until the MPI_Waitall that
/// completes it (`take_all`).
pub fn defer(request: Reserved, stepwise: Option<c_int>) {
    let mut held = held();
    held.operations.push((request, stepwise));
    held.threads.push(this_thread());
    commtune_deferred_pending.fetch_or(LISTED, Ordering::Release);
}

/// Whether any operation is held.
#[inline]
pub fn any() -> bool {
    commtune_deferred_pending.load(Ordering::Acquire) != 0
}

/// Starts every held operation but those `keep` picks (a flag per operation of the list, in
/// posting order, each with this rank's rank in its communicator when it may go step by step),
/// which are returned in posting order for the caller to start.
pub fn start_all_but(
    keep: impl FnOnce(&[(Reserved, Option<c_int>)]) -> Vec<bool>,
) -> Vec<(Reserved, Option<c_int>)> {
    let mut held = held();
    let kept = keep(&held.operations);
    let mut taken = Vec::new();
    let kept = kept.into_iter().chain(std::iter::repeat(false));
    held.threads.clear();
    for ((request, stepwise), keep) in held.operations.drain(..).zip(kept) {
        if keep {
            taken.push((request, stepwise));
        } else {
            // A request MPI refuses to start stays an inactive handle the application can
            // complete.
            persistent::begin(request);
        }
    }
    // Only now: a thread that sees nothing held goes on as if its operations were started.
    commtune_deferred_pending.fetch_and(!LISTED, Ordering::Release);
    taken
}

/// Starts the held operations of `DEFERRED` only (a call that cannot block may leave a
/// `neighbor` instance held).
pub fn post_listed() {
    if commtune_deferred_pending.load(Ordering::Acquire) & LISTED != 0 {
        start_all_but(|_| Vec::new());
    }
}

/// Starts the operations other threads hold, in posting order, before this thread posts a message
/// (at once or held): MPI matches a channel's messages in the order the program posted them, and
/// the program may have ordered its threads' posts (MPI_THREAD_SERIALIZED, or a lock). This
/// thread's own held operations keep their place: its episode's codelet orders them
/// (`post_listed_then`).
pub fn post_others_listed() {
    if commtune_deferred_pending.load(Ordering::Acquire) & LISTED == 0 {
        return;
    }
    let me = this_thread();
    let mut held = held();
    if held.threads.iter().all(|&t| t == me) {
        return;
    }
    let Held {
        operations,
        threads,
    } = std::mem::replace(
        &mut *held,
        Held {
            operations: Vec::new(),
            threads: Vec::new(),
        },
    );
    for (operation, thread) in operations.into_iter().zip(threads) {
        if thread == me {
            held.operations.push(operation);
            held.threads.push(thread);
        } else {
            persistent::begin(operation.0);
        }
    }
    if held.operations.is_empty() {
        commtune_deferred_pending.fetch_and(!LISTED, Ordering::Release);
    }
}

/// Posts a message natively after the held ones: a message posted natively must not overtake an
/// earlier one of its channel (peer, tag, communicator) that is held back, as MPI matches a
/// channel's messages in posting order.
pub fn post_listed_then(post: impl FnOnce() -> c_int) -> c_int {
    post_listed();
    post()
}
