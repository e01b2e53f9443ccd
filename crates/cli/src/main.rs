//! `commtune`: start MPI jobs with libcommtune.so preloaded into every rank, and read the reports
//! it writes. Links no MPI: it only inspects ELF files, edits command lines and reads JSON.

mod calibrate;
mod catalogue;
mod export;
mod flavour;
mod history;
mod inject;
mod launcher;
mod library;
mod map;
mod simulate;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, Parser, Subcommand};

use crate::flavour::Flavour;
use crate::launcher::Detection;

#[derive(Parser)]
#[command(
    name = "commtune",
    version,
    about = "Profile and tune the MPI communication of unmodified applications",
    long_about = "Profile and tune the MPI communication of unmodified applications.\n\n\
        `commtune run` starts an MPI job with libcommtune.so preloaded into every rank (the \
        build matching the application's MPI, Open MPI or MPICH); the library writes a JSON \
        report at the end of the run, which `commtune report` summarises."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an MPI job with libcommtune.so preloaded into every rank
    #[command(long_about = RUN_ABOUT, after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Print the summary of a JSON report, write it as an HTML page, or compare two reports
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// List the codelets of each operation with their attributes and requirements
    Codelets(CodeletsArgs),
    /// Replay traced runs (COMMTUNE_TRACE) under a grid of tuner settings, without MPI
    #[command(long_about = SIMULATE_ABOUT)]
    Simulate(SimulateArgs),
    /// List what earlier jobs' searches decided (the history store, COMMTUNE_HISTORY)
    History(HistoryArgs),
    /// Per operation the decision map of the history store and how well the history predicts
    /// problems it has not seen (leave-one-out)
    Map(MapArgs),
    /// Write the store's decisions as Open MPI's or MPICH's own selection rules
    Export(export::command::ExportArgs),
    /// Measure every codelet at log-spaced sizes into the history store
    #[command(long_about = calibrate::ABOUT, after_help = calibrate::EXAMPLES)]
    Calibrate(calibrate::Args),
}

#[derive(Args)]
struct HistoryArgs {
    /// The store (default: $COMMTUNE_HISTORY, else $XDG_STATE_HOME/commtune/history, else
    /// ~/.local/state/commtune/history)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(Args)]
struct MapArgs {
    /// The store (default: as `history`)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Only this operation (allreduce, alltoall, allgatherv)
    #[arg(long)]
    op: Option<String>,
    /// The prediction windows to evaluate, comma-separated: percentages, or fractions below 1
    #[arg(long, default_value = "5,10,20", value_name = "LIST")]
    pmax: String,
    /// The decision map's tolerance: a leaf's codelet stays within it of the best at every
    /// problem of the leaf, but in a narrow leaf of few problems (percent, or a fraction below 1)
    #[arg(long, default_value = "10", value_name = "PERCENT")]
    tolerance: String,
    /// Predict the problems of this later store (e.g. a second run's) from the store, instead of
    /// leave-one-out
    #[arg(long, value_name = "DIR")]
    against: Option<PathBuf>,
}

const SIMULATE_ABOUT: &str = "Replay traced runs (COMMTUNE_TRACE) under a grid of tuner settings, \
without MPI.

Each key of the traces becomes a model: every codelet's steady instances (what one call costs \
the application, per rank) and the first instances after a switch. A replay runs --calls calls \
of the key through the tuner's own search code under one configuration and prints the decision \
(the most common over --replicas seeded replays), the instances searched, the regret (the run's \
time over the best codelet's alone) and the decision's predicted and realised time per call. \
Without options the grid is search x timing x filter x block in {1,2,4} x samples in {2,4,8}; \
each option takes a comma list. `*` marks the library's defaults. With several keys a summary \
of median regrets follows. Give every rank's file of a run (PREFIX.RANK.tsv).";

#[derive(Args)]
struct SimulateArgs {
    /// Trace files (PREFIX.RANK.tsv, every rank's of a run)
    #[arg(required = true, value_name = "TRACE")]
    files: Vec<PathBuf>,

    /// Calls of the key in the replayed run
    #[arg(long, default_value_t = 2000, value_name = "N")]
    calls: u64,

    /// Search policies (brute, attributes, racing)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    search: Vec<String>,

    /// Timings (auto, local, barrier, period)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    timing: Vec<String>,

    /// Estimators (minfactor, iqr, robust)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    filter: Vec<String>,

    /// Instances per sample
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    block: Vec<u32>,

    /// Samples per codelet at most
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    samples: Vec<u32>,

    /// Replays per configuration (seeds 1..=R)
    #[arg(long, default_value_t = 5, value_name = "R")]
    replicas: u64,
}

#[derive(Args)]
struct CodeletsArgs {
    /// Print the catalogue as JSON
    #[arg(long)]
    json: bool,
}

const RUN_ABOUT: &str = "Run an MPI job with libcommtune.so preloaded into every rank.

Detection: the MPI comes from the launcher's name, followed through PATH and symlinks \
(mpirun.openmpi/orterun: Open MPI; mpiexec.mpich/mpiexec.hydra: MPICH), else from \
`mpirun --version`. The program (the first argument that is an ELF executable) is checked too: \
its libmpi.so.* (Open MPI) or libmpich.so.* (MPICH) dependency wins over the launcher. For srun \
and for a program run without a launcher only the program tells; scripts and interpreters \
(python3) need --mpi.

Library: $COMMTUNE_LIB_OPENMPI / $COMMTUNE_LIB_MPICH, else the build next to this executable \
(target/release or target/mpich/release; <prefix>/lib/commtune/<mpi>/ when installed).

Injection: LD_PRELOAD and every COMMTUNE_* variable (except the CLI's own COMMTUNE_LIB_*) are \
passed to the ranks: `-x NAME=VALUE` for Open MPI, `-genv NAME VALUE` for MPICH's mpiexec, \
`--export=ALL,NAME=VALUE,...` for srun (with `--mpi=pmix` for Open MPI or `--mpi=pmi2` for \
MPICH, unless the command has an --mpi option or SLURM_MPI_TYPE is set), the environment for a program run directly. Then the \
command runs in place of commtune; its exit status is the job's.";

const RUN_EXAMPLES: &str = "Examples:
  commtune run -- mpirun -np 4 ./app input.dat
  commtune run --report none -- mpiexec.mpich -n 2 ./app
  commtune run --mpi openmpi -- srun -n 64 python3 app.py
  commtune run --dry-run -- mpirun -np 4 ./app      # print what would run";

#[derive(Args)]
struct RunArgs {
    /// What the library does in the job (e.g. off, profile); sets COMMTUNE_MODE
    #[arg(long, value_name = "MODE")]
    mode: Option<String>,

    /// Where the JSON report goes ("none": no report); sets COMMTUNE_REPORT
    #[arg(long, value_name = "PATH")]
    report: Option<String>,

    /// The application's MPI, when detection cannot tell or gets it wrong
    #[arg(long, value_enum, value_name = "MPI")]
    mpi: Option<Flavour>,

    /// Print the command and environment that would run, and run nothing
    #[arg(long)]
    dry_run: bool,

    /// The launcher and its arguments (mpirun, mpiexec.mpich, srun), or the program itself
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

const REPORT_EXAMPLES: &str = "Examples:
  commtune report commtune-1234.json                      # the text summary
  commtune report commtune-1234.json --html report.html   # every figure, one self-contained page
  commtune report before.json after.json --compare        # two runs side by side
  commtune report before.json after.json --compare --html compare.html";

#[derive(Args)]
struct ReportArgs {
    /// A report written by a run (commtune-<id>.json by default); two with --compare
    #[arg(value_name = "FILE.json", required = true, num_args = 1..=2)]
    files: Vec<PathBuf>,

    /// How many call sites to list in text, most time first
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,

    /// Write the report (or the comparison) as one self-contained HTML page to OUT
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,

    /// Compare two reports site by site: time, codelet and ratio (second over first)
    #[arg(long)]
    compare: bool,
}

/// An error to print, with the exit status to return.
struct Failure {
    status: u8,
    message: String,
}

impl Failure {
    fn new(status: u8, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Cmd::Run(args) => run(&args),
        Cmd::Report(args) => report(&args),
        Cmd::Codelets(args) => codelets(&args),
        Cmd::Simulate(args) => simulate(&args),
        Cmd::History(args) => list_history(args),
        Cmd::Map(args) => show_map(args),
        Cmd::Export(args) => export::command::run(args),
        Cmd::Calibrate(args) => calibrate::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("commtune: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

fn run(args: &RunArgs) -> Result<(), Failure> {
    let detection = launcher::detect(&args.command, args.mpi).map_err(|m| Failure::new(2, m))?;
    for warning in &detection.warnings {
        eprintln!("commtune: warning: {warning}");
    }
    let library = find_library(detection.flavour).map_err(|m| Failure::new(2, m))?;

    let environment = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)));
    let existing_preload = std::env::var("LD_PRELOAD").ok();
    let overrides = [
        ("COMMTUNE_MODE", args.mode.as_deref()),
        ("COMMTUNE_REPORT", args.report.as_deref()),
    ];
    let vars = inject::job_variables(
        &library,
        existing_preload.as_deref(),
        environment,
        &overrides,
    );
    let srun_mpi = inject::srun_mpi(
        detection.flavour,
        &args.command,
        std::env::var("SLURM_MPI_TYPE").ok().as_deref(),
    );
    let plan = inject::plan(detection.launcher, &args.command, &vars, srun_mpi);

    if args.dry_run {
        return emit(&describe(&detection, &library, &plan));
    }
    let verbose = vars
        .iter()
        .any(|(n, v)| n == "COMMTUNE_VERBOSE" && v.trim() != "0" && !v.trim().is_empty());
    if verbose {
        eprint!("{}", describe(&detection, &library, &plan));
    }
    exec(&plan)
}

/// The library for `flavour`, looked up next to this executable unless named in the environment.
fn find_library(flavour: Flavour) -> Result<PathBuf, String> {
    let explicit = std::env::var_os(flavour.lib_variable())
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the commtune executable's own path: {e}"))?;
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    library::find(flavour, explicit, exe_dir)
}

/// What a run will do, as lines of a shell snippet: comments, then the command line.
fn describe(detection: &Detection, library: &Path, plan: &inject::Plan) -> String {
    let environment = if plan.env.is_empty() {
        "unchanged".to_string()
    } else {
        let sets: Vec<String> = plan.env.iter().map(|(n, v)| format!("{n}={v}")).collect();
        inject::shell_line(&sets)
    };
    format!(
        "# {} ({}); library {}\n# environment: {environment}\n{}\n",
        detection.flavour,
        detection.reason,
        library.display(),
        inject::shell_line(&plan.argv)
    )
}

/// Replaces this process with the planned command; returns only if it cannot start.
fn exec(plan: &inject::Plan) -> Result<(), Failure> {
    let Some((program, args)) = plan.argv.split_first() else {
        return Err(Failure::new(2, "no command given"));
    };
    let error = Command::new(program)
        .args(args)
        .envs(plan.env.iter().map(|(n, v)| (n, v)))
        .exec();
    let status = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Err(Failure::new(
        status,
        format!("cannot run {program}: {error}"),
    ))
}

/// The catalogue is the same in both builds: ask whichever is there.
fn codelets(args: &CodeletsArgs) -> Result<(), Failure> {
    let library = find_library(Flavour::OpenMpi)
        .or_else(|_| find_library(Flavour::Mpich))
        .map_err(|m| Failure::new(2, m))?;
    let catalogue = catalogue::load(&library).map_err(|m| Failure::new(2, m))?;
    if args.json {
        emit(&format!("{catalogue:#}\n"))
    } else {
        emit(&catalogue::table(&catalogue))
    }
}

/// Writes `text` to standard output. A reader that stops early (`| head`) is no error: Rust
/// ignores SIGPIPE, so print! would panic instead of ending quietly as other tools do.
fn emit(text: &str) -> Result<(), Failure> {
    use std::io::{ErrorKind, Write};
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Failure::new(
            1,
            format!("cannot write to standard output: {e}"),
        )),
        _ => Ok(()),
    }
}

fn simulate(args: &SimulateArgs) -> Result<(), Failure> {
    let options = simulate::options(
        &args.search,
        &args.timing,
        &args.filter,
        &args.block,
        &args.samples,
        args.calls,
        args.replicas,
    )
    .map_err(|m| Failure::new(2, m))?;
    let files = args
        .files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f)
                .map_err(|e| Failure::new(1, format!("cannot read {}: {e}", f.display())))?;
            Ok((f.display().to_string(), text))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let text = simulate::text(files, &options).map_err(|m| Failure::new(1, m))?;
    print!("{text}");
    Ok(())
}

/// Lists the store; what it had to skip is one warning line on stderr.
fn list_history(args: HistoryArgs) -> Result<(), Failure> {
    let dir = history::dir(args.dir).map_err(|m| Failure::new(2, m))?;
    let loaded = history::load(&dir);
    emit(&(history::text(&dir, &loaded) + &history::halo_text(&dir)))
}

/// Prints the maps and the prediction benchmark of the store.
fn show_map(args: MapArgs) -> Result<(), Failure> {
    let pmax = map::fractions(&args.pmax).map_err(|m| Failure::new(2, format!("--pmax: {m}")))?;
    let tolerance = match map::fractions(&args.tolerance).as_deref() {
        Ok([one]) => *one,
        _ => {
            return Err(Failure::new(
                2,
                "--tolerance: one window between 0 and 100 %",
            ));
        }
    };
    let dir = history::dir(args.dir).map_err(|m| Failure::new(2, m))?;
    let loaded = history::load(&dir);
    let options = map::Options {
        op: args.op,
        pmax,
        tolerance,
    };
    let later = args.against.as_ref().map(|dir| (dir, history::load(dir)));
    let later = later
        .as_ref()
        .map(|(dir, loaded)| map::Later { dir, loaded });
    emit(&map::text(&dir, &loaded, later, &options))
}

fn report(args: &ReportArgs) -> Result<(), Failure> {
    let reports = args
        .files
        .iter()
        .map(|f| commtune_report::read(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| Failure::new(1, m))?;
    let (text, page) = match (args.compare, reports.as_slice()) {
        (false, [one]) => (
            commtune_report::summary(one, args.top),
            args.html.as_ref().map(|_| commtune_report::html(one)),
        ),
        (true, [a, b]) => {
            let names = args.files.iter().map(|f| f.display().to_string());
            let comparison = commtune_report::compare(a, b, names);
            (
                comparison.text(args.top),
                args.html.as_ref().map(|_| comparison.html()),
            )
        }
        (true, _) => return Err(Failure::new(2, "--compare needs two reports")),
        (false, _) => return Err(Failure::new(2, "two reports: add --compare")),
    };
    match (&args.html, page) {
        (Some(out), Some(page)) => std::fs::write(out, page)
            .map_err(|e| Failure::new(1, format!("cannot write {}: {e}", out.display())))?,
        _ => emit(&text)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_options() {
        let cli = Cli::try_parse_from([
            "commtune", "run", "--mode", "off", "--", "mpirun", "-np", "2", "./prog",
        ])
        .expect("parses");
        let Cmd::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.mode.as_deref(), Some("off"));
        assert_eq!(args.command, ["mpirun", "-np", "2", "./prog"]);
        // Without `--`, options after the launcher still belong to the launcher.
        let cli =
            Cli::try_parse_from(["commtune", "run", "mpirun", "--mode", "x"]).expect("parses");
        let Cmd::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.mode, None);
        assert_eq!(args.command, ["mpirun", "--mode", "x"]);
    }
}
