//! MPI_Alltoall codelets.

use std::ffi::c_int;

use commtune_report::Op;

use super::{Codelet, Facts, Operation, native};
use crate::mpi::{self, Alltoall, MPI_Comm};

static CODELETS: [Codelet<Alltoall>; 1] = [native()];

impl Operation for Alltoall {
    const OP: Op = Op::Alltoall;

    fn codelets() -> &'static [Codelet<Self>] {
        &CODELETS
    }

    fn comm(&self) -> MPI_Comm {
        self.comm
    }

    fn facts(&self) -> Facts {
        let max = i64::from(c_int::MAX);
        Facts {
            size: mpi::comm_size(self.comm),
            intercomm: mpi::is_intercomm(self.comm),
            counts_overflow_int: self.sendcount > max || self.recvcount > max,
            ..Facts::default()
        }
    }

    fn native(&self) -> c_int {
        Alltoall::native(self)
    }
}
