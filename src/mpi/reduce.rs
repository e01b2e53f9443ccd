//! Small collectives of the tuner on a private communicator.

use std::ffi::c_void;

use mpi_sys as ffi;

use super::datatype::{MpiResult, check};
use super::{Comm, HandleBits, MPI_Datatype, MPI_Op, MPI_Request};

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

/// Each value followed by its negation: their maxima over ranks are the values' maxima and
/// negated minima.
fn with_negations<const N: usize>(values: [i64; N]) -> Box<[i64]> {
    values.iter().flat_map(|&v| [v, -v]).collect()
}

fn spreads<const N: usize>(both: &[i64]) -> [Spread; N] {
    std::array::from_fn(|i| Spread {
        min: -both[2 * i + 1],
        max: both[2 * i],
    })
}

/// A `min_max_i64` in flight: its buffer and request. Dropped before `wait`, it completes the
/// reduction (collectives cannot be cancelled, and MPI must not write a freed buffer).
pub struct StartedMinMax<const N: usize> {
    both: Box<[i64]>,
    request: MPI_Request,
}

// SAFETY: an MPI request is a handle MPI lets any thread complete (the tuner completes it under
// its communicator's lock, one thread at a time).
unsafe impl<const N: usize> Send for StartedMinMax<N> {}

impl<const N: usize> StartedMinMax<N> {
    /// Completes the reduction: what `Comm::min_max_i64` would have returned.
    pub fn wait(mut self) -> MpiResult<[Spread; N]> {
        self.complete()?;
        Ok(spreads(&self.both))
    }

    fn complete(&mut self) -> MpiResult {
        if self.request.bits() == super::request_null().bits() {
            return Ok(());
        }
        // SAFETY: a request this value started (MPI sets it to null once complete).
        check(unsafe { ffi::PMPI_Wait(&mut self.request, super::status_ignore()) })
    }
}

impl<const N: usize> Drop for StartedMinMax<N> {
    fn drop(&mut self) {
        let _ = self.complete();
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
        let mut both = with_negations(values);
        self.allreduce_max_i64(&mut both)?;
        Ok(spreads(&both))
    }

    /// `min_max_i64` started now and completed by `StartedMinMax::wait`, on a later call: the
    /// ranks' latencies overlap the application's calls between. Every rank must start it at
    /// the same point of the communicator's collectives.
    pub fn start_min_max_i64<const N: usize>(
        &self,
        values: [i64; N],
    ) -> MpiResult<StartedMinMax<N>> {
        let mut both = with_negations(values);
        let n = i32::try_from(both.len()).map_err(|_| ffi::MPI_ERR_COUNT as i32)?;
        let mut request = super::request_null();
        // SAFETY: reading constants exported by mpi-sys.
        let (datatype, op) = unsafe { (ffi::RSMPI_INT64_T, ffi::RSMPI_MAX) };
        // SAFETY: an in-place reduction of `n` elements in a heap buffer that the returned value
        // owns and keeps until the request completes (`wait` or drop).
        check(unsafe {
            ffi::PMPI_Iallreduce(
                super::constants().in_place,
                both.as_mut_ptr().cast(),
                n,
                datatype,
                op,
                self.raw,
                &mut request,
            )
        })?;
        Ok(StartedMinMax { both, request })
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
