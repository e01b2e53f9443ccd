//! Which MPI this library was built for, and the refusal to run inside a program of the other.

use std::ffi::CStr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::MPI_Comm;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavour {
    OpenMpi,
    Mpich,
}

impl Flavour {
    #[cfg(mpi_flavour = "openmpi")]
    pub const BUILT: Flavour = Flavour::OpenMpi;
    #[cfg(mpi_flavour = "mpich")]
    pub const BUILT: Flavour = Flavour::Mpich;

    pub fn name(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "Open MPI",
            Flavour::Mpich => "MPICH",
        }
    }

    /// The soname of the flavour's C library.
    fn soname(self) -> &'static CStr {
        match self {
            Flavour::OpenMpi => c"libmpi.so.40",
            Flavour::Mpich => c"libmpich.so.12",
        }
    }

    fn other(self) -> Flavour {
        match self {
            Flavour::OpenMpi => Flavour::Mpich,
            Flavour::Mpich => Flavour::OpenMpi,
        }
    }
}

// mpi-sys does not rebuild when MPICC changes, so a target directory used for both flavours keeps
// the first one's bindings. Handles differ in size between the two: catch the mix-up here.
#[cfg(mpi_flavour = "openmpi")]
const _: () = assert!(
    size_of::<MPI_Comm>() == 8,
    "mpi-sys in this target directory was generated for MPICH but MPICC is Open MPI: build each \
     flavour in its own --target-dir (see README)"
);
#[cfg(mpi_flavour = "mpich")]
const _: () = assert!(
    size_of::<MPI_Comm>() == 4,
    "mpi-sys in this target directory was generated for Open MPI but MPICC is MPICH: build with \
     --target-dir target/mpich (see README)"
);

fn is_loaded(soname: &CStr) -> bool {
    // SAFETY: RTLD_NOLOAD only queries whether the library is loaded; the handle is released.
    unsafe {
        let handle = libc::dlopen(soname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if !handle.is_null() {
            libc::dlclose(handle);
        }
        !handle.is_null()
    }
}

/// Whether every MPI call of the application passes through the library's C entry points.
/// Open MPI's Fortran bindings call PMPI directly, so in a program that loads them most Fortran
/// MPI calls go unseen. MPICH's mpif.h and `use mpi` bindings call the C MPI_* functions, but its
/// `use mpi_f08` bindings call PMPI directly for most functions (MPI_Init, MPI_Barrier, MPI_Probe,
/// MPI_Request_free, MPI_Cancel, MPI_Start, ...): a program that initialises MPI through them
/// (`mpich_f08_in_use`) makes calls the library cannot see.
pub fn sees_every_call() -> bool {
    static OPEN_MPI_SEES: LazyLock<bool> = LazyLock::new(|| {
        ![
            c"libmpi_mpifh.so.40",
            c"libmpi_usempif08.so.40",
            c"libmpi_usempi_ignore_tkr.so.40",
        ]
        .into_iter()
        .any(is_loaded)
    });
    match Flavour::BUILT {
        Flavour::Mpich => !MPICH_F08.load(Ordering::Acquire),
        Flavour::OpenMpi => *OPEN_MPI_SEES,
    }
}

/// Why not every MPI call is visible (`sees_every_call` false), for the report.
pub fn hidden_calls() -> &'static str {
    match Flavour::BUILT {
        Flavour::Mpich => "MPICH's mpi_f08 bindings are in use, so not every MPI call is visible",
        Flavour::OpenMpi => {
            "Open MPI's Fortran bindings are loaded, so not every MPI call is visible"
        }
    }
}

/// Set once the program initialised MPI through MPICH's `use mpi_f08` bindings.
static MPICH_F08: AtomicBool = AtomicBool::new(false);

/// The program initialises MPI through MPICH's `use mpi_f08` bindings (shim/fortran_mpich.c),
/// before any halo message is posted.
pub fn mpich_f08_in_use() {
    MPICH_F08.store(true, Ordering::Release);
}

/// Stops the process, with a message that says which build to use, when it has the other
/// flavour's MPI library loaded: this library would hand that MPI's handles to its own MPI and
/// crash inside MPI.
pub fn refuse_other_mpi() {
    let other = Flavour::BUILT.other();
    if is_loaded(other.soname()) {
        crate::say::say!(
            "commtune: this libcommtune.so was built for {} but the program uses {} ({}). \
             Preload the {} build instead, or start the job with `commtune run`, which picks it.",
            Flavour::BUILT.name(),
            other.name(),
            other.soname().to_string_lossy(),
            other.name(),
        );
        // SAFETY: terminating the process: nothing of the application has run yet, or can run
        // safely, with the wrong MPI's handles.
        unsafe { libc::_exit(1) }
    }
}

/// Calls `handler` when the process exits (atexit; a handler that cannot be registered, for
/// lack of memory, is simply not called).
pub fn at_exit(handler: extern "C" fn()) {
    // SAFETY: registers a plain function with no arguments.
    unsafe { libc::atexit(handler) };
}
