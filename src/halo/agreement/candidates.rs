//! Each rank's candidates: the episodes of a communicator that closed steadily and whose
//! messages may travel as one neighbourhood collective.

use std::ffi::c_int;
use std::hash::{BuildHasher, Hash, Hasher};

use rustc_hash::{FxBuildHasher, FxHasher};

use super::{Candidate, MAX_LISTS, communicator, may_agree, trial};
use crate::codelets::halo::neighbor::Expected;
use crate::keys::Entry;
use crate::mpi::{self, HandleBits};

/// Why an episode's messages (`ops`, in posting order) cannot travel as one neighbourhood
/// collective, or the messages to post as one (those to MPI_PROC_NULL go as they are).
pub fn eligibility(ops: impl Iterator<Item = Expected>) -> Result<Vec<Expected>, &'static str> {
    let real: Vec<Expected> = ops.filter(|o| o.peer != mpi::proc_null()).collect();
    let first = real.first().ok_or("every message goes to MPI_PROC_NULL")?;
    if real
        .iter()
        .any(|o| o.comm.get().bits() != first.comm.get().bits())
    {
        return Err("its messages use several communicators");
    }
    if real
        .iter()
        .any(|o| o.peer == mpi::any_source() || o.tag == mpi::any_tag())
    {
        return Err("a receive names MPI_ANY_SOURCE or MPI_ANY_TAG");
    }
    if real.iter().any(|o| c_int::try_from(o.count).is_err()) {
        return Err("a count does not fit an int");
    }
    if mpi::is_intercomm(first.comm.get()) {
        return Err("its communicator is an intercommunicator");
    }
    Ok(real)
}

/// An episode of `entry` closed with messages `ops`: it counts as an instance of its message
/// list, and of the agreed episode with that list, and becomes its communicator's candidate.
/// Only instances whose first post predicted them count as steady: a rank decides at the first
/// post whether an instance runs the collective. Nor do instances with another MPI call between
/// their posts (not `posted_alone`): there a rank would break the agreement while its peers wait
/// in the collective. The messages are checked and kept only when the candidate changes, not at
/// every instance.
pub fn closed(
    entry: &'static Entry,
    predicted: bool,
    posted_alone: bool,
    ops: impl Iterator<Item = Expected> + Clone,
) {
    if !may_agree() {
        return;
    }
    let mut real = ops.filter(|o| o.peer != mpi::proc_null()).peekable();
    let Some(comm) = real.peek().map(|o| o.comm.get()) else {
        trial::instance_closed(None);
        return;
    };
    let list = messages_hash(real.clone());
    {
        let mut c = communicator(comm);
        let counted = c.instances.len() < MAX_LISTS;
        match c.instances.get_mut(&list) {
            Some(closed) => *closed += 1,
            None if counted => drop(c.instances.insert(list, 1)),
            None => {}
        }
        let site = entry.site.id;
        c.latest = Some(site);
        match c.candidates.get_mut(&site) {
            Some(k) if std::ptr::eq(k.entry, entry) && predicted => {
                k.steady = if posted_alone { k.steady + 1 } else { 0 };
            }
            _ => match eligibility(real) {
                Ok(messages) => {
                    let candidate = Candidate {
                        entry,
                        identity: FxBuildHasher.hash_one((site, entry.agree_hash)),
                        steady: u64::from(posted_alone),
                        messages,
                        list,
                    };
                    c.candidates.insert(site, candidate);
                }
                Err(_) => {
                    c.candidates.remove(&site);
                }
            },
        }
    }
    // With the communicator's state released: the agreed episodes are locked after it.
    trial::instance_closed(Some((comm.bits(), list)));
}

/// A hash of an episode's messages (those to MPI_PROC_NULL left out): what names its instances on
/// this rank, whatever call completes them: their identities (`Expected::identity`), by which a
/// post of the agreed episode is told too.
fn messages_hash(messages: impl Iterator<Item = Expected>) -> u64 {
    let mut h = FxHasher::default();
    messages.for_each(|m| m.identity().hash(&mut h));
    h.finish()
}
