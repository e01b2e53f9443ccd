//! Keys (call site × operation × signature) and what is measured for each.
//!
//! The hot path is one lookup in a lock-free table from the call's raw identity (return address,
//! handles, counts) to its `Key`, and one pointer read to the key's entry. A miss consults the
//! process-wide registry, and the first time anywhere, describes the key. MPI reuses handle
//! values once the application frees their object, so a key is described again when one of the
//! handles its description read is freed (`freed`). Entries live until the process ends (the
//! report reads them at MPI_Finalize), so they are leaked and handed out as `&'static`.

mod entry;
mod estimate;
mod registry;
mod table;

pub use entry::{Entry, Measured};
pub use registry::{entries, find};
pub use table::Table;

use std::any::Any;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};

use commtune_report::Op;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::comms;
use crate::mpi::{self, HandleBits, MPI_Comm, MPI_Datatype, MPI_Op};
use crate::site::SiteRef;
use crate::sync::LeakedCell;

use registry::site_entry;

/// The raw identity of a call: who called, which operation, and the signature as handle bits
/// and counts (process-local values; `Entry` holds their cross-rank description).
#[derive(Clone, Copy, Debug)]
pub struct CallKey {
    pub caller: usize,
    pub op: Op,
    pub words: [u64; 5],
}

impl PartialEq for CallKey {
    /// Branch-free: the derived comparison becomes a memcmp call on the hot path.
    fn eq(&self, other: &Self) -> bool {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .fold(0, |acc, (a, b)| acc | (a ^ b));
        words | (self.caller ^ other.caller) as u64 == 0 && self.op == other.op
    }
}

impl Eq for CallKey {}

impl Hash for CallKey {
    /// One word: the key's fields folded with rotations (one hasher round instead of seven;
    /// a collision only costs a probe).
    fn hash<H: Hasher>(&self, state: &mut H) {
        let folded = self.words.iter().enumerate().fold(
            self.caller as u64 ^ ((self.op as u64) << 56),
            |h, (i, w)| h ^ w.rotate_left(11 * (i as u32 + 1)),
        );
        state.write_u64(folded);
    }
}

/// What the report says about a key, computed when the key is first seen (and again when a
/// handle it was described with is freed, see `Key`).
pub struct Description {
    /// Identifies the key across ranks together with the site (see `KeyData::merge_key`).
    pub merge_key: String,
    /// What the tuner's ranks agree on: what the MPI standard makes identical on every rank at
    /// the same instance of a communicator's collectives (operation, bytes, reduction, size),
    /// never the call site or datatype handles, which may differ from rank to rank; and every
    /// fact codelet requirements read (`codelets::Facts`), so that calls sharing a search and its
    /// winner also share which codelets may run them.
    pub agree: String,
    pub signature: String,
    /// What codelet requirements read (`codelets::Facts::agreed`), for the history store; empty
    /// for halo episodes.
    pub facts: String,
    pub bytes_per_call: u64,
    /// Halo episodes (tuned per rank): the identity of the episodes that share one search, their
    /// messages with bytes in size classes (`commtune_tune::classes`; the tuner adds their
    /// communicators' epochs, `halo::rank_tuner::class`). None for collectives,
    /// whose `agree` already has sizes in classes.
    pub class: Option<u64>,
    /// The handles of the call whose meaning the description (above all `agree`) reads: when
    /// the application frees one, MPI may give its handle value to an object of another size or
    /// kind, so the key is described again at its next call.
    pub handles: Vec<Handle>,
}

/// A handle the application may free, by its bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Handle {
    Comm(usize),
    Datatype(usize),
    Op(usize),
}

/// The handles among a call's communicator, datatypes and reduction operation that the
/// application can free (predefined ones never are; listing them would only grow their lists).
pub fn freeable(comm: MPI_Comm, datatypes: &[MPI_Datatype], op: Option<MPI_Op>) -> Vec<Handle> {
    let mut handles = Vec::new();
    if comm.bits() != mpi::comm_world().bits() && comm.bits() != mpi::comm_self().bits() {
        handles.push(Handle::Comm(comm.bits()));
    }
    for &datatype in datatypes {
        let handle = Handle::Datatype(datatype.bits());
        if !mpi::is_predefined(datatype) && !handles.contains(&handle) {
            handles.push(handle);
        }
    }
    if let Some(op) = op.filter(|&op| mpi::op_name(op) == "user") {
        handles.push(Handle::Op(op.bits()));
    }
    handles
}

/// One raw call identity (`CallKey`): the entry its calls are measured in, and the agreed
/// identity and tuner they run under. Keys whose handles are freed are marked stale and
/// described again at their next call, so a handle value MPI hands out again for another object
/// never finds the old object's identity (its bytes, its operation's commutativity).
pub struct Key {
    call: CallKey,
    /// The entry of the latest description; null while the key is stale, so that the hot path
    /// reads one pointer for both.
    current: LeakedCell<Entry>,
    /// The entry of the latest description, stale or not.
    described: LeakedCell<Entry>,
    /// Set with `current` cleared when a handle is freed; a description that began before the
    /// mark is not trusted.
    stale: AtomicBool,
    /// The agreed identity: `(op, Description::agree)` hashed; what checkpoints compare, and the
    /// tuner of the key on its communicator.
    agree_hash: AtomicU64,
    /// What the tuner keeps with the key (its own type: this measurement store imports nothing
    /// above it). It checks the link against `agree_hash` at each call.
    pub tuner: OnceLock<&'static (dyn Any + Send + Sync)>,
}

impl Key {
    #[inline]
    pub fn agree_hash(&self) -> u64 {
        self.agree_hash.load(Ordering::Relaxed)
    }

    /// The key's entry, described again first if one of its handles was freed since.
    #[inline]
    fn entry(&'static self, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
        match self.current.get() {
            Some(entry) => entry,
            None => self.refresh(describe),
        }
    }

    /// Describes the key again after one of its handles was freed; a changed description moves
    /// it to its new entry and agreed identity (the tuner then finds its link stale: it links
    /// by agreed identity).
    #[cold]
    fn refresh(&'static self, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
        self.stale.store(false, Ordering::SeqCst);
        let mut description = describe(self.call.caller);
        let handles = std::mem::take(&mut description.handles);
        let agree_hash = agree_hash(self.call.op, &description.agree);
        let mut entry = self.described.get().expect("set when the key is made");
        if entry.description.merge_key != description.merge_key || agree_hash != self.agree_hash() {
            entry = site_entry(self.call, description, agree_hash);
            self.described.set(entry);
            self.agree_hash.store(agree_hash, Ordering::Relaxed);
        }
        depend(self, &handles, true);
        self.current.set(entry);
        // A handle freed while describing: describe again at the next call.
        if self.stale.load(Ordering::SeqCst) {
            self.current.clear();
        }
        entry
    }

    fn mark_stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
        self.current.clear();
    }
}

/// At MPI_Init: builds the store's tables, which the first intercepted call would build otherwise.
pub fn prepare() {
    registry::prepare();
    LazyLock::force(&DEPENDENTS);
}

fn agree_hash(op: Op, agree: &str) -> u64 {
    FxBuildHasher.hash_one((op, agree))
}

/// Keys to mark stale when a handle is freed.
static DEPENDENTS: LazyLock<DashMap<Handle, Vec<&'static Key>, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// Remembers that `key` was described with `handles`, and watches them; `again`: the key may
/// already be listed (it is described again).
fn depend(key: &'static Key, handles: &[Handle], again: bool) {
    for &handle in handles {
        let first = {
            let mut keys = DEPENDENTS.entry(handle).or_default();
            if !(again && keys.iter().any(|k| std::ptr::eq(*k, key))) {
                keys.push(key);
            }
            keys.len() == 1
        };
        // Outside the map's lock: setting an attribute is an MPI call. Ops have no attributes:
        // the shim reports MPI_Op_free (`commtune_op_free`).
        if first {
            let _ = match handle {
                Handle::Comm(bits) => {
                    comms::of(MPI_Comm::from_bits(bits));
                    Ok(())
                }
                Handle::Datatype(bits) => {
                    mpi::watch_datatype(MPI_Datatype::from_bits(bits), freed_datatype)
                }
                Handle::Op(_) => Ok(()),
            };
        }
    }
}

/// `handle` was freed: its keys are described again at their next call.
pub fn freed(handle: Handle) {
    if let Some((_, keys)) = DEPENDENTS.remove(&handle) {
        keys.iter().for_each(|k| k.mark_stale());
    }
}

/// The application freed a communicator (`comms` hook).
pub fn comm_freed(bits: usize) {
    freed(Handle::Comm(bits));
}

fn freed_datatype(bits: usize) {
    freed(Handle::Datatype(bits));
}

#[cfg(test)]
mod tests {
    use super::entry::MAX_CODELETS;
    use super::*;

    #[test]
    fn every_registry_fits_the_per_key_counters() {
        for op in [Op::Allreduce, Op::Alltoall, Op::Allgatherv, Op::Halo] {
            let names = crate::codelets::names(op);
            assert!(names.len() <= MAX_CODELETS, "{op:?}");
            assert_eq!(names[0], "native", "{op:?}: native comes first");
        }
    }
}
