//! Process-wide state: the configuration read at load time, the switch that turns every entry
//! point into a plain pass-through, what this process is in the MPI job, and whether it has
//! reported. The lifecycle of the library (loading, MPI_Init, MPI_Finalize, MPI_Abort, exit)
//! is `interpose::lifecycle`'s; this module only keeps what it sets.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::{Config, Mode};
use crate::say::say;
use crate::{clock, mpi};

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Problems found in the knobs, printed once by rank 0 when MPI starts.
static PROBLEMS: OnceLock<Vec<String>> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(false);
static PROCESS: OnceLock<Process> = OnceLock::new();
static REPORTED: AtomicBool = AtomicBool::new(false);

/// This process in the MPI job, known once MPI is initialised.
pub struct Process {
    pub rank: u32,
    pub size: u32,
    pub start_ns: u64,
    /// The process that initialised MPI: a child it forks runs the same exit handlers.
    pub pid: u32,
    /// The MPI library's version string (first line).
    pub mpi: String,
    /// MPI provides MPI_THREAD_MULTIPLE: the application's threads may be inside MPI at once.
    pub threads_at_once: bool,
}

/// The configuration the library loaded with, and the problems found in its knobs.
pub fn set_config(config: Config, problems: Vec<String>) {
    ENABLED.store(config.mode != Mode::Off, Ordering::Relaxed);
    let _ = CONFIG.set(config);
    let _ = PROBLEMS.set(problems);
}

/// Whether entry points do anything beyond calling PMPI (COMMTUNE_MODE other than off).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

#[inline]
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::default)
}

/// This process, once MPI is initialised (lazily for programs whose MPI_Init we do not see,
/// such as Fortran programs under MPICH's mpi_f08). None while MPI is not active.
#[inline]
pub fn process() -> Option<&'static Process> {
    match PROCESS.get() {
        Some(p) => Some(p),
        None => started(),
    }
}

/// MPI has just been initialised (or an intercepted call found it initialised).
pub fn started() -> Option<&'static Process> {
    if !mpi::is_active() {
        return None;
    }
    mpi::refuse_other_mpi();
    Some(PROCESS.get_or_init(|| {
        clock::start();
        let world = mpi::comm_world();
        let process = Process {
            rank: mpi::comm_rank(world) as u32,
            size: mpi::comm_size(world) as u32,
            start_ns: clock::monotonic_ns(),
            pid: std::process::id(),
            mpi: mpi::library_version(),
            threads_at_once: mpi::threads_at_once(),
        };
        if process.rank == 0 {
            for problem in PROBLEMS.get().into_iter().flatten() {
                say!("{problem}");
            }
            if config().verbose >= 1 {
                say!(
                    "commtune: {} ranks, {}, built for {}, {:?}",
                    process.size,
                    process.mpi,
                    mpi::Flavour::BUILT.name(),
                    config()
                );
            }
        }
        process
    }))
}

/// This process, if it is the one that initialised MPI and has not reported yet (it is then to
/// report: later calls get None). A child the process forked runs the same exit handlers, and
/// must not write (it would replace the report of every rank with its parent's data).
pub fn to_report() -> Option<&'static Process> {
    let process = PROCESS.get()?;
    let ours = enabled() && process.pid == std::process::id();
    (ours && !REPORTED.swap(true, Ordering::AcqRel)).then_some(process)
}

/// This machine's host name (empty if it has none): the kernel's, of this process's UTS
/// namespace, as gethostname(2) reads it.
/// Read once (at MPI_Init, `started`): the report and the history need it.
pub fn host_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim_end().to_owned())
            .unwrap_or_default()
    })
    .clone()
}
