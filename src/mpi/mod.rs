//! The only place with raw MPI calls: typed PMPI helpers, the constants mpi-sys lacks, the flavour
//! this library was built for, and the argument records of the intercepted calls.
//!
//! Everything above this module works with safe functions; each `unsafe` block here is one FFI
//! call whose arguments are either our own values or the application's, passed through unchanged.

mod calls;
mod comm;
pub mod datatype;
mod flavour;
pub mod neighbor;
mod private;
mod reduce;
pub mod requests;
mod watch;

use std::ffi::{CStr, c_char, c_int, c_void};

pub use calls::{Allgatherv, Allreduce, Alltoall, Counts, PointToPoint, PointToPointKind};
pub use comm::{Comm, Requests};
pub use flavour::{
    Flavour, at_exit, hidden_calls, mpich_f08_in_use, refuse_other_mpi, sees_every_call,
};
pub use mpi_sys::{MPI_Comm, MPI_Count, MPI_Datatype, MPI_Op, MPI_Request, MPI_Status};
pub use private::duplicate;
pub use reduce::{Spread, StartedMinMax};
pub use watch::{datatypes_freed, is_predefined, size_if_predefined, watch, watch_datatype};

use mpi_sys as ffi;

pub const SUCCESS: c_int = ffi::MPI_SUCCESS as c_int;
/// A request argument MPI rejects (a null request variable).
pub const ERR_REQUEST: c_int = ffi::MPI_ERR_REQUEST as c_int;
/// A completion call over several requests failed for some: their statuses say which.
pub const ERR_IN_STATUS: c_int = ffi::MPI_ERR_IN_STATUS as c_int;
/// An index or count that names no request (Waitany's index when every request is null).
pub const UNDEFINED: c_int = ffi::MPI_UNDEFINED as c_int;
/// In a status after MPI_ERR_IN_STATUS: the request neither failed nor completed.
pub const ERR_PENDING: c_int = ffi::MPI_ERR_PENDING as c_int;

/// Mirrors `struct commtune_mpi_constants` in shim/commtune.h.
#[repr(C)]
pub struct Constants {
    pub in_place: *mut c_void,
    pub bottom: *mut c_void,
    pub byte: MPI_Datatype,
    pub packed: MPI_Datatype,
    pub maxloc: MPI_Op,
    pub minloc: MPI_Op,
    pub replace: MPI_Op,
    pub no_op: MPI_Op,
    pub op_null: MPI_Op,
    pub combiner_named: c_int,
    pub version: c_int,
    pub subversion: c_int,
}

// SAFETY: the record only holds handle values and sentinel addresses that are never dereferenced.
unsafe impl Sync for Constants {}

unsafe extern "C" {
    static commtune_mpi_constants: Constants;
}

pub fn constants() -> &'static Constants {
    // SAFETY: an immutable C object initialised at load time.
    unsafe { &commtune_mpi_constants }
}

/// A handle's bits, to key maps with (handles are pointers in Open MPI, ints in MPICH).
pub trait HandleBits: Copy {
    fn bits(self) -> usize;
    /// The handle whose `bits` these are.
    fn from_bits(bits: usize) -> Self;
}

macro_rules! handle_bits {
    ($($t:ident),*) => {$(
        impl HandleBits for $t {
            fn bits(self) -> usize {
                self.0 as usize
            }

            fn from_bits(bits: usize) -> Self {
                $t(bits as _)
            }
        }
    )*};
}
handle_bits!(MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request);

/// A handle inside a structure that threads share. Open MPI's handles are pointers, which Rust
/// does not let cross threads by itself.
#[derive(Clone, Copy)]
pub struct Shared<H>(H);

// SAFETY: an MPI handle names an object of the library that any thread may use
// (MPI_THREAD_MULTIPLE); the pointer is never dereferenced on this side.
unsafe impl<H: HandleBits> Send for Shared<H> {}
// SAFETY: as above.
unsafe impl<H: HandleBits> Sync for Shared<H> {}

impl<H: HandleBits> Shared<H> {
    pub fn new(handle: H) -> Self {
        Shared(handle)
    }

    pub fn get(self) -> H {
        self.0
    }
}

pub fn comm_world() -> MPI_Comm {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

pub fn request_null() -> MPI_Request {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

pub fn status_ignore() -> *mut MPI_Status {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_STATUS_IGNORE }
}

pub fn statuses_ignore() -> *mut MPI_Status {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_STATUSES_IGNORE }
}

pub fn comm_self() -> MPI_Comm {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_COMM_SELF }
}

pub fn proc_null() -> c_int {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_PROC_NULL }
}

pub fn any_source() -> c_int {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_ANY_SOURCE }
}

pub fn any_tag() -> c_int {
    // SAFETY: reading a constant exported by mpi-sys.
    unsafe { ffi::RSMPI_ANY_TAG }
}

pub fn is_in_place(buf: *const c_void) -> bool {
    buf == constants().in_place.cast_const()
}

/// MPI_Initialized && !MPI_Finalized: whether MPI calls are legal right now.
pub fn is_active() -> bool {
    let (mut init, mut fin) = (0, 0);
    // SAFETY: both calls are legal at any time and write one int each.
    unsafe {
        ffi::PMPI_Initialized(&mut init);
        ffi::PMPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

pub fn init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    // SAFETY: the application's own arguments to MPI_Init, passed through.
    unsafe { ffi::PMPI_Init(argc, argv) }
}

pub fn init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: the application's own arguments to MPI_Init_thread, passed through.
    unsafe { ffi::PMPI_Init_thread(argc, argv, required, provided) }
}

pub fn finalize() -> c_int {
    // SAFETY: no arguments; the application asked for it.
    unsafe { ffi::PMPI_Finalize() }
}

/// The application's MPI_Abort.
pub fn abort(comm: MPI_Comm, code: c_int) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Abort(comm, code) }
}

/// The application's MPI_Op_free.
pub fn op_free(op: *mut MPI_Op) -> c_int {
    // SAFETY: the application's argument, passed through unchanged.
    unsafe { ffi::PMPI_Op_free(op) }
}

/// PMPI_Barrier: the application's MPI_Barrier, or the library's own on a private communicator.
pub fn barrier(comm: MPI_Comm) -> c_int {
    // SAFETY: the application's argument, passed through unchanged.
    unsafe { ffi::PMPI_Barrier(comm) }
}

pub fn comm_rank(comm: MPI_Comm) -> c_int {
    let mut rank = 0;
    // SAFETY: writes one int.
    unsafe { ffi::PMPI_Comm_rank(comm, &mut rank) };
    rank
}

pub fn comm_size(comm: MPI_Comm) -> c_int {
    let mut size = 0;
    // SAFETY: writes one int.
    unsafe { ffi::PMPI_Comm_size(comm, &mut size) };
    size
}

pub fn is_intercomm(comm: MPI_Comm) -> bool {
    let mut flag = 0;
    // SAFETY: writes one int.
    unsafe { ffi::PMPI_Comm_test_inter(comm, &mut flag) };
    flag != 0
}

/// Ranks whose data a collective's per-rank arrays describe: the remote group of an
/// intercommunicator, else the communicator's own size.
pub fn group_size(comm: MPI_Comm) -> c_int {
    if is_intercomm(comm) {
        let mut size = 0;
        // SAFETY: writes one int.
        unsafe { ffi::PMPI_Comm_remote_size(comm, &mut size) };
        size
    } else {
        comm_size(comm)
    }
}

/// Whether the call's handles are not the null handles. A call with a null handle goes straight
/// to MPI, so that MPI reports the error from the application's own call, as it would without us.
pub fn are_valid(comm: MPI_Comm, datatypes: &[MPI_Datatype]) -> bool {
    // SAFETY: reading constants exported by mpi-sys.
    let (comm_null, type_null) = unsafe { (ffi::RSMPI_COMM_NULL, ffi::RSMPI_DATATYPE_NULL) };
    comm.bits() != comm_null.bits() && datatypes.iter().all(|d| d.bits() != type_null.bits())
}

/// Invokes the error handler of the application's communicator, as the MPI call would have.
pub fn call_errhandler(comm: MPI_Comm, code: c_int) {
    // SAFETY: reports an error code on the application's communicator.
    unsafe { ffi::PMPI_Comm_call_errhandler(comm, code) };
}

/// Runs `f` with `comm`'s error handler set aside (MPI_ERRORS_RETURN meanwhile), so that a failure
/// inside reaches no handler of the application's. A call another thread makes on `comm`
/// meanwhile that fails returns its error instead, and a handler another thread sets meanwhile
/// is undone.
pub fn errors_returned<T>(comm: MPI_Comm, f: impl FnOnce() -> T) -> T {
    // SAFETY: reads a constant handle MPI set up at load time.
    let mut handler = unsafe { ffi::RSMPI_ERRORS_RETURN };
    // SAFETY: writes one handle, a new reference that is freed below. (Whether it fails is this
    // rank's own: `f` runs regardless, as it may be collective.)
    let set_aside = unsafe { ffi::PMPI_Comm_get_errhandler(comm, &mut handler) } == SUCCESS;
    if set_aside {
        // SAFETY: sets the error handler of the application's communicator, restored below.
        unsafe { ffi::PMPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) };
    }
    let result = f();
    if set_aside {
        // SAFETY: restores the application's handler and frees the reference taken above.
        unsafe {
            ffi::PMPI_Comm_set_errhandler(comm, handler);
            ffi::PMPI_Errhandler_free(&mut handler);
        }
    }
    result
}

/// The error class of an error code (MPICH's codes carry more than their class).
pub fn error_class(code: c_int) -> c_int {
    let mut class = code;
    // SAFETY: writes one int.
    unsafe { ffi::PMPI_Error_class(code, &mut class) };
    class
}

/// Size in bytes of one element of `datatype` (its data, not its extent).
pub fn type_size(datatype: MPI_Datatype) -> i64 {
    let mut size: MPI_Count = 0;
    // SAFETY: writes one MPI_Count.
    unsafe { ffi::PMPI_Type_size_x(datatype, &mut size) };
    size
}

/// The datatype's MPI name (predefined types always have one), or a description by size.
pub fn type_name(datatype: MPI_Datatype) -> String {
    let mut buf = [0 as c_char; 256];
    let mut len = 0;
    // SAFETY: the buffer is larger than MPI_MAX_OBJECT_NAME of both flavours (64 and 128).
    let rc = unsafe { ffi::PMPI_Type_get_name(datatype, buf.as_mut_ptr(), &mut len) };
    // SAFETY: MPI writes a NUL-terminated name into the buffer.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    if rc == SUCCESS && !name.is_empty() {
        name.into_owned()
    } else {
        format!("derived({} bytes)", type_size(datatype))
    }
}

/// The name of a predefined reduction operation, `user` otherwise.
pub fn op_name(op: MPI_Op) -> &'static str {
    let c = constants();
    // SAFETY: reading constants exported by mpi-sys.
    let named = unsafe {
        [
            (ffi::RSMPI_MAX, "MPI_MAX"),
            (ffi::RSMPI_MIN, "MPI_MIN"),
            (ffi::RSMPI_SUM, "MPI_SUM"),
            (ffi::RSMPI_PROD, "MPI_PROD"),
            (ffi::RSMPI_LAND, "MPI_LAND"),
            (ffi::RSMPI_BAND, "MPI_BAND"),
            (ffi::RSMPI_LOR, "MPI_LOR"),
            (ffi::RSMPI_BOR, "MPI_BOR"),
            (ffi::RSMPI_LXOR, "MPI_LXOR"),
            (ffi::RSMPI_BXOR, "MPI_BXOR"),
            (c.maxloc, "MPI_MAXLOC"),
            (c.minloc, "MPI_MINLOC"),
            (c.replace, "MPI_REPLACE"),
            (c.no_op, "MPI_NO_OP"),
        ]
    };
    named
        .iter()
        .find(|(h, _)| h.bits() == op.bits())
        .map_or("user", |(_, name)| name)
}

/// Whether MPI provides MPI_THREAD_MULTIPLE to this process: threads may be inside MPI calls
/// at once.
pub fn threads_at_once() -> bool {
    let mut provided = 0;
    // SAFETY: legal once MPI is initialised; writes one int; reading a constant of mpi-sys.
    unsafe {
        ffi::PMPI_Query_thread(&mut provided);
        provided == ffi::RSMPI_THREAD_MULTIPLE
    }
}

/// The MPI library's name and version, from the first line of MPI_Get_library_version.
pub fn library_version() -> String {
    // MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI and 8192 in MPICH.
    let mut buf = vec![0 as c_char; 8192];
    let mut len = 0;
    // SAFETY: the buffer is as large as either flavour's maximum; legal before MPI_Init.
    unsafe { ffi::PMPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    // SAFETY: MPI writes a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    // "Open MPI v4.1.4, package: ..." / "MPICH Version:      4.0.2"
    let first = text.lines().next().unwrap_or("");
    let name = first.split(',').next().unwrap_or("");
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A private duplicate of `comm`; collective over `comm`.
pub fn comm_dup(comm: MPI_Comm) -> Option<MPI_Comm> {
    let mut dup = comm;
    // SAFETY: writes one handle.
    let rc = unsafe { ffi::PMPI_Comm_dup(comm, &mut dup) };
    (rc == SUCCESS).then_some(dup)
}

pub fn comm_free(mut comm: MPI_Comm) {
    // SAFETY: frees a communicator this library created.
    unsafe { ffi::PMPI_Comm_free(&mut comm) };
}

/// Gathers variable-length byte strings to rank 0 of `comm` (None on other ranks or on error).
/// Every rank takes the same path: lengths first (64-bit), then rank 0 says whether the total
/// fits one MPI_Gatherv; if not, every rank sends nothing and rank 0 gets only its own string.
pub fn gather_bytes(comm: MPI_Comm, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
    let rank = comm_rank(comm);
    let size = comm_size(comm).max(0) as usize;
    let len = mine.len() as i64;
    let mut lens = vec![0i64; if rank == 0 { size } else { 0 }];
    // SAFETY: lens has `size` int64s on the root, where alone it is written.
    let rc = unsafe {
        ffi::PMPI_Gather(
            (&len as *const i64).cast(),
            1,
            ffi::RSMPI_INT64_T,
            lens.as_mut_ptr().cast(),
            1,
            ffi::RSMPI_INT64_T,
            0,
            comm,
        )
    };
    if rc != SUCCESS {
        return None;
    }
    let mut fits = c_int::from(lens.iter().sum::<i64>() <= i64::from(c_int::MAX));
    // SAFETY: broadcasts one int we own.
    let rc = unsafe {
        ffi::PMPI_Bcast(
            (&mut fits as *mut c_int).cast(),
            1,
            ffi::RSMPI_INT32_T,
            0,
            comm,
        )
    };
    if rc != SUCCESS {
        return None;
    }
    if fits == 0 {
        return (rank == 0).then(|| vec![mine.to_vec()]);
    }
    let counts: Vec<c_int> = lens.iter().map(|&l| l as c_int).collect();
    let mut displs = Vec::with_capacity(counts.len());
    let mut total: usize = 0;
    for &l in &counts {
        displs.push(total as c_int);
        total += l as usize;
    }
    let mut all = vec![0u8; total];
    // SAFETY: `all` holds the sum of all lengths on the root, which fits an int; every rank's
    // own length fits too (it is part of that sum).
    let rc = unsafe {
        ffi::PMPI_Gatherv(
            mine.as_ptr().cast(),
            len as c_int,
            constants().byte,
            all.as_mut_ptr().cast(),
            counts.as_ptr(),
            displs.as_ptr(),
            constants().byte,
            0,
            comm,
        )
    };
    if rc != SUCCESS || rank != 0 {
        return None;
    }
    Some(
        counts
            .iter()
            .zip(&displs)
            .map(|(&l, &d)| all[d as usize..(d + l) as usize].to_vec())
            .collect(),
    )
}
