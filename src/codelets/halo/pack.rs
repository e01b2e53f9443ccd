//! The `pack` halo codelet: a message of a non-contiguous datatype travels as MPI_PACKED bytes.
//! A send is packed into a buffer of the library's and posted from there; a receive lands in one
//! and is unpacked into the application's buffer when a completion call (or
//! MPI_Request_get_status) reports it complete. Contiguous messages are posted as they are.
//!
//! A receive's buffer first gets the application's current data (packed), so that a shorter
//! message leaves the rest of the application's buffer unchanged, as MPI would, and a cancelled
//! receive unpacks what was there. The application's request is the real one; when the
//! application frees it (MPI_Request_free), the library keeps it until it completes, polling
//! at later calls and waiting at MPI_Finalize. Every MPI call of the program must pass through
//! the library: MPI_Request_get_status made through Open MPI's Fortran bindings would report a
//! receive complete before it is unpacked.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use rustc_hash::FxBuildHasher;

use super::HaloCodelet;
use super::HaloRequirement::{EveryCallVisible, IntCount, NonContiguous};
use crate::mpi::datatype::{Buf, Duplicate, Layout, pack, pack_size, unpack};
use crate::mpi::requests::Pending;
use crate::mpi::{self, HandleBits, MPI_Request, PointToPoint, PointToPointKind};

pub const CODELET: HaloCodelet = HaloCodelet {
    name: "pack",
    requires: &[NonContiguous, IntCount, EveryCallVisible],
    bursts: true,
};

/// How `post` dealt with a message.
pub enum Posted {
    /// Packed and posted, with MPI's return code.
    Packed(c_int),
    /// Contiguous: nothing to pack, to be posted as it is.
    AsItIs,
    /// The codelet cannot post it (requirements): post natively.
    Refused,
}

struct Packed {
    /// Tells this message from a later one MPI gives the same handle.
    ticket: u64,
    bytes: Vec<u8>,
    /// The application's receive buffer, until unpacked, with a duplicate of its datatype: the
    /// application may free its own before the message completes.
    into: Option<(Buf, Duplicate)>,
}

#[derive(Default)]
struct State {
    /// By request handle bits.
    active: HashMap<usize, Packed, FxBuildHasher>,
    /// Requests the application freed before they completed.
    orphans: Vec<(Pending, Packed)>,
    tickets: u64,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);
/// Requests in `active` or `orphans`: completion calls only look when this is nonzero.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Requests in `orphans`: later calls only poll when this is nonzero.
static ORPHANS: AtomicUsize = AtomicUsize::new(0);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn post(call: &PointToPoint, request: &mut MPI_Request) -> Posted {
    let Ok(layout) = Layout::of(call.datatype) else {
        return Posted::Refused;
    };
    if layout.is_contiguous() {
        return Posted::AsItIs;
    }
    if !mpi::sees_every_call() {
        return Posted::Refused;
    }
    let Some((mut bytes, used, app)) = packed_copy(call) else {
        return Posted::Refused;
    };
    let receive = call.kind == PointToPointKind::Recv;
    let into = if receive {
        let Ok(kept) = Duplicate::of(call.datatype) else {
            return Posted::Refused;
        };
        let app = Buf {
            datatype: kept.datatype(),
            ..app
        };
        Some((app, kept))
    } else {
        None
    };
    let wire = PointToPoint {
        buf: bytes.as_mut_ptr().cast(),
        count: if receive { bytes.len() } else { used } as i64,
        datatype: mpi::constants().packed,
        ..*call
    };
    let rc = wire.native(request);
    if rc == mpi::SUCCESS {
        let handle = *request;
        let mut state = state();
        state.tickets += 1;
        let entry = Packed {
            ticket: state.tickets,
            bytes,
            into,
        };
        // MPI may hand out one handle for several requests that completed at once (Open MPI's
        // sends to itself), or give a completed request's handle to this thread before the thread
        // that completed it looked: the entry it replaces is complete. It is finished under the
        // lock, which that thread takes before returning to the application.
        match state.active.insert(handle.bits(), entry) {
            Some(done) => finish(done),
            None => {
                IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Posted::Packed(rc)
}

/// The message's data packed (for a receive: the application's buffer as it is now), with the
/// bytes used and the application's buffer.
fn packed_copy(call: &PointToPoint) -> Option<(Vec<u8>, usize, Buf)> {
    let app = Buf::new(call.buf, call.count, call.datatype).ok()?;
    let mut bytes = vec![0u8; pack_size(call.count, call.datatype).ok()?];
    let used = pack(&app, &mut bytes).ok()?;
    Some((bytes, used, app))
}

/// Whether any packed message is in flight (completion calls must look).
pub fn any_in_flight() -> bool {
    IN_FLIGHT.load(Ordering::Relaxed) > 0
}

/// The tickets of the packed messages among `requests`, taken before a completion call: once MPI
/// completes a request, another thread's new one may get its handle before the call returns.
pub fn tickets(requests: &[usize]) -> Vec<Option<u64>> {
    let state = state();
    requests
        .iter()
        .map(|r| state.active.get(r).map(|p| p.ticket))
        .collect()
}

/// The packed message `request` with `ticket` completed: unpacks a receive and releases the
/// buffer. Under the lock: the thread that completed the message may find its entry already
/// taken (by a thread whose own request got the handle after MPI freed it, see `halo::observe`),
/// and must not return to the application before the unpacking is done.
pub fn completed(request: usize, ticket: u64) {
    let mut state = state();
    if state
        .active
        .get(&request)
        .is_some_and(|p| p.ticket == ticket)
        && let Some(done) = state.active.remove(&request)
    {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
        finish(done);
    }
}

/// MPI_Request_get_status found `request` complete: the application may read its buffer now.
pub fn found_complete(request: usize) {
    let mut state = state();
    if let Some(p) = state.active.get_mut(&request)
        && let Some((into, _kept)) = p.into.take()
    {
        let _ = unpack(&p.bytes, &into);
    }
}

fn finish(done: Packed) {
    if let Some((into, _kept)) = done.into {
        // MPI checked the same message against the same buffer when the receive was posted.
        let _ = unpack(&done.bytes, &into);
    }
}

/// The application frees `request` (MPI_Request_free): true when it is a packed message, which
/// the library then keeps (the handle becomes MPI_REQUEST_NULL) until it completes.
pub fn adopt(request: MPI_Request) -> bool {
    let mut state = state();
    let Some(packed) = state.active.remove(&request.bits()) else {
        return false;
    };
    state.orphans.push((Pending::new(request), packed));
    ORPHANS.fetch_add(1, Ordering::Relaxed);
    true
}

/// Finishes the freed requests that have completed (`wait`: all of them, at MPI_Finalize).
pub fn poll_orphans(wait: bool) {
    if ORPHANS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let finished: Vec<Packed> = {
        let mut state = state();
        let mut finished = Vec::new();
        let mut i = 0;
        while i < state.orphans.len() {
            if state.orphans[i].0.done(wait) {
                finished.push(state.orphans.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        finished
    };
    IN_FLIGHT.fetch_sub(finished.len(), Ordering::Relaxed);
    ORPHANS.fetch_sub(finished.len(), Ordering::Relaxed);
    finished.into_iter().for_each(finish);
}
