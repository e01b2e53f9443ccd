//! Process-wide state: the configuration read at load time, the switch that turns every entry
//! point into a plain pass-through, and what this process is in the MPI job.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use crate::config::{self, Config, Mode};
use crate::say::say;
use crate::{clock, mpi, report};

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
}

/// Called by the library constructor, in every process the library is loaded into (launchers
/// and proxies too, which never initialise MPI).
pub fn load() {
    if let Err(message) = mpi::check_loaded_mpi() {
        refuse(&message);
    }
    let (config, problems) = config::parse(std::env::vars_os());
    ENABLED.store(config.mode != Mode::Off, Ordering::Relaxed);
    let _ = CONFIG.set(config);
    let _ = PROBLEMS.set(problems);
    // SAFETY: registers a plain function; atexit only fails when out of memory, and then the
    // fallback report is simply not written.
    unsafe { libc::atexit(at_exit) };
}

/// A library built for the other MPI would crash inside MPI: stop with a clear message instead.
fn refuse(message: &str) -> ! {
    say!("{message}");
    // SAFETY: terminating the process; nothing of the application has run yet or can run safely.
    unsafe { libc::_exit(1) }
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
    if let Err(message) = mpi::check_loaded_mpi() {
        refuse(&message);
    }
    Some(PROCESS.get_or_init(|| {
        clock::start();
        let world = mpi::comm_world();
        let process = Process {
            rank: mpi::comm_rank(world) as u32,
            size: mpi::comm_size(world) as u32,
            start_ns: mpi::now_ns(),
            pid: std::process::id(),
            mpi: mpi::library_version(),
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

/// MPI_Init or MPI_Init_thread succeeded: every rank is inside it, so the private duplicate of
/// MPI_COMM_WORLD the at-exit fallback needs is made now (collective).
pub fn initialized() {
    if started().is_some() {
        let _ = mpi::private_comm(mpi::comm_world());
    }
}

/// This process, if it is the one that initialised MPI and has not reported yet (then it will
/// have reported once this returns).
fn to_report() -> Option<&'static Process> {
    let process = PROCESS.get()?;
    let ours = enabled() && process.pid == std::process::id();
    (ours && !REPORTED.swap(true, Ordering::AcqRel)).then_some(process)
}

/// MPI_Finalize: every rank is here, so rank 0 can gather the report before MPI goes away; it
/// writes it once MPI is finalized (`finalized`).
pub fn finalizing() -> Option<report::Gathered> {
    if !enabled() {
        return None;
    }
    process()?;
    report::gather(to_report()?)
}

/// MPI_Finalize returned: rank 0 writes what `finalizing` gathered.
pub fn finalized(gathered: Option<report::Gathered>) {
    if let (Some(gathered), Some(process)) = (gathered, PROCESS.get()) {
        gathered.publish(process, config());
    }
}

/// How long MPI_Abort waits for this rank's report at most.
const ABORT_PATIENCE: Duration = Duration::from_secs(2);

/// MPI_Abort: this rank writes what it measured, marked partial with the abort code. No
/// communication (the other ranks may be anywhere), and the abort never waits long: the report
/// is written by a helper thread, given at most `ABORT_PATIENCE` (a lock held by the thread
/// whose MPI call failed, or by a thread blocked in MPI, must not hold the abort up).
pub fn aborting(code: c_int) {
    process();
    let Some(process) = to_report() else {
        return;
    };
    let (done, finished) = mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("commtune-abort".into())
        .spawn(move || {
            report::write_aborted(process, config(), code);
            let _ = done.send(());
        });
    if writer.is_ok() && finished.recv_timeout(ABORT_PATIENCE).is_err() {
        say!(
            "commtune: rank {}: no report: it was not written within {} s of MPI_Abort",
            process.rank,
            ABORT_PATIENCE.as_secs()
        );
    }
}

/// The fallback when MPI_Finalize was not seen: rank 0 writes what it measured itself. A child
/// the process forked runs this too when it exits, and must not write (it would replace the
/// report of every rank with its parent's data).
extern "C" fn at_exit() {
    if let Some(process) = to_report() {
        report::write_at_exit(process, config());
    }
}
