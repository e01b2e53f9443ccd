//! MPI_Allgatherv codelets.

use std::ffi::c_int;

use commtune_report::Op;

use super::{Codelet, Facts, Operation, native};
use crate::mpi::{self, Allgatherv, MPI_Comm};

static CODELETS: [Codelet<Allgatherv>; 1] = [native()];

impl Operation for Allgatherv {
    const OP: Op = Op::Allgatherv;

    fn codelets() -> &'static [Codelet<Self>] {
        &CODELETS
    }

    fn comm(&self) -> MPI_Comm {
        self.comm
    }

    fn facts(&self) -> Facts {
        let size = mpi::comm_size(self.comm);
        let max = i64::from(c_int::MAX);
        let overflow = self.sendcount > max
            || (0..size.max(0) as usize)
                .any(|i| self.recvcounts.get(i) > max || self.displs.get(i) > max);
        Facts {
            size,
            intercomm: mpi::is_intercomm(self.comm),
            counts_overflow_int: overflow,
            ..Facts::default()
        }
    }

    fn native(&self) -> c_int {
        Allgatherv::native(self)
    }
}
