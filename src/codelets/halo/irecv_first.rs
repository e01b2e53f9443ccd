//! The `irecv_first` halo codelet: an episode's receives are posted before its sends. A send
//! posted while receives the episode is predicted to have are still to come is held back (as
//! a persistent request, so that the application holds a valid handle at once) and started when
//! the last of them is posted, or before any other MPI call (`deferred`). The episode's receive
//! count comes from its last instance.

use std::ffi::c_int;

use super::HaloRequirement::{EpisodeSeenBefore, EveryCallVisible, IntCount, RealPeer};
use super::{HaloCodelet, Outcome, deferred, persistent};
use crate::mpi::{self, MPI_Request, PointToPoint, PointToPointKind};

pub const CODELET: HaloCodelet = HaloCodelet {
    name: "irecv_first",
    requires: &[EpisodeSeenBefore, EveryCallVisible, RealPeer, IntCount],
    bursts: true,
};

/// Posts `call`, with `outstanding` whether the episode is predicted to post more receives
/// than it has so far (None: no prediction); returns MPI's code and what the codelet did: a send
/// held back is changed, a receive or a send after every receive goes as it is, and a message
/// whose order could not be kept is refused (posted natively).
pub fn post(
    call: &PointToPoint,
    request: &mut MPI_Request,
    outstanding: Option<bool>,
) -> (c_int, Outcome) {
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
            *request = reserved.handle();
            deferred::defer(reserved, None);
            (mpi::SUCCESS, Outcome::Changed)
        }
        None => (
            deferred::post_listed_then(|| call.native(request)),
            Outcome::Refused,
        ),
    }
}
