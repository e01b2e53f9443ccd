//! The `persistent` halo codelet: a message the application posts again (same buffer, count,
//! datatype, peer, tag and communicator) becomes an MPI_Send_init/MPI_Recv_init request made
//! once and started each time. The application receives that request as its Isend/Irecv handle
//! and sees it become MPI_REQUEST_NULL when it completes, as an ordinary request would.
//!
//! Requirements: counts that fit an int (no large-count persistent calls in MPI-3); a real peer
//! (MPICH 4.0 takes a started persistent request to MPI_PROC_NULL for an inactive one, so Waitany
//! would never complete it; such a message costs nothing anyway); a message that is not already in
//! flight (a second post of it while the first is active goes native). A message is first seen natively; only its repetition makes a persistent request.
//! State dies with the communicator or datatype it names (`mpi::watch`), so a reused handle value
//! never starts a request made for a freed object.

use std::ffi::c_int;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use rustc_hash::FxBuildHasher;

use crate::mpi::requests::Persistent;
use crate::mpi::{self, HandleBits, MPI_Request, PointToPoint, PointToPointKind};

pub const REQUIRES: &[&str] = &[
    "a message posted before (same buffer, count, datatype, peer, tag, communicator)",
    "an int count",
    "a peer other than MPI_PROC_NULL",
    "no post of the same message in flight",
];

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
/// The started requests, by handle bits, with their message.
static STARTED: LazyLock<DashMap<usize, (Message, Persistent), FxBuildHasher>> =
    LazyLock::new(DashMap::default);
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

/// Starts the persistent request for `call`'s message, made now if the message was seen before;
/// None when the message is to be posted natively.
pub fn start(call: &PointToPoint) -> Option<Persistent> {
    let reserved = reserve(call, false)?;
    let request = reserved.request;
    if begin(reserved) {
        Some(request)
    } else {
        request.free();
        None
    }
}

/// The persistent request for `call`'s message, made now if the message was seen before (or if
/// `first_post_too`), set aside for this post until `begin`.
///
/// No MPI call runs under a map lock: freeing a request can free the last reference to a datatype
/// or communicator, whose watch callback comes back here.
pub fn reserve(call: &PointToPoint, first_post_too: bool) -> Option<Reserved> {
    if call.peer == mpi::proc_null() {
        return None;
    }
    let message = Message::of(call);
    let idle = {
        let mut slot = match MESSAGES.get_mut(&message) {
            Some(slot) => slot,
            None if first_post_too && remember(call, message) => MESSAGES.get_mut(&message)?,
            None => {
                remember(call, message);
                return None;
            }
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
        Ok(request) => Some(Reserved { message, request }),
        Err(_) => {
            if let Some(mut slot) = MESSAGES.get_mut(&message) {
                *slot = Slot::Native;
            }
            None
        }
    }
}

/// Starts a reserved request; false when MPI refused (its message is then always native).
pub fn begin(reserved: Reserved) -> bool {
    let Reserved { message, request } = reserved;
    let started = request.start() == mpi::SUCCESS;
    if started {
        STARTED.insert(request.handle().bits(), (message, request));
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    }
    // The message is gone if its datatype was freed meanwhile; `completed` then frees the request.
    if let Some(mut slot) = MESSAGES.get_mut(&message) {
        *slot = if started {
            Slot::Started(request)
        } else {
            Slot::Native
        };
    }
    started
}

/// Notes a first post, watching the objects the message names so that its state dies with them;
/// false when the message cannot be remembered (table full, or MPI refused the watch).
fn remember(call: &PointToPoint, message: Message) -> bool {
    if REMEMBERED.load(Ordering::Relaxed) >= MAX_MESSAGES
        || mpi::watch(call.comm, comm_freed).is_err()
        || mpi::watch_datatype(call.datatype, datatype_freed).is_err()
    {
        return false;
    }
    if let Entry::Vacant(slot) = MESSAGES.entry(message) {
        slot.insert(Slot::Seen);
        REMEMBERED.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Whether any of the library's persistent requests is active (completion calls must look).
pub fn any_started() -> bool {
    IN_FLIGHT.load(Ordering::Relaxed) > 0
}

/// Whether `request` is one of the library's started requests.
pub fn is_started(request: usize) -> bool {
    STARTED.contains_key(&request)
}

/// Removes `request` from the started requests, returning its message and itself.
fn unstart(request: usize) -> Option<(Message, Persistent)> {
    let (_, started) = STARTED.remove(&request)?;
    IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    Some(started)
}

/// Whether `slot` holds `request`, started.
fn holds(slot: &Slot, request: usize) -> bool {
    matches!(slot, Slot::Started(p) if p.handle().bits() == request)
}

/// The library's started request `request` completed (the application's handle is to become
/// MPI_REQUEST_NULL). It is kept for the next post, or freed if its message is gone.
pub fn completed(request: usize) {
    let Some((message, ours)) = unstart(request) else {
        return;
    };
    let kept = MESSAGES.get_mut(&message).is_some_and(|mut slot| {
        let current = holds(&slot, request);
        if current {
            *slot = Slot::Idle(ours);
        }
        current
    });
    if !kept {
        ours.free();
    }
}

/// The application is freeing `request` with MPI_Request_free: if it is ours, MPI frees it when it
/// completes, and the library must never start it again.
pub fn freed_by_application(request: usize) {
    if let Some((message, _)) = unstart(request)
        && MESSAGES
            .remove_if(&message, |_, slot| holds(slot, request))
            .is_some()
    {
        REMEMBERED.fetch_sub(1, Ordering::Relaxed);
    }
}

fn comm_freed(comm: usize) {
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
