//! Learning when the application frees a communicator or a derived datatype, so that state keyed
//! by its handle dies with it.
//!
//! An attribute with a delete callback hangs on the object: MPI calls the callback when the object
//! is freed (from C, Fortran or anything else), so no MPI_Comm_free/MPI_Type_free wrapper is
//! needed, and a handle value that MPI reuses for a new object never finds stale state.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use mpi_sys as ffi;
use rustc_hash::FxBuildHasher;

use super::datatype::{MpiResult, check};
use super::{HandleBits, MPI_Comm, MPI_Datatype, SUCCESS, constants};

/// What to call when a watched object is freed, with its handle bits.
pub type OnFree = fn(usize);

type Watchers = LazyLock<DashMap<usize, Vec<OnFree>, FxBuildHasher>>;

static COMMS: Watchers = LazyLock::new(DashMap::default);
static COMM_KEYVAL: OnceLock<c_int> = OnceLock::new();
static DATATYPES: Watchers = LazyLock::new(DashMap::default);
static DATATYPE_KEYVAL: OnceLock<c_int> = OnceLock::new();
/// Watched datatypes freed so far (`datatypes_freed`).
static DATATYPES_FREED: AtomicU64 = AtomicU64::new(0);

/// Calls `on_free(user's handle bits)` when the application frees `user` (a local call: it only
/// hangs an attribute on the communicator). Watching again with the same function does nothing.
pub fn watch(user: MPI_Comm, on_free: OnFree) -> MpiResult {
    if !add(&COMMS, user.bits(), on_free) {
        return Ok(());
    }
    let keyval = comm_keyval(&COMM_KEYVAL, comm_freed)?;
    // SAFETY: the attribute value is unused; the callback only reads the handle.
    check(unsafe { ffi::PMPI_Comm_set_attr(user, keyval, std::ptr::null_mut()) })
}

/// As `watch`, for a datatype. Predefined datatypes are never freed: nothing to watch.
pub fn watch_datatype(datatype: MPI_Datatype, on_free: OnFree) -> MpiResult {
    if is_predefined(datatype) || !add(&DATATYPES, datatype.bits(), on_free) {
        return Ok(());
    }
    let keyval = datatype_keyval()?;
    // SAFETY: the attribute value is unused; the callback only reads the handle.
    check(unsafe { ffi::PMPI_Type_set_attr(datatype, keyval, std::ptr::null_mut()) })
}

/// How many watched datatypes the application has freed so far. The application may free a
/// datatype while messages that use it are in flight (MPI-4.1 section 5.1.10: they complete
/// normally), and MPI may destroy it when they complete: state that reads a datatype after its
/// messages completed reads it only where this count did not change since the messages were
/// posted with it, watched. MPI calls the watch while the datatype is still valid, however late
/// it destroys it.
pub fn datatypes_freed() -> u64 {
    DATATYPES_FREED.load(Ordering::Acquire)
}

/// Adds `on_free` to the watchers of `bits`; true when it is the object's first watcher (the
/// attribute is still to be set).
fn add(watchers: &Watchers, bits: usize, on_free: OnFree) -> bool {
    match watchers.entry(bits) {
        Entry::Occupied(mut list) => {
            if !list.get().iter().any(|&f| f as usize == on_free as usize) {
                list.get_mut().push(on_free);
            }
            false
        }
        Entry::Vacant(slot) => {
            slot.insert(vec![on_free]);
            true
        }
    }
}

fn freed(watchers: &Watchers, bits: usize) -> c_int {
    if let Some((_, list)) = watchers.remove(&bits) {
        list.into_iter().for_each(|on_free| on_free(bits));
    }
    SUCCESS
}

extern "C" fn comm_freed(
    user: MPI_Comm,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    freed(&COMMS, user.bits())
}

extern "C" fn datatype_freed(
    datatype: MPI_Datatype,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    DATATYPES_FREED.fetch_add(1, Ordering::Release);
    freed(&DATATYPES, datatype.bits())
}

/// The size of `datatype` and whether it is predefined (never freed, so its handle never changes
/// meaning): a thread remembers the last predefined types it asked about, so that a halo post
/// queries MPI only for derived ones. On shared memory (2 ranks, episodes of four 64-byte
/// messages, profile mode, against the library before it watched types) the two queries at every
/// post made an episode 1.10 times as long; remembered, 1.05.
pub fn size_if_predefined(datatype: MPI_Datatype) -> (i64, bool) {
    const REMEMBERED: usize = 8;
    thread_local! {
        static PREDEFINED: [Cell<(usize, i64)>; REMEMBERED] =
            const { [const { Cell::new((0, 0)) }; REMEMBERED] };
        static NEXT: Cell<usize> = const { Cell::new(0) };
    }
    let bits = datatype.bits();
    let known = PREDEFINED.with(|p| p.iter().map(Cell::get).find(|&(b, _)| b == bits && b != 0));
    if let Some((_, size)) = known {
        return (size, true);
    }
    let size = super::type_size(datatype);
    let predefined = is_predefined(datatype);
    if predefined && bits != 0 {
        let at = NEXT.with(|n| n.replace((n.get() + 1) % REMEMBERED));
        PREDEFINED.with(|p| p[at].set((bits, size)));
    }
    (size, predefined)
}

/// Whether `datatype` is predefined (never freed); an invalid handle counts as one too.
pub fn is_predefined(datatype: MPI_Datatype) -> bool {
    let (mut integers, mut addresses, mut datatypes, mut combiner) = (0, 0, 0, 0);
    // SAFETY: writes four ints.
    let rc = unsafe {
        ffi::PMPI_Type_get_envelope(
            datatype,
            &mut integers,
            &mut addresses,
            &mut datatypes,
            &mut combiner,
        )
    };
    rc != SUCCESS || combiner == constants().combiner_named
}

type CommDeleteFn = extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;

/// The communicator keyval in `slot`, created on first use with `on_delete` as its callback.
fn comm_keyval(slot: &OnceLock<c_int>, on_delete: CommDeleteFn) -> MpiResult<c_int> {
    keyval(slot, |keyval| {
        // SAFETY: registers two callbacks with the signatures MPI expects; writes one int.
        unsafe {
            ffi::PMPI_Comm_create_keyval(
                Some(not_copied::<MPI_Comm>),
                Some(on_delete),
                keyval,
                std::ptr::null_mut(),
            )
        }
    })
}

fn datatype_keyval() -> MpiResult<c_int> {
    keyval(&DATATYPE_KEYVAL, |keyval| {
        // SAFETY: registers two callbacks with the signatures MPI expects; writes one int.
        unsafe {
            ffi::PMPI_Type_create_keyval(
                Some(not_copied::<MPI_Datatype>),
                Some(datatype_freed),
                keyval,
                std::ptr::null_mut(),
            )
        }
    })
}

/// The keyval in `slot`, made by `create` on first use.
fn keyval(slot: &OnceLock<c_int>, create: impl FnOnce(&mut c_int) -> c_int) -> MpiResult<c_int> {
    if let Some(&k) = slot.get() {
        return Ok(k);
    }
    let mut keyval = 0;
    check(create(&mut keyval))?;
    Ok(*slot.get_or_init(|| keyval))
}

/// A duplicate of a watched object (communicator or datatype handle `H`) is a new object,
/// watched when it is first used.
extern "C" fn not_copied<H>(
    _old: H,
    _keyval: c_int,
    _extra: *mut c_void,
    _value_in: *mut c_void,
    _value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer to copy callbacks.
    unsafe { *flag = 0 };
    SUCCESS
}
