//! The `pairwise` halo codelet (ADCL's "pair"): an episode's messages are held back and, in the
//! MPI_Waitall that completes them, exchanged one peer at a time, peers in a global order (the
//! pair of ranks, lowest first), each step finished before the next starts.
//!
//! One rank cannot know that its peers hold all their exchanges with it in the same episode: a
//! peer may wait, in an earlier episode of its own, for a message this rank posts only in a later
//! step. So a step waits at most `PATIENCE`; then every remaining message is posted at once, as
//! natively, and MPI_Waitall completes them: a peer that is not ready delays the exchange but
//! can never deadlock it. Any other MPI call before the MPI_Waitall posts the held messages at
//! once too (`deferred`). Messages to MPI_PROC_NULL are posted as they are.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::HaloRequirement::{
    EveryCallVisible, IntCount, NamedPeer, OneIntracommunicator, Waitall,
};
use super::persistent::{self, Reserved};
use super::{HaloCodelet, deferred};
use crate::mpi::requests::{empty_status, test_all};
use crate::mpi::{self, HandleBits, MPI_Comm, MPI_Request, MPI_Status, PointToPoint};

pub const CODELET: HaloCodelet = HaloCodelet {
    name: "pairwise",
    requires: &[
        Waitall,
        EveryCallVisible,
        NamedPeer,
        OneIntracommunicator,
        IntCount,
    ],
    // One peer at a time, each step finished before the next.
    bursts: false,
};

/// How long a step waits for its peer before the rest of the episode is posted at once.
const PATIENCE: Duration = Duration::from_millis(5);

/// Posts `call` (held back, or natively when it cannot be); returns MPI's code and whether the
/// codelet applied.
pub fn post(call: &PointToPoint, request: &mut MPI_Request) -> (c_int, bool) {
    if call.peer == mpi::proc_null() {
        return (call.native(request), true);
    }
    let reserved = if call.peer == mpi::any_source() || !mpi::sees_every_call() {
        None
    } else {
        persistent::hold(call)
    };
    match reserved {
        Some(reserved) => {
            *request = reserved.handle();
            deferred::defer(reserved, Some(mpi::comm_rank(call.comm)));
            (mpi::SUCCESS, true)
        }
        None => (deferred::post_listed_then(|| call.native(request)), false),
    }
}

/// What the steps of one MPI_Waitall did.
#[derive(Default)]
pub struct Steps {
    /// The statuses of the requests they completed, by position (MPI_Waitall reports them empty:
    /// they are inactive by then).
    saved: Vec<(usize, MPI_Status)>,
    /// The communicator of a step that failed (MPI_ERR_IN_STATUS, under an error handler that
    /// returns), whose failure reached an error handler: MPI_Waitall must say so, though the
    /// requests it then completes are fine.
    failed: Option<MPI_Comm>,
}

/// Before an MPI_Waitall over `requests`: starts every held operation, those of this array that
/// may go step by step one peer at a time.
pub fn run_steps(requests: &[MPI_Request]) -> Steps {
    if !deferred::any() {
        return Steps::default();
    }
    let positions: FxHashMap<usize, usize> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| (r.bits(), i))
        .collect();
    let kept = deferred::start_all_but(|held| {
        let steps: Vec<bool> = held
            .iter()
            .map(|(r, me)| me.is_some() && positions.contains_key(&r.handle().bits()))
            .collect();
        let comm = held
            .iter()
            .zip(&steps)
            .find_map(|((r, _), &step)| step.then_some(r.partner().1));
        // Steps reorder messages: only where they are all of one communicator's held messages,
        // so that no other held message can overtake one of them or be overtaken.
        let alone = held
            .iter()
            .zip(&steps)
            .all(|((r, _), &step)| step == (Some(r.partner().1) == comm));
        if alone { steps } else { Vec::new() }
    });
    let mut stepwise: Vec<(Reserved, c_int)> = kept
        .into_iter()
        .filter_map(|(r, me)| Some((r, me?)))
        .collect();
    stepwise.sort_by_key(|(r, me)| {
        let peer = r.partner().0;
        ((*me).min(peer), (*me).max(peer))
    });
    let mut steps = Steps::default();
    let mut rest = stepwise.into_iter().map(|(r, _)| r).peekable();
    while let Some(first) = rest.next() {
        let (peer, comm) = first.partner();
        let mut step = vec![first];
        while let Some(next) = rest.next_if(|r| r.partner().0 == peer) {
            step.push(next);
        }
        let at: Vec<usize> = step.iter().map(|r| positions[&r.handle().bits()]).collect();
        // A request MPI refused to start is inactive: it completes at once, with an empty status.
        let mut handles: Vec<MPI_Request> = step
            .into_iter()
            .map(|r| persistent::begin(r).unwrap_or_else(mpi::request_null))
            .collect();
        let Some((statuses, rc)) = finish_step(&mut handles) else {
            // The peer is not ready: MPI_Waitall completes the rest as natively.
            rest.for_each(|r| {
                persistent::begin(r);
            });
            break;
        };
        let failed = rc != mpi::SUCCESS || statuses.iter().any(|s| s.MPI_ERROR != mpi::SUCCESS);
        steps
            .saved
            .extend(at.into_iter().zip(statuses).filter(|(_, s)| {
                // After a failure, a request that is neither failed nor complete stays active.
                !failed || mpi::error_class(s.MPI_ERROR) != mpi::ERR_PENDING
            }));
        if failed {
            rest.for_each(|r| {
                persistent::begin(r);
            });
            let comm = MPI_Comm::from_bits(comm);
            if rc == mpi::SUCCESS {
                // Open MPI reports a persistent request's failure in its status alone, and calls
                // no error handler, where MPI_Waitall over the application's own request would:
                // now, with nothing held any more.
                mpi::call_errhandler(comm, mpi::ERR_IN_STATUS);
            }
            steps.failed = Some(comm);
            break;
        }
    }
    steps
}

/// Waits up to `PATIENCE` for a step's requests: their statuses and MPI's code, or None when the
/// peer was not ready (the requests stay active; MPI_Waitall completes them).
fn finish_step(handles: &mut [MPI_Request]) -> Option<(Vec<MPI_Status>, c_int)> {
    // Error fields start as MPI_SUCCESS: MPI writes them only where something failed.
    let mut statuses = vec![empty_status(); handles.len()];
    let start = Instant::now();
    loop {
        if let Some(rc) = test_all(handles, &mut statuses) {
            if rc != mpi::SUCCESS && mpi::error_class(rc) != mpi::ERR_IN_STATUS {
                // MPI wrote no status: each says the call's error.
                statuses.iter_mut().for_each(|s| s.MPI_ERROR = rc);
            }
            return Some((statuses, rc));
        }
        if start.elapsed() > PATIENCE {
            return None;
        }
    }
}

impl Steps {
    /// Runs the application's MPI_Waitall, `wait`, over its status array `statuses` (None:
    /// MPI_STATUSES_IGNORE). After a failed step MPI_Waitall returns MPI_ERR_IN_STATUS, which
    /// defines every status's error field: they start as MPI_SUCCESS, as MPI writes those of
    /// requests that fail, even where it returns MPI_SUCCESS (Open MPI, for a persistent
    /// request). And the failure reached an error handler already: the handlers MPI_Waitall may
    /// call (the step's communicator's, and MPI_COMM_WORLD's, which MPICH's calls) are set aside,
    /// so that one runs once, as for a native MPI_Waitall.
    pub fn quietly(
        &self,
        statuses: Option<&mut [MPI_Status]>,
        wait: impl FnOnce() -> c_int,
    ) -> c_int {
        let Some(comm) = self.failed else {
            return wait();
        };
        if let Some(statuses) = statuses {
            statuses.iter_mut().for_each(|s| s.MPI_ERROR = mpi::SUCCESS);
        }
        mpi::errors_returned(comm, || mpi::errors_returned(mpi::comm_world(), wait))
    }
}

/// After the application's MPI_Waitall, which returned `rc`: writes the statuses the steps saved
/// into its status array (None: MPI_STATUSES_IGNORE) and returns what MPI_Waitall returns.
pub fn finish(statuses: Option<&mut [MPI_Status]>, steps: Steps, rc: c_int) -> c_int {
    if rc != mpi::SUCCESS && mpi::error_class(rc) != mpi::ERR_IN_STATUS {
        // MPI wrote no status.
        return rc;
    }
    if let Some(statuses) = statuses {
        for (i, status) in steps.saved {
            if let Some(slot) = statuses.get_mut(i) {
                *slot = status;
            }
        }
    }
    if steps.failed.is_some() && rc == mpi::SUCCESS {
        mpi::ERR_IN_STATUS
    } else {
        rc
    }
}
