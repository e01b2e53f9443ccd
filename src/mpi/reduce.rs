//! Small collectives of the tuner on a private communicator.

use mpi_sys as ffi;

use super::Comm;
use super::datatype::{MpiResult, check};

impl Comm {
    /// Element-wise maximum over ranks, in place.
    pub fn allreduce_max_i64(&self, values: &mut [i64]) -> MpiResult {
        let n = i32::try_from(values.len()).map_err(|_| ffi::MPI_ERR_COUNT as i32)?;
        // SAFETY: in-place reduction of `n` int64 values we own.
        check(unsafe {
            ffi::PMPI_Allreduce(
                super::constants().in_place,
                values.as_mut_ptr().cast(),
                n,
                ffi::RSMPI_INT64_T,
                ffi::RSMPI_MAX,
                self.raw,
            )
        })
    }

    /// Element-wise maximum over ranks, in place.
    pub fn allreduce_max_f64(&self, values: &mut [f64]) -> MpiResult {
        let n = i32::try_from(values.len()).map_err(|_| ffi::MPI_ERR_COUNT as i32)?;
        // SAFETY: in-place reduction of `n` doubles we own.
        check(unsafe {
            ffi::PMPI_Allreduce(
                super::constants().in_place,
                values.as_mut_ptr().cast(),
                n,
                ffi::RSMPI_DOUBLE,
                ffi::RSMPI_MAX,
                self.raw,
            )
        })
    }

    pub fn barrier(&self) -> MpiResult {
        // SAFETY: a barrier on our own communicator.
        check(unsafe { ffi::PMPI_Barrier(self.raw) })
    }
}
