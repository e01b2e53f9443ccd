//! Halo exchanges: the application's MPI_Isend/MPI_Irecv calls grouped into episodes
//! (`episode`), each posted by its halo codelet (`codelets::halo`: forced, or the one this rank's
//! halo tuning chose, `rank_tuner`), and the one codelet ranks must agree on, `neighbor`, agreed inside
//! the application's collectives (`agreement`). This module dispatches posts and completion calls
//! to them.

mod agreement;
mod episode;
pub mod history;
mod rank_tuner;

pub use rank_tuner::{decided, report as tuning_report};

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::codelets::halo::deferred::{self, commtune_deferred_pending};
use crate::codelets::halo::{
    IRECV_FIRST, NATIVE, NEIGHBOR, Outcome, PACK, PAIRWISE, PERSISTENT, irecv_first, neighbor,
    pack, pairwise, persistent,
};
use crate::mpi::{self, HandleBits, MPI_Comm, MPI_Request, MPI_Status, PointToPoint};

/// Every MPI entry point comes here first while `commtune_deferred_pending` is nonzero (the
/// generated C wrappers of build/entry_points.rs, and `post_deferred`): another MPI call than the
/// posts of an episode, so held operations are posted before it can block.
pub fn post_deferred_now() {
    episode::interrupted();
    neighbor::flush();
    deferred::post_listed();
}

/// Posts every held operation (hand-written entry points, before their MPI call).
#[inline]
pub fn post_deferred() {
    if commtune_deferred_pending.load(Ordering::Acquire) != 0 {
        post_deferred_now();
    }
}

/// Posts the operations of the hold list only: a call that cannot block (MPI_Request_free) leaves
/// a `neighbor` instance being posted held.
pub fn post_deferred_listed() {
    deferred::post_listed();
}

/// The application called a collective on `comm`: every rank of it is there, so ranks may agree
/// on `neighbor` for an episode. `tuned`: the tuner runs the call (and counts it).
#[inline]
pub fn agree_at_collective(comm: MPI_Comm, tuned: bool) {
    agreement::at_collective(
        comm,
        agreement::Episodes {
            open: episode::is_open,
            settled: rank_tuner::is_settled,
        },
        tuned,
    );
}

/// The application freed a communicator (`comms` hook).
pub fn comm_freed(bits: usize) {
    agreement::forget(bits);
    rank_tuner::comm_freed(bits);
}

/// Whether `request` is one of the `neighbor` codelet's generalized requests, which the library
/// then frees itself once its message has gone (MPI_Request_free).
pub fn neighbor_adopts(request: MPI_Request) -> bool {
    neighbor::adopt(request)
}

/// Before a completion call over `requests` (with `wait`, a Wait call): completes the
/// application's requests whose `neighbor` collectives are done.
pub fn progress_neighbor(requests: &[MPI_Request], wait: bool) {
    neighbor::progress(requests, wait);
}

/// Whether a Wait call over `requests` must poll its Test twin instead of blocking
/// (`neighbor::must_poll`).
pub fn neighbor_must_poll(requests: &[MPI_Request]) -> bool {
    neighbor::must_poll(requests)
}

/// Before an MPI_Waitall over `requests`: the `pairwise` codelet's steps.
pub fn run_pairwise_steps(requests: &[MPI_Request]) -> pairwise::Steps {
    pairwise::run_steps(requests)
}

/// After that MPI_Waitall, which returned `rc`: what the steps completed goes into the
/// application's status array (None: MPI_STATUSES_IGNORE); returns MPI_Waitall's code
/// (`pairwise::finish`).
pub fn finish_pairwise_steps(
    statuses: Option<&mut [MPI_Status]>,
    steps: pairwise::Steps,
    rc: c_int,
) -> c_int {
    pairwise::finish(statuses, steps, rc)
}

/// Which requests of the array given to a completion call have completed, with the statuses MPI
/// wrote for them (None: the application ignores them).
pub enum Completed<'a> {
    Nothing,
    /// Waitall/Testall: a status per request.
    All(Option<&'a [MPI_Status]>),
    /// Wait/Test (index 0), Waitany/Testany.
    Index(usize, Option<&'a MPI_Status>),
    /// Waitsome/Testsome: the indices MPI wrote, and a status per index.
    Indices(&'a [c_int], Option<&'a [MPI_Status]>),
    /// The call failed: which requests it completed is what MPI wrote, if anything.
    Failed(Failure<'a>),
}

/// What a failed completion call wrote about the requests it completed (failed or not).
pub enum Failure<'a> {
    /// Nothing: an argument error, or MPI_ERR_IN_STATUS with the statuses ignored.
    Unknown,
    /// MPI_ERR_IN_STATUS from Waitall/Testall: a status per request, MPI_ERR_PENDING where the
    /// request neither failed nor completed.
    Statuses(&'a [MPI_Status]),
    /// Wait/Test (index 0), Waitany/Testany: the request that completed with the error returned.
    Index(usize),
    /// MPI_ERR_IN_STATUS from Waitsome/Testsome: the indices of the requests it completed.
    Indices(&'a [c_int]),
}

impl Completed<'_> {
    /// Calls `f` with the position of every completed request of an array of `n`, and its status.
    fn each(&self, n: usize, mut f: impl FnMut(usize, Option<&MPI_Status>)) {
        match *self {
            Completed::Nothing | Completed::Failed(_) => {}
            Completed::All(statuses) => {
                (0..n).for_each(|i| f(i, statuses.and_then(|s| s.get(i))));
            }
            Completed::Index(i, status) => f(i, status),
            Completed::Indices(indices, statuses) => {
                for (k, &i) in indices.iter().enumerate() {
                    if let Some(i) = usize::try_from(i).ok().filter(|&i| i < n) {
                        f(i, statuses.and_then(|s| s.get(k)));
                    }
                }
            }
        }
    }
}

impl Failure<'_> {
    /// Whether MPI says the failed call completed the request at position `i`.
    fn completed(&self, i: usize) -> bool {
        match *self {
            Failure::Unknown => false,
            Failure::Statuses(statuses) => statuses
                .get(i)
                .is_some_and(|s| mpi::error_class(s.MPI_ERROR) != mpi::ERR_PENDING),
            Failure::Index(index) => index == i,
            Failure::Indices(indices) => indices.iter().any(|&k| usize::try_from(k) == Ok(i)),
        }
    }
}

/// Whether a completion call's statuses must be written and read: a persistent request of the
/// library's may be among its requests, whose failure Open MPI reports in its status alone
/// (`failed_in_status`).
pub fn reads_statuses() -> bool {
    persistent::any_started()
}

/// Whether `request` is a started persistent request of the library's.
pub fn is_persistent_of_ours(request: MPI_Request) -> bool {
    persistent::is_started(request.bits())
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

/// Posts an Isend or Irecv made at `caller` with its episode's halo codelet, and tracks it;
/// `request` is the application's request variable.
pub fn post(caller: usize, call: &PointToPoint, request: &mut MPI_Request) -> c_int {
    pack::poll_orphans(false);
    deferred::post_others_listed();
    let codelet = episode::codelet(caller, call);
    let (rc, outcome) = match codelet {
        PERSISTENT => match persistent::start(call) {
            Some(ours) => {
                *request = ours;
                (mpi::SUCCESS, Outcome::Changed)
            }
            None => (call.native(request), Outcome::Refused),
        },
        IRECV_FIRST => irecv_first::post(call, request, episode::receives_outstanding()),
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
        episode::posted(call, *request, used, outcome == Outcome::Changed);
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

/// Runs `call`, a completion call over the application's `requests`: closes the episode it
/// finishes, hands the library's persistent requests back to the application as
/// MPI_REQUEST_NULL, and unpacks packed receives.
pub fn observe<'i>(
    caller: usize,
    requests: &mut [MPI_Request],
    call: impl FnOnce(&mut [MPI_Request]) -> (c_int, Completed<'i>),
) -> c_int {
    pack::poll_orphans(false);
    let tracking = episode::is_open();
    let ours = persistent::any_started();
    let packed = pack::any_in_flight();
    if !tracking && !ours && !packed {
        return call(requests).0;
    }
    let (mut before, mut owners) = BEFORE.take();
    before.clear();
    before.extend(requests.iter().map(|r| r.bits()));
    // Whose each request is must be known before the call: once MPI completes (and frees) a
    // request, another thread's new request may get its handle before this call returns. A
    // started persistent request is surely the library's (it frees them itself, after they leave
    // `persistent`'s table); a packed message's entry may be another thread's, completed but not
    // yet looked at, whose handle MPI already gave to this request.
    owners.clear();
    owners.resize(requests.len(), Owner::Application);
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
    let (mut rc, completed) = call(requests);
    if ours && rc == mpi::SUCCESS {
        rc = failed_in_status(&completed, &before, &owners).unwrap_or(rc);
    }
    if tracking {
        episode::completed(caller, &before, &completed);
    }
    if let (true, Completed::Failed(failure)) = (ours || packed, &completed) {
        failed(requests, &before, &owners, failure);
    }
    if ours || packed {
        completed.each(requests.len(), |i, _| match owners[i] {
            Owner::Application => {}
            Owner::Persistent => {
                persistent::completed(before[i]);
                requests[i] = mpi::request_null();
            }
            Owner::Packed(ticket) => pack::completed(before[i], ticket),
        });
    }
    BEFORE.set((before, owners));
    rc
}

/// The code a completion call that returned MPI_SUCCESS returns instead, when it completed a
/// persistent request of the library's whose status says it failed (`before` the call, of
/// `owners`): Open MPI returns MPI_SUCCESS over a failed persistent request (from Testall and
/// Testany always, from Waitall sometimes) and says so in its status alone, where the
/// application's own request, which it stands for, fails the call and reaches the error handler.
/// So it does: the request's error from a call that completes one, MPI_ERR_IN_STATUS from one
/// that completes several. The statuses' error fields started as MPI_SUCCESS
/// (`interpose::completion`).
fn failed_in_status(completed: &Completed, before: &[usize], owners: &[Owner]) -> Option<c_int> {
    let mut failure = None;
    completed.each(owners.len(), |i, status| {
        if failure.is_none()
            && matches!(owners[i], Owner::Persistent)
            && let Some(status) = status
            && status.MPI_ERROR != mpi::SUCCESS
        {
            failure = persistent::comm_of(before[i]).map(|comm| (comm, status.MPI_ERROR));
        }
    });
    let (comm, error) = failure?;
    let rc = match completed {
        Completed::Index(..) => error,
        _ => mpi::ERR_IN_STATUS,
    };
    mpi::call_errhandler(comm, rc);
    Some(rc)
}

/// After a completion call over `requests` failed (`before` it, of `owners`; `failure`, what MPI
/// wrote about the requests it completed): MPI freed the application's requests it completed,
/// failed or not, and left the others pending. A packed receive that completed is unpacked now,
/// and its entry goes: MPI may give its handle to a later message. A persistent
/// request of the library's whose handle MPI nulled (it freed it) is forgotten, lest the library
/// free or start it once MPI has given the handle to another request; one MPI says it completed
/// is handed back as MPI_REQUEST_NULL, as the application's own would be. Where MPI wrote nothing
/// the others stay as MPI left them: the application's next completion call over them returns at
/// once, where settling them now could lose the status of one still pending.
fn failed(requests: &mut [MPI_Request], before: &[usize], owners: &[Owner], failure: &Failure) {
    let null = mpi::request_null().bits();
    for (i, owner) in owners.iter().enumerate() {
        match *owner {
            Owner::Application => {}
            Owner::Packed(ticket) => {
                if requests[i].bits() == null {
                    pack::completed(before[i], ticket);
                }
            }
            Owner::Persistent => {
                if requests[i].bits() == null {
                    persistent::freed_by_mpi(before[i]);
                    continue;
                }
                if failure.completed(i)
                    && let Some(comm) = persistent::comm_of(before[i])
                    // A failed request reports its failure again (MPICH), which the
                    // application's handler has had.
                    && mpi::errors_returned(comm, || {
                        mpi::requests::settle_if_done(&mut requests[i])
                    })
                {
                    persistent::completed(before[i]);
                    requests[i] = mpi::request_null();
                }
            }
        }
    }
}

/// The application frees `request` (MPI_Request_free): true when the library took it over (a
/// packed message, completed by the library), false when MPI is to free it; a persistent request
/// of the library's is never started again.
pub fn freeing(request: MPI_Request) -> bool {
    persistent::freed_by_mpi(request.bits());
    pack::adopt(request)
}

/// MPI_Request_get_status said `request` is complete.
pub fn found_complete(request: MPI_Request) {
    pack::found_complete(request.bits());
}

/// MPI_Finalize is near: complete the `neighbor` instances that finished (and say why the other
/// episodes never ran it), finish the packed messages the application freed, free the persistent
/// requests nobody holds.
pub fn finalizing() {
    neighbor::finalizing();
    agreement::finalizing();
    pack::poll_orphans(true);
    persistent::release();
}
