//! The arguments of each intercepted call as one record, and the native (PMPI) call for it.
//!
//! The pointers are the application's; the records pass them to MPI unchanged. `large` marks
//! the MPI-4 `_c` entry points, whose counts are MPI_Count and whose displacements are MPI_Aint.

use std::ffi::{c_int, c_void};

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::requests::Persistent;
use super::{MPI_Comm, MPI_Count, MPI_Datatype, MPI_Op, MPI_Request, type_size};

#[derive(Clone, Copy)]
pub struct Allreduce {
    pub sendbuf: *const c_void,
    pub recvbuf: *mut c_void,
    pub count: MPI_Count,
    pub datatype: MPI_Datatype,
    pub op: MPI_Op,
    pub comm: MPI_Comm,
    #[cfg_attr(
        mpi_flavour = "openmpi",
        expect(dead_code, reason = "Open MPI 4.1 has no _c calls")
    )]
    pub large: bool,
}

impl Allreduce {
    #[inline]
    pub fn native(&self) -> c_int {
        #[cfg(mpi_flavour = "mpich")]
        if self.large {
            return large::allreduce(self);
        }
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            ffi::PMPI_Allreduce(
                self.sendbuf,
                self.recvbuf,
                self.count as c_int,
                self.datatype,
                self.op,
                self.comm,
            )
        }
    }

    /// Bytes of the vector each rank contributes.
    pub fn bytes(&self) -> u64 {
        (self.count * type_size(self.datatype)).max(0) as u64
    }
}

#[derive(Clone, Copy)]
pub struct Alltoall {
    pub sendbuf: *const c_void,
    pub sendcount: MPI_Count,
    pub sendtype: MPI_Datatype,
    pub recvbuf: *mut c_void,
    pub recvcount: MPI_Count,
    pub recvtype: MPI_Datatype,
    pub comm: MPI_Comm,
    #[cfg_attr(
        mpi_flavour = "openmpi",
        expect(dead_code, reason = "Open MPI 4.1 has no _c calls")
    )]
    pub large: bool,
}

impl Alltoall {
    #[inline]
    pub fn native(&self) -> c_int {
        #[cfg(mpi_flavour = "mpich")]
        if self.large {
            return large::alltoall(self);
        }
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            ffi::PMPI_Alltoall(
                self.sendbuf,
                self.sendcount as c_int,
                self.sendtype,
                self.recvbuf,
                self.recvcount as c_int,
                self.recvtype,
                self.comm,
            )
        }
    }

    /// Bytes this rank receives (= sends): one block from every rank.
    pub fn bytes(&self, comm_size: i64) -> u64 {
        (self.recvcount * type_size(self.recvtype) * comm_size).max(0) as u64
    }
}

/// The receive counts or displacements of an Allgatherv: `int` arrays, or MPI_Count / MPI_Aint
/// arrays in the large-count variant (both 64-bit here).
#[derive(Clone, Copy)]
pub struct Counts {
    ptr: *const c_void,
    large: bool,
    /// Entries that may be read (none until `readable`).
    len: usize,
}

impl Counts {
    /// The array as the application passed it; passing it on to MPI needs nothing more.
    pub fn new(ptr: *const c_void, large: bool) -> Self {
        Counts { ptr, large, len: 0 }
    }

    /// The same array with its first `len` entries readable by `get`.
    ///
    /// # Safety
    /// The array holds at least `len` entries, valid for as long as the call lasts.
    pub unsafe fn readable(self, len: usize) -> Self {
        Counts { len, ..self }
    }

    /// Entries `get` may read.
    pub fn entries(&self) -> usize {
        self.len
    }

    /// Entry `i` (0 beyond the readable entries).
    pub fn get(&self, i: usize) -> i64 {
        if i >= self.len {
            return 0;
        }
        // SAFETY: `i` is below `len`, which the caller of `readable` vouched for.
        unsafe {
            if self.large {
                *self.ptr.cast::<i64>().add(i)
            } else {
                i64::from(*self.ptr.cast::<c_int>().add(i))
            }
        }
    }

    fn ptr(&self) -> *const c_void {
        self.ptr
    }
}

const _: () = assert!(size_of::<ffi::MPI_Aint>() == size_of::<i64>());

#[derive(Clone, Copy)]
pub struct Allgatherv {
    pub sendbuf: *const c_void,
    pub sendcount: MPI_Count,
    pub sendtype: MPI_Datatype,
    pub recvbuf: *mut c_void,
    pub recvcounts: Counts,
    pub displs: Counts,
    pub recvtype: MPI_Datatype,
    pub comm: MPI_Comm,
    #[cfg_attr(
        mpi_flavour = "openmpi",
        expect(dead_code, reason = "Open MPI 4.1 has no _c calls")
    )]
    pub large: bool,
}

impl Allgatherv {
    #[inline]
    pub fn native(&self) -> c_int {
        #[cfg(mpi_flavour = "mpich")]
        if self.large {
            return large::allgatherv(self);
        }
        // SAFETY: the application's arguments, passed through unchanged (int arrays here).
        unsafe {
            ffi::PMPI_Allgatherv(
                self.sendbuf,
                self.sendcount as c_int,
                self.sendtype,
                self.recvbuf,
                self.recvcounts.ptr().cast(),
                self.displs.ptr().cast(),
                self.recvtype,
                self.comm,
            )
        }
    }

    /// Bytes of the gathered result (the sum of all ranks' blocks).
    pub fn bytes(&self, comm_size: usize) -> u64 {
        let elements: i64 = (0..comm_size).map(|i| self.recvcounts.get(i)).sum();
        (elements * type_size(self.recvtype)).max(0) as u64
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PointToPointKind {
    Send,
    Recv,
}

/// An MPI_Isend or MPI_Irecv.
#[derive(Clone, Copy)]
pub struct PointToPoint {
    pub kind: PointToPointKind,
    pub buf: *mut c_void,
    pub count: MPI_Count,
    pub datatype: MPI_Datatype,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: MPI_Comm,
    #[cfg_attr(
        mpi_flavour = "openmpi",
        expect(dead_code, reason = "Open MPI 4.1 has no _c calls")
    )]
    pub large: bool,
}

// SAFETY: its buffer and handles are the application's, which MPI lets any thread pass to MPI: a
// held post is posted by whichever thread makes the next MPI call (MPI_THREAD_SERIALIZED).
unsafe impl Send for PointToPoint {}

impl PointToPoint {
    /// Posts the message as MPI_Isend/MPI_Irecv would, the new handle in `request`.
    pub fn native(&self, request: &mut MPI_Request) -> c_int {
        #[cfg(mpi_flavour = "mpich")]
        if self.large {
            return large::point_to_point(self, request);
        }
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            match self.kind {
                PointToPointKind::Send => ffi::PMPI_Isend(
                    self.buf,
                    self.count as c_int,
                    self.datatype,
                    self.peer,
                    self.tag,
                    self.comm,
                    request,
                ),
                PointToPointKind::Recv => ffi::PMPI_Irecv(
                    self.buf,
                    self.count as c_int,
                    self.datatype,
                    self.peer,
                    self.tag,
                    self.comm,
                    request,
                ),
            }
        }
    }

    /// The same message as an inactive persistent request (MPI_Send_init/MPI_Recv_init), for
    /// counts that fit an int.
    pub fn persistent(&self) -> MpiResult<Persistent> {
        let count = c_int::try_from(self.count).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        let mut request = super::request_null();
        // SAFETY: the application's message arguments; writes one handle.
        check(unsafe {
            match self.kind {
                PointToPointKind::Send => ffi::PMPI_Send_init(
                    self.buf,
                    count,
                    self.datatype,
                    self.peer,
                    self.tag,
                    self.comm,
                    &mut request,
                ),
                PointToPointKind::Recv => ffi::PMPI_Recv_init(
                    self.buf,
                    count,
                    self.datatype,
                    self.peer,
                    self.tag,
                    self.comm,
                    &mut request,
                ),
            }
        })?;
        Ok(Persistent(request))
    }
}

/// The MPI-4 large-count PMPI calls. Only MPI-4 libraries (MPICH here) have them, and only there
/// does the shim set `large`.
#[cfg(mpi_flavour = "mpich")]
mod large {
    use super::*;

    pub fn allreduce(a: &Allreduce) -> c_int {
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe { ffi::PMPI_Allreduce_c(a.sendbuf, a.recvbuf, a.count, a.datatype, a.op, a.comm) }
    }

    pub fn alltoall(a: &Alltoall) -> c_int {
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            ffi::PMPI_Alltoall_c(
                a.sendbuf,
                a.sendcount,
                a.sendtype,
                a.recvbuf,
                a.recvcount,
                a.recvtype,
                a.comm,
            )
        }
    }

    pub fn allgatherv(a: &Allgatherv) -> c_int {
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            ffi::PMPI_Allgatherv_c(
                a.sendbuf,
                a.sendcount,
                a.sendtype,
                a.recvbuf,
                a.recvcounts.ptr().cast(),
                a.displs.ptr().cast(),
                a.recvtype,
                a.comm,
            )
        }
    }

    pub fn point_to_point(p: &PointToPoint, request: &mut MPI_Request) -> c_int {
        // SAFETY: the application's arguments, passed through unchanged.
        unsafe {
            match p.kind {
                PointToPointKind::Send => {
                    ffi::PMPI_Isend_c(p.buf, p.count, p.datatype, p.peer, p.tag, p.comm, request)
                }
                PointToPointKind::Recv => {
                    ffi::PMPI_Irecv_c(p.buf, p.count, p.datatype, p.peer, p.tag, p.comm, request)
                }
            }
        }
    }
}
