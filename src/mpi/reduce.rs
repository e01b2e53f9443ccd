//! Small collectives of the tuner on a private communicator.

use std::ffi::c_void;

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, MPI_Datatype, MPI_Op};

/// One value over the ranks: its smallest and largest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Spread {
    pub min: i64,
    pub max: i64,
}

impl Spread {
    /// Whether every rank has the same value.
    pub fn same_everywhere(self) -> bool {
        self.min == self.max
    }
}

impl Comm {
    /// Element-wise maximum over ranks, in place.
    pub fn allreduce_max_i64(&self, values: &mut [i64]) -> MpiResult {
        // SAFETY: reading constants exported by mpi-sys.
        let (datatype, op) = unsafe { (ffi::RSMPI_INT64_T, ffi::RSMPI_MAX) };
        self.allreduce_in_place(values.as_mut_ptr().cast(), values.len(), datatype, op)
    }

    /// The smallest and largest value of each element over the ranks: one MPI_MAX reduction of
    /// the values and their negations. Values must not be i64::MIN.
    pub fn min_max_i64<const N: usize>(&self, values: [i64; N]) -> MpiResult<[Spread; N]> {
        let mut both: Vec<i64> = values.iter().flat_map(|&v| [v, -v]).collect();
        self.allreduce_max_i64(&mut both)?;
        Ok(std::array::from_fn(|i| Spread {
            min: -both[2 * i + 1],
            max: both[2 * i],
        }))
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
