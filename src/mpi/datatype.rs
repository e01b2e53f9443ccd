//! Buffers as MPI sees them (address, count, datatype) and the local operations codelets need on
//! them: layout queries, scratch buffers, local copies between datatypes, local reductions.
//!
//! Application buffers are handed to MPI, which knows their layout, so derived datatypes with
//! gaps, negative lower bounds and MPI_BOTTOM work unchanged; the one exception is `copy`
//! between two gap-free buffers of one datatype, a plain memory copy.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

use mpi_sys as ffi;

use super::{HandleBits, MPI_Count, MPI_Datatype, MPI_Op, SUCCESS, constants};

/// An MPI return code other than MPI_SUCCESS.
pub type MpiResult<T = ()> = Result<T, c_int>;

pub fn check(rc: c_int) -> MpiResult {
    if rc == SUCCESS { Ok(()) } else { Err(rc) }
}

/// Extent and bounds of a datatype, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub size: i64,
    pub extent: i64,
    pub true_lb: i64,
    pub true_extent: i64,
}

impl Layout {
    pub fn of(datatype: MPI_Datatype) -> MpiResult<Layout> {
        let (mut lb, mut extent, mut true_lb, mut true_extent, mut size): (
            MPI_Count,
            MPI_Count,
            MPI_Count,
            MPI_Count,
            MPI_Count,
        ) = (0, 0, 0, 0, 0);
        // SAFETY: each call writes the out-parameters it is given.
        unsafe {
            check(ffi::PMPI_Type_get_extent_x(datatype, &mut lb, &mut extent))?;
            check(ffi::PMPI_Type_get_true_extent_x(
                datatype,
                &mut true_lb,
                &mut true_extent,
            ))?;
            check(ffi::PMPI_Type_size_x(datatype, &mut size))?;
        }
        Ok(Layout {
            size,
            extent,
            true_lb,
            true_extent,
        })
    }

    /// Whether `count` elements are one block of `count * size` bytes from the buffer address.
    pub fn is_contiguous(&self) -> bool {
        self.size == self.extent && self.true_lb == 0 && self.true_extent == self.size
    }

    /// Bytes a scratch buffer needs to hold `count` elements.
    pub fn span(&self, count: i64) -> i64 {
        if count <= 0 {
            0
        } else {
            self.true_extent + (count - 1) * self.extent
        }
    }
}

/// `count` elements of `datatype` at `ptr`, as passed to MPI.
#[derive(Clone, Copy, Debug)]
pub struct Buf {
    pub ptr: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    /// The datatype's extent: element `i` starts `i * extent` bytes after `ptr`.
    pub extent: i64,
}

// SAFETY: a Buf names memory the application handed to an MPI call; the library reads or writes
// it only within that call's contract (until its request completes), from whichever thread
// completes it, as MPI itself would.
unsafe impl Send for Buf {}

impl Buf {
    pub fn new(ptr: *mut c_void, count: i64, datatype: MPI_Datatype) -> MpiResult<Buf> {
        Ok(Buf {
            ptr,
            count,
            datatype,
            extent: Layout::of(datatype)?.extent,
        })
    }

    /// `count` elements starting at element `first`.
    pub fn slice(&self, first: i64, count: i64) -> Buf {
        Buf {
            ptr: self
                .ptr
                .cast::<u8>()
                .wrapping_offset((first * self.extent) as isize)
                .cast(),
            count,
            ..*self
        }
    }

    /// The same memory seen as `count` elements of `datatype` (another type signature view).
    pub fn with_count(&self, count: i64) -> Buf {
        Buf { count, ..*self }
    }

    pub(super) fn int_count(&self) -> MpiResult<c_int> {
        c_int::try_from(self.count).map_err(|_| ffi::MPI_ERR_COUNT as c_int)
    }
}

/// A buffer of our own for `count` elements of a datatype (laid out as MPI would).
pub struct Scratch {
    /// Never read by Rust, only handed to MPI: no need to zero megabytes per call.
    storage: Box<[MaybeUninit<u8>]>,
    true_lb: i64,
    count: i64,
    datatype: MPI_Datatype,
    extent: i64,
}

impl Scratch {
    pub fn new(count: i64, datatype: MPI_Datatype) -> MpiResult<Scratch> {
        let layout = Layout::of(datatype)?;
        let bytes = usize::try_from(layout.span(count)).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        Ok(Scratch {
            storage: Box::new_uninit_slice(bytes),
            true_lb: layout.true_lb,
            count,
            datatype,
            extent: layout.extent,
        })
    }

    /// The buffer as MPI addresses it: the datatype's lower bound may be before the storage.
    pub fn buf(&mut self) -> Buf {
        Buf {
            ptr: self
                .storage
                .as_mut_ptr()
                .cast::<u8>()
                .wrapping_offset(-(self.true_lb as isize))
                .cast(),
            count: self.count,
            datatype: self.datatype,
            extent: self.extent,
        }
    }
}

/// Bytes MPI_Pack needs for `count` elements of `datatype`.
pub fn pack_size(count: i64, datatype: MPI_Datatype) -> MpiResult<usize> {
    let count = c_int::try_from(count).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
    let mut bytes = 0;
    // SAFETY: writes one int.
    check(unsafe { ffi::PMPI_Pack_size(count, datatype, super::comm_self(), &mut bytes) })?;
    Ok(bytes.max(0) as usize)
}

/// Packs `src` into `out` (MPI_PACKED data), returning the bytes written.
pub fn pack(src: &Buf, out: &mut [u8]) -> MpiResult<usize> {
    let size = c_int::try_from(out.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
    let mut position = 0;
    // SAFETY: `out` has `size` bytes; `src` is the application's buffer or a scratch buffer.
    check(unsafe {
        ffi::PMPI_Pack(
            src.ptr,
            src.int_count()?,
            src.datatype,
            out.as_mut_ptr().cast(),
            size,
            &mut position,
            super::comm_self(),
        )
    })?;
    Ok(position as usize)
}

/// Unpacks MPI_PACKED data from `input` into `dst`.
pub fn unpack(input: &[u8], dst: &Buf) -> MpiResult {
    let size = c_int::try_from(input.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
    let mut position = 0;
    // SAFETY: `input` has `size` bytes; MPI writes `dst.count` elements into `dst`.
    check(unsafe {
        ffi::PMPI_Unpack(
            input.as_ptr().cast(),
            size,
            &mut position,
            dst.ptr,
            dst.int_count()?,
            dst.datatype,
            super::comm_self(),
        )
    })
}

/// Copies `src` into `dst`, whose type signatures must match: one memory copy when both are the
/// same gap-free datatype, else pack then unpack (any pair of datatypes, no message involved).
pub fn copy(src: &Buf, dst: &Buf) -> MpiResult {
    if src.datatype.bits() == dst.datatype.bits() && src.count == dst.count {
        let layout = Layout::of(src.datatype)?;
        if layout.is_contiguous() {
            let bytes = usize::try_from(src.count * layout.size).unwrap_or(0);
            // SAFETY: both buffers hold `count` gap-free elements of this datatype (the
            // application's or a scratch buffer); MPI forbids a call's send and receive buffers
            // to overlap, and scratch buffers are distinct allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(src.ptr.cast::<u8>(), dst.ptr.cast::<u8>(), bytes)
            };
            return Ok(());
        }
    }
    let mut packed = vec![0u8; pack_size(src.count, src.datatype)?];
    let n = pack(src, &mut packed)?;
    unpack(&packed[..n], dst)
}

/// No data (a message that only says something by arriving).
pub fn empty_buf() -> Buf {
    Buf {
        ptr: std::ptr::NonNull::<u8>::dangling().as_ptr().cast(),
        count: 0,
        // SAFETY: reading a constant exported by mpi-sys.
        datatype: unsafe { ffi::RSMPI_UINT8_T },
        extent: 1,
    }
}

/// A buffer of packed bytes as MPI sees it (MPI_PACKED elements).
pub fn packed_buf(bytes: &mut [u8]) -> Buf {
    Buf {
        ptr: bytes.as_mut_ptr().cast(),
        count: bytes.len() as i64,
        datatype: constants().packed,
        extent: 1,
    }
}

/// `inout = input op inout`, element-wise (MPI_Reduce_local: the order matters for
/// non-commutative operations).
pub fn reduce_local(input: &Buf, inout: &Buf, op: MPI_Op) -> MpiResult {
    // SAFETY: both buffers hold `count` elements of the datatype (scratch or application).
    check(unsafe {
        ffi::PMPI_Reduce_local(input.ptr, inout.ptr, inout.int_count()?, inout.datatype, op)
    })
}

pub fn is_commutative(op: MPI_Op) -> bool {
    let mut commute = 0;
    // SAFETY: writes one int.
    let rc = unsafe { ffi::PMPI_Op_commutative(op, &mut commute) };
    rc == SUCCESS && commute != 0
}

/// A committed datatype made of blocks of `base` at element displacements, freed on drop.
pub struct Indexed(MPI_Datatype);

impl Indexed {
    /// Block `i` is `counts[i]` elements of `base` starting `displacements[i]` extents of `base`
    /// after the buffer address, as MPI_Type_indexed would place it. Built from byte
    /// displacements (MPI_Type_create_hindexed): displacements of the MPI-4 large-count calls
    /// may exceed the int range of MPI_Type_indexed.
    pub fn new(counts: &[c_int], displacements: &[i64], base: MPI_Datatype) -> MpiResult<Self> {
        let n = c_int::try_from(counts.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        if displacements.len() != counts.len() {
            return Err(ffi::MPI_ERR_ARG as c_int);
        }
        let extent = Layout::of(base)?.extent;
        let bytes = displacements
            .iter()
            .map(|&d| {
                d.checked_mul(extent)
                    .and_then(|b| ffi::MPI_Aint::try_from(b).ok())
                    .ok_or(ffi::MPI_ERR_COUNT as c_int)
            })
            .collect::<MpiResult<Vec<ffi::MPI_Aint>>>()?;
        let mut datatype = base;
        // SAFETY: both arrays have `n` entries; writes one handle, then commits it.
        unsafe {
            check(ffi::PMPI_Type_create_hindexed(
                n,
                counts.as_ptr(),
                bytes.as_ptr(),
                base,
                &mut datatype,
            ))?;
            check(ffi::PMPI_Type_commit(&mut datatype))?;
        }
        Ok(Indexed(datatype))
    }

    pub fn datatype(&self) -> MPI_Datatype {
        self.0
    }
}

/// A duplicate of an application's datatype, freed when dropped: what the library keeps to use
/// the type after the call that named it, since the application may free its own handle while a
/// message that uses the type is in flight (MPI-4.1 section 5.1.10: the message completes
/// normally).
pub struct Duplicate(MPI_Datatype);

// SAFETY: a datatype handle may be used from any thread (MPI_THREAD_MULTIPLE); the library uses
// a duplicate from one thread at a time, under the lock of the state that holds it.
unsafe impl Send for Duplicate {}

impl Duplicate {
    pub fn of(datatype: MPI_Datatype) -> MpiResult<Duplicate> {
        let mut duplicate = datatype;
        // SAFETY: writes one handle; a duplicate of a committed type is committed.
        check(unsafe { ffi::PMPI_Type_dup(datatype, &mut duplicate) })?;
        Ok(Duplicate(duplicate))
    }

    pub fn datatype(&self) -> MPI_Datatype {
        self.0
    }
}

impl Drop for Duplicate {
    fn drop(&mut self) {
        // SAFETY: frees the duplicate this value made.
        unsafe { ffi::PMPI_Type_free(&mut self.0) };
    }
}

impl Drop for Indexed {
    fn drop(&mut self) {
        // SAFETY: frees the type this value created.
        unsafe { ffi::PMPI_Type_free(&mut self.0) };
    }
}
