//! Halo exchanges: MPI_Isend/MPI_Irecv calls grouped into episodes (`episode`), and the halo
//! codelets, which change how the messages are posted but never which messages match, so that
//! each rank may use its own (DESIGN, "Halo episodes").

mod deferred;
mod episode;
mod irecv_first;
mod persistent;
mod tuning;

pub use deferred::post_all as post_deferred;
pub use tuning::report as tuning_report;

use std::cell::RefCell;
use std::ffi::c_int;

use crate::mpi::requests::{index_at, request_at, set_request_at};
use crate::mpi::{self, HandleBits, MPI_Request, PointToPoint};

/// A way to post an episode's messages. Each reorders or repackages the same messages, so it
/// matches whatever codelet the peers use.
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
];
const NATIVE: usize = 0;
const PERSISTENT: usize = 1;
const IRECV_FIRST: usize = 2;

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

thread_local! {
    /// The request array of the completion call in progress, as it was before the call.
    static BEFORE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Posts an Isend or Irecv made at `caller` with its episode's halo codelet, and tracks it.
pub fn post(caller: usize, call: &PointToPoint, request: *mut MPI_Request) -> c_int {
    let (rc, used) = match episode::codelet(caller, call) {
        PERSISTENT => match persistent::start(call) {
            Some(ours) => {
                // SAFETY: the application's request variable, as MPI_Isend/MPI_Irecv require.
                unsafe { set_request_at(request, 0, ours.handle()) };
                (mpi::SUCCESS, PERSISTENT)
            }
            None => (call.native(request), NATIVE),
        },
        IRECV_FIRST => match irecv_first::post(call, request) {
            (rc, true) => (rc, IRECV_FIRST),
            (rc, false) => (rc, NATIVE),
        },
        _ => (call.native(request), NATIVE),
    };
    if rc == mpi::SUCCESS {
        // SAFETY: the request variable holds the handle just written.
        episode::posted(call, unsafe { request_at(request, 0) }, used);
        if used == IRECV_FIRST && episode::receives_outstanding() == Some(false) {
            deferred::post_all();
        }
    }
    rc
}

/// Runs a completion call over `requests[..count]`: closes the episode it finishes, and hands
/// the library's persistent requests back to the application as MPI_REQUEST_NULL.
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
    let tracking = episode::is_open();
    let ours = persistent::any_started();
    if !tracking && !ours {
        return call().0;
    }
    let mut before = BEFORE.take();
    before.clear();
    // SAFETY: `requests` holds `count` handles (this function's contract).
    before.extend((0..count).map(|i| unsafe { request_at(requests, i) }.bits()));
    let (rc, completed) = call();
    if tracking {
        episode::completed(caller, &before, &completed);
    }
    if ours {
        completed.each(count, |i| {
            if persistent::completed(before[i]) {
                // SAFETY: `requests` holds `count` writable handles (this function's contract).
                unsafe { set_request_at(requests, i, mpi::request_null()) };
            }
        });
    }
    BEFORE.set(before);
    rc
}

/// The application is about to free `request` (MPI_Request_free): never start it again.
pub fn freeing(request: MPI_Request) {
    persistent::freed_by_application(request.bits());
}

/// MPI_Finalize is near: free the persistent requests nobody holds.
pub fn finalizing() {
    persistent::release();
}
