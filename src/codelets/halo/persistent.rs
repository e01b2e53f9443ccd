//! The `persistent` halo codelet: a message the application posts again (same buffer, count,
//! datatype, peer, tag and communicator) becomes an MPI_Send_init/MPI_Recv_init request made
//! once and started each time. The application receives that request as its Isend/Irecv handle
//! and sees it become MPI_REQUEST_NULL when it completes, as an ordinary request would.
//!
//! A message is first seen natively; only its repetition makes a persistent request. A second
//! post of a message while the first is active goes native.
//! State dies with the communicator or datatype it names (`mpi::watch`), so a reused handle value
//! never starts a request made for a freed object.

use std::ffi::c_int;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use rustc_hash::FxBuildHasher;

use super::HaloCodelet;
use super::HaloRequirement::{IntCount, NotInFlight, PostedBefore, RealPeer};
use crate::comms;
use crate::mpi::requests::Persistent;
use crate::mpi::{self, HandleBits, MPI_Comm, MPI_Request, PointToPoint, PointToPointKind};

pub const CODELET: HaloCodelet = HaloCodelet {
    name: "persistent",
    requires: &[PostedBefore, IntCount, RealPeer, NotInFlight],
    bursts: true,
};

/// Messages remembered at most (bounded memory for programs that never repeat a buffer).
const MAX_MESSAGES: usize = 8192;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Message {
    send: bool,
    buf: usize,
    count: i64,
    datatype: usize,
    peer: c_int,
    tag: c_int,
    comm: usize,
}

enum Slot {
    /// Posted once, natively.
    Seen,
    Idle(Persistent),
    /// Being made or started by the thread that posts it.
    Starting,
    Started(Persistent),
    /// MPI refused a persistent request for it: always native.
    Native,
}

static MESSAGES: LazyLock<DashMap<Message, Slot, FxBuildHasher>> = LazyLock::new(DashMap::default);
static REMEMBERED: AtomicUsize = AtomicUsize::new(0);
/// A started request of the library's.
struct Started {
    message: Message,
    request: Persistent,
    kept: bool,
}

/// The started requests, by handle bits.
static STARTED: LazyLock<DashMap<usize, Started, FxBuildHasher>> = LazyLock::new(DashMap::default);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

impl Message {
    fn of(call: &PointToPoint) -> Self {
        Message {
            send: call.kind == PointToPointKind::Send,
            buf: call.buf as usize,
            count: call.count,
            datatype: call.datatype.bits(),
            peer: call.peer,
            tag: call.tag,
            comm: call.comm.bits(),
        }
    }
}

/// A persistent request set aside for one post of its message, not started yet.
pub struct Reserved {
    message: Message,
    request: Persistent,
    /// Kept for the message's next post once it completes (the `persistent` codelet's requests);
    /// else freed then (a held operation's: made fresh for one post, see `hold`).
    kept: bool,
}

impl Reserved {
    pub fn handle(&self) -> MPI_Request {
        self.request.handle()
    }

    /// The peer and the communicator's handle bits.
    pub fn partner(&self) -> (c_int, usize) {
        (self.message.peer, self.message.comm)
    }
}

/// Starts the persistent request for `call`'s message, made now if the message was seen before:
/// the handle to give the application (starting may change it), or None when the message is to be
/// posted natively.
pub fn start(call: &PointToPoint) -> Option<MPI_Request> {
    let reserved = reserve(call)?;
    let request = reserved.request;
    let started = begin(reserved);
    if started.is_none() {
        request.free();
    }
    started
}

/// A persistent request made for one post of `call`, for an operation held back and started
/// later (`deferred`): the application holds its handle from the post on, so starting must never
/// change it, which only a request that never ran guarantees (`Persistent::start`). Freed once it
/// completes. None when the message is to be posted natively.
pub fn hold(call: &PointToPoint) -> Option<Reserved> {
    if call.peer == mpi::proc_null() {
        return None;
    }
    let request = call.persistent().ok()?;
    Some(Reserved {
        message: Message::of(call),
        request,
        kept: false,
    })
}

/// The `persistent` codelet's request for `call`'s message, made now if the message was seen
/// before, set aside for this post until `begin`.
///
/// No MPI call runs under a map lock: freeing a request can free the last reference to a datatype
/// or communicator, whose watch callback comes back here.
fn reserve(call: &PointToPoint) -> Option<Reserved> {
    if call.peer == mpi::proc_null() {
        return None;
    }
    let message = Message::of(call);
    let idle = {
        let Some(mut slot) = MESSAGES.get_mut(&message) else {
            remember(call, message);
            return None;
        };
        let idle = match *slot {
            Slot::Seen => None,
            Slot::Idle(request) => Some(request),
            Slot::Starting | Slot::Started(_) | Slot::Native => return None,
        };
        *slot = Slot::Starting;
        idle
    };
    match idle.map_or_else(|| call.persistent(), Ok) {
        Ok(request) => Some(Reserved {
            message,
            request,
            kept: true,
        }),
        Err(_) => {
            if let Some(mut slot) = MESSAGES.get_mut(&message) {
                *slot = Slot::Native;
            }
            None
        }
    }
}

/// Starts a reserved request: the handle it has now, or None when MPI refused (a kept request's
/// message is then always native; a held one stays an inactive handle the application can
/// complete).
pub fn begin(reserved: Reserved) -> Option<MPI_Request> {
    let Reserved {
        message,
        mut request,
        kept,
    } = reserved;
    let started = request.start() == mpi::SUCCESS;
    if started {
        STARTED.insert(
            request.handle().bits(),
            Started {
                message,
                request,
                kept,
            },
        );
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    }
    // The message is gone if its datatype was freed meanwhile; `completed` then frees the request.
    if kept && let Some(mut slot) = MESSAGES.get_mut(&message) {
        *slot = if started {
            Slot::Started(request)
        } else {
            Slot::Native
        };
    }
    started.then(|| request.handle())
}

/// Notes a first post, watching the objects the message names so that its state dies with them
/// (not when the table is full, or MPI refused the watch).
fn remember(call: &PointToPoint, message: Message) {
    if REMEMBERED.load(Ordering::Relaxed) >= MAX_MESSAGES
        || !comms::of(call.comm).is_watched()
        || mpi::watch_datatype(call.datatype, datatype_freed).is_err()
    {
        return;
    }
    if let Entry::Vacant(slot) = MESSAGES.entry(message) {
        slot.insert(Slot::Seen);
        REMEMBERED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether any of the library's persistent requests is active (completion calls must look).
pub fn any_started() -> bool {
    IN_FLIGHT.load(Ordering::Relaxed) > 0
}

/// Whether `request` is one of the library's started requests.
pub fn is_started(request: usize) -> bool {
    STARTED.contains_key(&request)
}

/// The communicator of the library's started request `request`.
pub fn comm_of(request: usize) -> Option<MPI_Comm> {
    STARTED
        .get(&request)
        .map(|started| MPI_Comm::from_bits(started.message.comm))
}

/// Removes `request` from the started requests, returning what it was.
fn unstart(request: usize) -> Option<Started> {
    let (_, started) = STARTED.remove(&request)?;
    IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    Some(started)
}

/// Whether `slot` holds `request`, started.
fn holds(slot: &Slot, request: usize) -> bool {
    matches!(slot, Slot::Started(p) if p.handle().bits() == request)
}

/// The library's started request `request` completed (the application's handle is to become
/// MPI_REQUEST_NULL). A kept request waits for its message's next post, unless the message is
/// gone; the rest are freed.
pub fn completed(request: usize) {
    let Some(Started {
        message,
        request: ours,
        kept,
    }) = unstart(request)
    else {
        return;
    };
    let idle = kept
        && MESSAGES.get_mut(&message).is_some_and(|mut slot| {
            let current = holds(&slot, request);
            if current {
                *slot = Slot::Idle(ours);
            }
            current
        });
    if !idle {
        ours.free();
    }
}

/// MPI frees `request` itself: the application is freeing it with MPI_Request_free (MPI frees it
/// when it completes), or a completion call that failed nulled its handle. If it is ours, the
/// library must never start or free it again.
pub fn freed_by_mpi(request: usize) {
    if let Some(Started { message, kept, .. }) = unstart(request)
        && kept
        && MESSAGES
            .remove_if(&message, |_, slot| holds(slot, request))
            .is_some()
    {
        REMEMBERED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The application freed a communicator (`comms` hook).
pub fn comm_freed(comm: usize) {
    forget(|m| m.comm == comm);
}

fn datatype_freed(datatype: usize) {
    forget(|m| m.datatype == datatype);
}

/// Forgets the messages `matches` selects: idle requests are freed now, started ones when they
/// complete (`completed` finds no message for them).
fn forget(matches: impl Fn(&Message) -> bool) {
    let mut idle = Vec::new();
    MESSAGES.retain(|message, slot| {
        if !matches(message) {
            return true;
        }
        if let Slot::Idle(request) = *slot {
            idle.push(request);
        }
        REMEMBERED.fetch_sub(1, Ordering::Relaxed);
        false
    });
    idle.into_iter().for_each(Persistent::free);
}

/// Frees every idle request (before MPI_Finalize).
pub fn release() {
    forget(|_| true);
}
