//! Small collectives of the tuner on a private communicator.

use std::ffi::c_void;

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, MPI_Datatype, MPI_Op};

impl Comm {
    /// Element-wise maximum over ranks, in place.
    pub fn allreduce_max_i64(&self, values: &mut [i64]) -> MpiResult {
        // SAFETY: reading constants exported by mpi-sys.
        let (datatype, op) = unsafe { (ffi::RSMPI_INT64_T, ffi::RSMPI_MAX) };
        self.allreduce_in_place(values.as_mut_ptr().cast(), values.len(), datatype, op)
    }

    /// Element-wise maximum over ranks, in place.
    pub fn allreduce_max_f64(&self, values: &mut [f64]) -> MpiResult {
        // SAFETY: reading constants exported by mpi-sys.
        let (datatype, op) = unsafe { (ffi::RSMPI_DOUBLE, ffi::RSMPI_MAX) };
        self.allreduce_in_place(values.as_mut_ptr().cast(), values.len(), datatype, op)
    }

    /// Element-wise sum over ranks, in place.
    pub fn allreduce_sum_f64(&self, values: &mut [f64]) -> MpiResult {
        // SAFETY: reading constants exported by mpi-sys.
        let (datatype, op) = unsafe { (ffi::RSMPI_DOUBLE, ffi::RSMPI_SUM) };
        self.allreduce_in_place(values.as_mut_ptr().cast(), values.len(), datatype, op)
    }

    fn allreduce_in_place(
        &self,
        values: *mut c_void,
        len: usize,
        datatype: MPI_Datatype,
        op: MPI_Op,
    ) -> MpiResult {
        let n = i32::try_from(len).map_err(|_| ffi::MPI_ERR_COUNT as i32)?;
        // SAFETY: an in-place reduction of `n` elements of `datatype` in our own buffer.
        check(unsafe {
            ffi::PMPI_Allreduce(
                super::constants().in_place,
                values,
                n,
                datatype,
                op,
                self.raw,
            )
        })
    }

    pub fn barrier(&self) -> MpiResult {
        // SAFETY: a barrier on our own communicator.
        check(unsafe { ffi::PMPI_Barrier(self.raw) })
    }
}
