//! Halo exchanges: MPI_Isend/MPI_Irecv calls grouped into episodes (`episode`), and the halo
//! codelets, which change how the messages are posted. All but `neighbor` never change which
//! messages match, so each rank may use its own; `neighbor` runs only where the ranks agreed
//! (DESIGN, "Halo episodes").

mod deferred;
mod episode;
mod irecv_first;
mod neighbor;
mod pack;
mod pairwise;
mod persistent;
mod tuning;

pub use deferred::{post_all as post_deferred, post_listed as post_deferred_listed};
pub use neighbor::{
    adopt as neighbor_adopts, at_collective as agree_at_collective,
    must_poll as neighbor_must_poll, progress as progress_neighbor,
};
pub use pairwise::{restore as restore_statuses, run_steps as run_pairwise_steps};
pub use tuning::report as tuning_report;

use std::cell::RefCell;
use std::ffi::c_int;

use crate::mpi::requests::{index_at, request_at, set_request_at};
use crate::mpi::{self, HandleBits, MPI_Request, PointToPoint};

/// A way to post an episode's messages.
pub struct HaloCodelet {
    pub name: &'static str,
    /// What a message needs for the codelet to post it (others go native), for the catalogue.
    pub requires: &'static [&'static str],
}

/// The halo codelets, in registry order; index 0 is native.
pub const CODELETS: &[HaloCodelet] = &[
    HaloCodelet {
        name: "native",
        requires: &[],
    },
    HaloCodelet {
        name: "persistent",
        requires: persistent::REQUIRES,
    },
    HaloCodelet {
        name: "irecv_first",
        requires: irecv_first::REQUIRES,
    },
    HaloCodelet {
        name: "pack",
        requires: pack::REQUIRES,
    },
    HaloCodelet {
        name: "pairwise",
        requires: pairwise::REQUIRES,
    },
    HaloCodelet {
        name: "neighbor",
        requires: neighbor::REQUIRES,
    },
];
const NATIVE: usize = 0;
const PERSISTENT: usize = 1;
const IRECV_FIRST: usize = 2;
const PACK: usize = 3;
const PAIRWISE: usize = 4;
/// The one codelet that changes which messages match: ranks run it only where they agreed.
const NEIGHBOR: usize = 5;

/// How a halo codelet dealt with one message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Posted natively: the message does not meet the codelet's requirements.
    Refused,
    /// Taken, and posted as native posts it: nothing to change (a contiguous message for
    /// `pack`, a receive or a send after every receive for `irecv_first`).
    AsItIs,
    /// Taken, and posted differently from native.
    Changed,
}

/// Which requests of the array given to a completion call have completed.
pub enum Completed {
    Nothing,
    All,
    Index(usize),
    Indices {
        indices: *const c_int,
        count: usize,
    },
    /// The call failed: which requests completed is unknown.
    Unknown,
}

impl Completed {
    /// Calls `f` with the position of every completed request of an array of `n`.
    fn each(&self, n: usize, mut f: impl FnMut(usize)) {
        match *self {
            Completed::Nothing | Completed::Unknown => {}
            Completed::All => (0..n).for_each(f),
            Completed::Index(i) => f(i),
            Completed::Indices { indices, count } => (0..count)
                // SAFETY: MPI filled `count` indices (`observe`'s contract).
                .map(|k| unsafe { index_at(indices, k) })
                .filter(|&i| i < n)
                .for_each(f),
        }
    }
}

/// Whose request a position of a completion call's array held when the call began.
#[derive(Clone, Copy)]
enum Owner {
    Application,
    /// A persistent request of the library's (`persistent`, or held back by a codelet).
    Persistent,
    /// A packed message, with its ticket.
    Packed(u64),
}

thread_local! {
    /// The request array of the completion call in progress, as it was before the call, and whose
    /// each request was.
    static BEFORE: RefCell<(Vec<usize>, Vec<Owner>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Posts an Isend or Irecv made at `caller` with its episode's halo codelet, and tracks it.
pub fn post(caller: usize, call: &PointToPoint, request: *mut MPI_Request) -> c_int {
    pack::poll_orphans(false);
    let codelet = episode::codelet(caller, call);
    let (rc, outcome) = match codelet {
        PERSISTENT => match persistent::start(call) {
            Some(ours) => {
                // SAFETY: the application's request variable, as MPI_Isend/MPI_Irecv require.
                unsafe { set_request_at(request, 0, ours) };
                (mpi::SUCCESS, Outcome::Changed)
            }
            None => (call.native(request), Outcome::Refused),
        },
        IRECV_FIRST => irecv_first::post(call, request),
        PAIRWISE => applied(pairwise::post(call, request)),
        NEIGHBOR => applied(neighbor::post(call, request)),
        PACK => match pack::post(call, request) {
            pack::Posted::Packed(rc) => (rc, Outcome::Changed),
            pack::Posted::AsItIs => (call.native(request), Outcome::AsItIs),
            pack::Posted::Refused => (call.native(request), Outcome::Refused),
        },
        _ => (call.native(request), Outcome::Refused),
    };
    let used = if outcome == Outcome::Refused {
        NATIVE
    } else {
        codelet
    };
    if rc == mpi::SUCCESS {
        // SAFETY: the request variable holds the handle just written.
        let handle = unsafe { request_at(request, 0) };
        episode::posted(call, handle, used, outcome == Outcome::Changed);
        if used == IRECV_FIRST && episode::receives_outstanding() == Some(false) {
            deferred::post_listed();
        }
    }
    rc
}

/// MPI's code, and what a codelet that posts every message it takes its own way did.
fn applied((rc, applied): (c_int, bool)) -> (c_int, Outcome) {
    (
        rc,
        if applied {
            Outcome::Changed
        } else {
            Outcome::Refused
        },
    )
}

/// Runs a completion call over `requests[..count]`: closes the episode it finishes, hands the
/// library's persistent requests back to the application as MPI_REQUEST_NULL, and unpacks
/// packed receives.
///
/// # Safety
/// `requests` holds `count` writable handles, and `Completed::Indices` that `call` returns
/// points to as many indices as it says.
pub unsafe fn observe(
    caller: usize,
    requests: *mut MPI_Request,
    count: usize,
    call: impl FnOnce() -> (c_int, Completed),
) -> c_int {
    pack::poll_orphans(false);
    let tracking = episode::is_open();
    let ours = persistent::any_started();
    let packed = pack::any_in_flight();
    if !tracking && !ours && !packed {
        return call().0;
    }
    let (mut before, mut owners) = BEFORE.take();
    before.clear();
    // SAFETY: `requests` holds `count` handles (this function's contract).
    before.extend((0..count).map(|i| unsafe { request_at(requests, i) }.bits()));
    // Whose each request is must be known before the call: once MPI completes (and frees) a
    // request, another thread's new request may get its handle before this call returns. A
    // started persistent request is surely the library's (it frees them itself, after they leave
    // `persistent`'s table); a packed message's entry may be another thread's, completed but not
    // yet looked at, whose handle MPI already gave to this request.
    owners.clear();
    owners.resize(count, Owner::Application);
    if packed {
        for (owner, ticket) in owners.iter_mut().zip(pack::tickets(&before)) {
            if let Some(ticket) = ticket {
                *owner = Owner::Packed(ticket);
            }
        }
    }
    if ours {
        for (owner, &request) in owners.iter_mut().zip(&before) {
            if persistent::is_started(request) {
                *owner = Owner::Persistent;
            }
        }
    }
    let (rc, completed) = call();
    if tracking {
        episode::completed(caller, &before, &completed);
    }
    if ours || packed {
        completed.each(count, |i| match owners[i] {
            Owner::Application => {}
            Owner::Persistent => {
                persistent::completed(before[i]);
                // SAFETY: `requests` holds `count` writable handles (this function's contract).
                unsafe { set_request_at(requests, i, mpi::request_null()) };
            }
            Owner::Packed(ticket) => pack::completed(before[i], ticket),
        });
    }
    BEFORE.set((before, owners));
    rc
}

/// The application frees `request` (MPI_Request_free): true when the library took it over (a
/// packed message, completed by the library), false when MPI is to free it; a persistent request
/// of the library's is never started again.
pub fn freeing(request: MPI_Request) -> bool {
    persistent::freed_by_application(request.bits());
    pack::adopt(request)
}

/// MPI_Request_get_status said `request` is complete.
pub fn found_complete(request: MPI_Request) {
    pack::found_complete(request.bits());
}

/// MPI_Finalize is near: finish the packed messages the application freed, free the persistent
/// requests nobody holds.
pub fn finalizing() {
    neighbor::finalizing();
    pack::poll_orphans(true);
    persistent::release();
}
