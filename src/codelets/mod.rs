//! Codelets: the implementations an operation can run. `native` is the MPI library's own
//! collective; every other codelet is built from PMPI calls on the private duplicate of the
//! application's communicator (src/mpi `Comm`). One file per algorithm, grouped by operation;
//! each declares its attributes and the requirements a call must meet, next to its code.

pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod catalogue;
pub mod halo;

use std::ffi::c_int;

use commtune_report::Op;
use commtune_tune::{Attributes, Partners};

use crate::mpi::datatype::MpiResult;
use crate::mpi::{Comm, MPI_Comm};

/// A condition a call must meet for a codelet to be correct.
///
/// Every requirement is decided by facts the MPI standard requires to be the same on every rank
/// of the communicator (operation, communicator size, the bytes a call moves), so all
/// ranks reach the same verdict and a codelet never runs on some ranks and native on others
/// (ARCHITECTURE.md, invariant 2). Datatype layouts may differ between ranks, so no requirement looks at
/// them: every codelet handles derived datatypes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Requirement {
    Intracommunicator,
    /// The reduction operation is commutative (codelets that reorder operands).
    Commutative,
    PowerOfTwoSize,
    EvenSize,
}

impl Requirement {
    pub fn holds(self, facts: &Facts) -> bool {
        match self {
            Requirement::Intracommunicator => !facts.intercomm,
            Requirement::Commutative => facts.commutative,
            Requirement::PowerOfTwoSize => facts.size > 0 && (facts.size & (facts.size - 1)) == 0,
            Requirement::EvenSize => facts.size % 2 == 0,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Requirement::Intracommunicator => "an intra-communicator",
            Requirement::Commutative => "a commutative operation",
            Requirement::PowerOfTwoSize => "a power-of-two communicator size",
            Requirement::EvenSize => "an even communicator size",
        }
    }
}

/// The facts of one call that requirements are checked against (the same on every rank).
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    pub size: i32,
    pub intercomm: bool,
    pub commutative: bool,
    /// Counts beyond the int range of the PMPI calls codelets use (large-count `_c` calls).
    pub counts_overflow_int: bool,
    /// Bytes the call moves in all (the same on every rank): codelets need scratch space of
    /// that order, which must not fail on one rank only.
    pub bytes: i64,
}

impl Facts {
    /// What requirements read, as text for a key's agreed identity: calls that share a search
    /// (a size class, see `commtune_tune::classes`) must also share which codelets may run them,
    /// so the exact bytes are not part of it, only whether they are too many.
    pub fn agreed(&self) -> String {
        format!(
            "size={} intercomm={} commutative={} large_counts={} too_large={}",
            self.size,
            self.intercomm,
            self.commutative,
            self.counts_overflow_int,
            self.bytes > MAX_CODELET_BYTES
        )
    }
}

/// One implementation of an operation `C` (a call record of src/mpi).
pub struct Codelet<C: 'static> {
    pub name: &'static str,
    pub attributes: Attributes,
    pub requires: &'static [Requirement],
    /// None for `native`; the algorithm otherwise.
    pub run: Option<fn(&C, &Comm) -> MpiResult>,
}

/// Why a codelet cannot run a call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unmet {
    Requirement(Requirement),
    /// Counts beyond the int range of the point-to-point calls codelets use.
    LargeCounts,
    /// More data than codelets take on (they allocate scratch space of that order).
    TooLarge,
}

/// The largest call (bytes in all) a codelet runs; larger ones stay native.
pub const MAX_CODELET_BYTES: i64 = 256 << 20;

impl Unmet {
    pub fn describe(self) -> String {
        match self {
            Unmet::Requirement(r) => format!("needs {}", r.describe()),
            Unmet::LargeCounts => "needs counts that fit in an int".to_string(),
            Unmet::TooLarge => format!("needs at most {MAX_CODELET_BYTES} bytes in all"),
        }
    }
}

impl<C> Codelet<C> {
    /// The first requirement `facts` do not meet.
    pub fn unmet(&self, facts: &Facts) -> Option<Unmet> {
        if self.run.is_some() && facts.counts_overflow_int {
            return Some(Unmet::LargeCounts);
        }
        if self.run.is_some() && facts.bytes > MAX_CODELET_BYTES {
            return Some(Unmet::TooLarge);
        }
        self.requires
            .iter()
            .find(|r| !r.holds(facts))
            .map(|r| Unmet::Requirement(*r))
    }
}

/// The registry index of every operation's `native`.
pub const NATIVE: usize = 0;

/// An intercepted collective and its codelets.
pub trait Operation: Sized + 'static {
    const OP: Op;
    /// Its codelets; index `NATIVE` is `native`.
    fn codelets() -> &'static [Codelet<Self>];
    /// The application's communicator.
    fn comm(&self) -> MPI_Comm;
    fn facts(&self) -> Facts;
    fn native(&self) -> c_int;
}

/// The codelet names of an operation, in registry order.
pub fn names(op: Op) -> Vec<&'static str> {
    fn of<C: Operation>() -> Vec<&'static str> {
        C::codelets().iter().map(|c| c.name).collect()
    }
    match op {
        Op::Allreduce => of::<crate::mpi::Allreduce>(),
        Op::Alltoall => of::<crate::mpi::Alltoall>(),
        Op::Allgatherv => of::<crate::mpi::Allgatherv>(),
        Op::Halo => halo::CODELETS.iter().map(|c| c.name).collect(),
    }
}

/// The shared shape of every operation's `native` entry.
const fn native<C>() -> Codelet<C> {
    Codelet {
        name: "native",
        attributes: Attributes {
            partners: Partners::Tree,
            uses_collectives: true,
        },
        requires: &[],
        run: None,
    }
}

/// The first error of a codelet's exchange steps. A step that fails (MPI rejects a message, as
/// MPICH 4.0.2 truncates large MPI_DOUBLE_INT blocks) does not end the schedule: the rank still
/// makes every later step, so every message its peers send it or expect from it is matched, no
/// rank waits for a peer that gave up, and each rank returns the first error MPI gave it.
#[derive(Default)]
pub struct FirstError(Option<c_int>);

impl FirstError {
    /// The value of a step that succeeded; None (and the error kept, if it is the first) else.
    pub fn keep<T>(&mut self, step: MpiResult<T>) -> Option<T> {
        match step {
            Ok(value) => Some(value),
            Err(rc) => {
                self.0.get_or_insert(rc);
                None
            }
        }
    }

    pub fn result(self) -> MpiResult {
        self.0.map_or(Ok(()), Err)
    }
}

/// Runs codelet `index` of `call`'s operation: native, or the algorithm on the private
/// communicator. An error goes to the application's error handler, as from its own MPI call.
#[inline]
pub fn execute<C: Operation>(call: &C, index: usize) -> c_int {
    let Some(run) = C::codelets()[index].run else {
        return call.native();
    };
    let rc = match crate::comms::private(call.comm()).and_then(|comm| run(call, &comm)) {
        Ok(()) => crate::mpi::SUCCESS,
        Err(rc) => rc,
    };
    if rc != crate::mpi::SUCCESS {
        crate::mpi::call_errhandler(call.comm(), rc);
    }
    rc
}

/// The test-only delay of COMMTUNE_INJECT_DELAY for codelet `index` at call `instance` of a key:
/// a slow collective, as every rank sees it. The barrier makes the ranks leave together, as from
/// a real slow collective, so that one rank's late wake-up does not make the next call look slow.
#[inline]
pub fn inject_delay<C: Operation>(call: &C, index: usize, instance: u64) {
    let Some(delay) = crate::runtime::config().delay(C::OP, index, instance) else {
        return;
    };
    std::thread::sleep(delay);
    if let Ok(comm) = crate::comms::private(call.comm()) {
        let _ = comm.barrier();
    }
}
