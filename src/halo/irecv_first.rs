//! The `irecv_first` halo codelet: an episode's receives are posted before its sends. A send
//! posted while receives the episode is predicted to have are still to come is held back (as
//! a persistent request, so that the application holds a valid handle at once) and started when
//! the last of them is posted, or before any other MPI call (`deferred`).
//!
//! Requirements: a repeated episode (its receive count is known from the last instance), and a
//! program whose every MPI call passes through the library: Open MPI's Fortran bindings call
//! PMPI directly, so a Fortran MPI call could block while a send waits.

use std::ffi::c_int;

use super::{Outcome, deferred, episode, persistent};
use crate::mpi::requests::set_request_at;
use crate::mpi::{self, MPI_Request, PointToPoint, PointToPointKind};

pub const REQUIRES: &[&str] = &[
    "an episode seen before (its receive count is known)",
    "every MPI call of the program visible (not Open MPI's Fortran bindings)",
    "sends to a peer other than MPI_PROC_NULL with an int count, not already in flight",
];

/// Posts `call`; returns MPI's code and what the codelet did: a send held back is changed,
/// a receive or a send after every receive goes as it is, and a message whose order could not
/// be kept is refused (posted natively).
pub fn post(call: &PointToPoint, request: *mut MPI_Request) -> (c_int, Outcome) {
    let outstanding = episode::receives_outstanding();
    if outstanding.is_none() {
        return (call.native(request), Outcome::Refused);
    }
    if call.kind == PointToPointKind::Recv || outstanding == Some(false) {
        // A receive, or a send after every receive: already in the codelet's order.
        return (call.native(request), Outcome::AsItIs);
    }
    if !mpi::sees_every_call() {
        return (call.native(request), Outcome::Refused);
    }
    match persistent::hold(call) {
        Some(reserved) => {
            // SAFETY: the application's request variable, as MPI_Isend requires.
            unsafe { set_request_at(request, 0, reserved.handle()) };
            deferred::defer(reserved, None);
            (mpi::SUCCESS, Outcome::Changed)
        }
        None => (
            deferred::post_listed_then(|| call.native(request)),
            Outcome::Refused,
        ),
    }
}
