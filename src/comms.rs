//! One record per application communicator: its private duplicate, the count of its collective
//! calls, and what the tuner and the `neighbor` agreement keep about it. The record is made at the
//! communicator's first use and watched once; when the application frees the communicator (every
//! rank is then inside MPI_Comm_free), the layers' hooks run in the order they were registered at
//! load time (the same on every rank: some free communicators of their own, collectively), the
//! private duplicate is freed, and the record starts afresh for the next communicator MPI gives
//! the handle to (its epoch changes, so state kept elsewhere knows it is stale).

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};

use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::mpi::datatype::MpiResult;
use crate::mpi::{self, Comm, HandleBits, MPI_Comm};
use crate::sync::lock;

/// What the library keeps about one application communicator handle.
pub struct Communicator {
    /// Changes when the application frees the communicator.
    pub epoch: AtomicU64,
    /// The application's collective calls on it so far, the same count on every rank: the calls
    /// the tuner runs, and while ranks may agree on `neighbor`, every intercepted collective
    /// (MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv, MPI_Barrier). One writer at a time: MPI lets
    /// one thread at a time call a communicator's collectives.
    pub collectives: AtomicU64,
    /// Whether the current communicator of the handle is watched (a freed one's successor is
    /// watched at its first use).
    watched: AtomicBool,
    private: Mutex<Option<Comm>>,
    /// The tuner's state of it (its own type: this module sits below the tuner).
    pub tuner: OnceLock<&'static (dyn Any + Send + Sync)>,
    /// The `neighbor` agreement's state of it (its own type).
    pub neighbor: OnceLock<&'static (dyn Any + Send + Sync)>,
}

static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// At most this many private duplicates live at once in a process. Each costs MPI a
/// communicator context, of which MPICH has about 2000 per process: without a limit, a program
/// whose communicators each reach a checkpoint would run out at half its own number.
const MAX_PRIVATE: usize = 128;
static PRIVATE_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Why a communicator runs natively when `Communicator::private` fails (for the report).
pub const NO_PRIVATE: &str = "the library could not duplicate the communicator: MPI had no \
                              context left, or a rank already kept the library's 128";

/// Every communicator handle seen, for the whole run (a record is reset, not removed, when its
/// communicator is freed): no limit that could make one rank behave differently.
static RECORDS: LazyLock<DashMap<usize, &'static Communicator, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// What layers do when the application frees a communicator, with its handle bits.
pub type OnFree = fn(usize);

static HOOKS: Mutex<Vec<OnFree>> = Mutex::new(Vec::new());

/// Registers `hook` for every communicator the application frees (at load time, in a fixed
/// order: a hook may free communicators of its own, which is collective).
pub fn on_free(hook: OnFree) {
    lock(&HOOKS).push(hook);
}

/// Every record made so far.
pub fn records() -> Vec<&'static Communicator> {
    RECORDS.iter().map(|r| *r.value()).collect()
}

/// The record of `comm`, made (and watched) at its first use.
pub fn of(comm: MPI_Comm) -> &'static Communicator {
    let record = *RECORDS.entry(comm.bits()).or_insert_with(|| {
        Box::leak(Box::new(Communicator {
            epoch: AtomicU64::new(EPOCHS.fetch_add(1, Ordering::Relaxed)),
            collectives: AtomicU64::new(0),
            watched: AtomicBool::new(false),
            private: Mutex::new(None),
            tuner: OnceLock::new(),
            neighbor: OnceLock::new(),
        }))
    });
    // Outside the map's lock: setting the watch attribute is an MPI call (watching twice is
    // harmless). A communicator MPI refuses to watch keeps its record's state until the run ends.
    if !record.watched.load(Ordering::Acquire) && mpi::watch(comm, freed).is_ok() {
        record.watched.store(true, Ordering::Release);
    }
    record
}

impl Communicator {
    /// Whether the library learns when the application frees the communicator (state about it
    /// that a successor of its handle must not find is only kept then).
    pub fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Acquire)
    }
}

impl Communicator {
    /// The private duplicate of `user` (this record's communicator), where codelets and the
    /// library's own agreements talk: never the application's tags on the application's
    /// communicator.
    ///
    /// Making it is collective over `user`: callers only ask from inside a collective call on
    /// `user` that every rank makes with the same decision to use it (ARCHITECTURE.md, "same
    /// choice").
    pub fn private(&self, user: MPI_Comm) -> MpiResult<Comm> {
        let mut private = lock(&self.private);
        if let Some(comm) = *private {
            return Ok(comm);
        }
        // Whether this rank may make one more is its own count; the duplicate fails on every
        // rank if one may not.
        let join = PRIVATE_LIVE.load(Ordering::Relaxed) < MAX_PRIVATE;
        let comm = mpi::duplicate(user, join)?;
        PRIVATE_LIVE.fetch_add(1, Ordering::Relaxed);
        *private = Some(comm);
        Ok(comm)
    }

    /// The private duplicate if it was made already (never collective).
    pub fn existing_private(&self) -> Option<Comm> {
        *lock(&self.private)
    }
}

/// The record of the communicator handle `bits`, if it was ever used.
pub fn of_bits(bits: usize) -> Option<&'static Communicator> {
    RECORDS.get(&bits).map(|r| *r)
}

/// Every record, for reports at the end of the run.
pub fn all() -> Vec<&'static Communicator> {
    RECORDS.iter().map(|r| *r).collect()
}

/// The private duplicate of `user`; see `Communicator::private`.
pub fn private(user: MPI_Comm) -> MpiResult<Comm> {
    of(user).private(user)
}

/// The application freed the communicator of `bits`: every rank is inside MPI_Comm_free.
fn freed(bits: usize) {
    let Some(record) = of_bits(bits) else {
        return;
    };
    let hooks = lock(&HOOKS).clone();
    hooks.into_iter().for_each(|hook| hook(bits));
    if let Some(private) = lock(&record.private).take() {
        mpi::comm_free(private.raw);
        PRIVATE_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    record.collectives.store(0, Ordering::Relaxed);
    record.watched.store(false, Ordering::Release);
    record
        .epoch
        .store(EPOCHS.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::{MAX_PRIVATE, NO_PRIVATE};

    #[test]
    fn the_reason_names_the_limit() {
        assert!(
            NO_PRIVATE.ends_with(&format!(" {MAX_PRIVATE}")),
            "{NO_PRIVATE}"
        );
    }
}
