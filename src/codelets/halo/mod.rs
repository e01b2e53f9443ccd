//! Halo codelets: ways to post the messages of a halo episode (the application's
//! MPI_Isend/MPI_Irecv calls until the call that completes them). All but `neighbor` only change
//! how and when the same messages are posted, never which messages match, so each rank may run
//! its own; `neighbor` changes matching and runs only on instances every rank agreed to (the
//! agreement is `halo::agreement`'s, above). Each declares what a message needs next to its
//! code; a message that does not meet it is posted natively.
//!
//! Operations held back (`deferred`) must be posted before the application can block on
//! anything: the entry points post them first (ARCHITECTURE.md, "no new blocking").

pub mod deferred;
pub mod irecv_first;
pub mod neighbor;
pub mod pack;
pub mod pairwise;
pub mod persistent;

/// What a message (or episode) needs for a halo codelet to post it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HaloRequirement {
    /// The same message (buffer, count, datatype, peer, tag, communicator) posted before.
    PostedBefore,
    /// A count that fits an int (no large-count persistent or packing calls in MPI-3).
    IntCount,
    /// A peer other than MPI_PROC_NULL (MPICH 4.0 takes a started persistent request to it for an
    /// inactive one; such a message costs nothing anyway).
    RealPeer,
    /// A named peer, not MPI_ANY_SOURCE.
    NamedPeer,
    /// Named peers and tags: no MPI_ANY_SOURCE, no MPI_ANY_TAG.
    NoWildcards,
    /// No post of the same message still in flight.
    NotInFlight,
    /// An episode seen before, so its receive count is known.
    EpisodeSeenBefore,
    /// Every MPI call of the program goes through the library (Open MPI's Fortran bindings and
    /// MPICH's mpi_f08 call PMPI directly, and one of their calls could block while a message
    /// waits).
    EveryCallVisible,
    /// A non-contiguous datatype (a contiguous message is posted as it is).
    NonContiguous,
    /// Completion by one MPI_Waitall (any other call posts the messages at once).
    Waitall,
    /// The messages of one intracommunicator.
    OneIntracommunicator,
    /// Each receive the size of the send it matches.
    MatchingSizes,
    /// Asked for: COMMTUNE_HALO_NEIGHBOR=on (tuning) or COMMTUNE_FORCE=halo=neighbor.
    AskedFor,
    /// Every rank of the communicator runs the episode, and the ranks agreed on it inside the
    /// application's MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv or MPI_Barrier.
    Agreed,
    /// Every message of the episode posted before any other MPI call, the same messages at every
    /// instance.
    PostedAlone,
}

impl HaloRequirement {
    pub fn describe(self) -> &'static str {
        match self {
            Self::PostedBefore => {
                "a message posted before (same buffer, count, datatype, peer, tag, communicator)"
            }
            Self::IntCount => "an int count",
            Self::RealPeer => "a peer other than MPI_PROC_NULL",
            Self::NamedPeer => "a named peer (not MPI_ANY_SOURCE)",
            Self::NoWildcards => "named peers and tags (no MPI_ANY_SOURCE or MPI_ANY_TAG)",
            Self::NotInFlight => "no post of the same message in flight",
            Self::EpisodeSeenBefore => "an episode seen before (its receive count is known)",
            Self::EveryCallVisible => {
                "every MPI call of the program visible (not Open MPI's Fortran bindings or MPICH's mpi_f08)"
            }
            Self::NonContiguous => {
                "a non-contiguous datatype (contiguous messages are posted as they are)"
            }
            Self::Waitall => {
                "completion by one MPI_Waitall (any other call posts the messages at once)"
            }
            Self::OneIntracommunicator => "the messages of one intracommunicator",
            Self::MatchingSizes => "each receive the size of its send",
            Self::AskedFor => "COMMTUNE_HALO_NEIGHBOR=on (tuning) or COMMTUNE_FORCE=halo=neighbor",
            Self::Agreed => {
                "every rank of the communicator runs the episode, and the ranks agree on it inside \
                 the application's MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv or MPI_Barrier \
                 (not under MPI_THREAD_MULTIPLE)"
            }
            Self::PostedAlone => {
                "every message of the episode posted before any other MPI call, the same messages \
                 at every instance"
            }
        }
    }
}

/// One way to post an episode's messages.
pub struct HaloCodelet {
    pub name: &'static str,
    pub requires: &'static [HaloRequirement],
    /// Whether it posts every message of an episode before any of them completes. What a
    /// network makes such a burst wait beyond its typical time is the network's answer to the
    /// burst, not the codelet's: a search pools it over the codelets that burst
    /// (`Sampler::estimates_sharing_tails`).
    pub bursts: bool,
}

impl HaloCodelet {
    /// Its requirements, in words.
    pub fn requirements(&self) -> String {
        let words: Vec<&str> = self.requires.iter().map(|r| r.describe()).collect();
        words.join(", ")
    }
}

/// The halo codelets, in registry order; index 0 is native.
pub const CODELETS: &[HaloCodelet] = &[
    // An episode is the messages posted before the call that completes them.
    HaloCodelet {
        name: "native",
        requires: &[],
        bursts: true,
    },
    persistent::CODELET,
    irecv_first::CODELET,
    pack::CODELET,
    pairwise::CODELET,
    neighbor::CODELET,
];
pub const NATIVE: usize = 0;
pub const PERSISTENT: usize = 1;
pub const IRECV_FIRST: usize = 2;
pub const PACK: usize = 3;
pub const PAIRWISE: usize = 4;
/// The one codelet that changes which messages match: ranks run it only where they agreed.
pub const NEIGHBOR: usize = 5;

/// How a halo codelet dealt with one message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Posted natively: the message does not meet the codelet's requirements.
    Refused,
    /// Taken, and posted as native posts it: nothing to change (a contiguous message for
    /// `pack`, a receive or a send after every receive for `irecv_first`).
    AsItIs,
    /// Taken, and posted differently from native.
    Changed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_indices_name_their_codelets() {
        let at = |i: usize| CODELETS[i].name;
        assert_eq!(at(NATIVE), "native");
        assert_eq!(at(PERSISTENT), "persistent");
        assert_eq!(at(IRECV_FIRST), "irecv_first");
        assert_eq!(at(PACK), "pack");
        assert_eq!(at(PAIRWISE), "pairwise");
        assert_eq!(at(NEIGHBOR), "neighbor");
    }
}
