//! Running real MPI jobs under the preload library: compile a test program with the flavour's
//! compiler wrapper, launch it with the flavour's launcher and read the JSON report.
//!
//! Both library builds must exist (scripts/test builds them): target/release/libcommtune.so
//! (Open MPI) and target/mpich/release/libcommtune.so (MPICH).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    OpenMpi,
    Mpich,
}

pub use Flavour::{Mpich, OpenMpi};

/// Jobs run one at a time: the machine has two cores and MPICH busy-polls.
static JOBS: Mutex<()> = Mutex::new(());

const JOB_TIMEOUT: Duration = Duration::from_secs(180);

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `commtune` command of the same build profile as this test (crates/cli, another package
/// of the workspace: `cargo test --workspace` and scripts/build build it).
pub fn cli() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test>
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps")
        .join("commtune");
    assert!(
        path.exists(),
        "{} is missing: build the CLI first (scripts/build, or cargo build --workspace)",
        path.display()
    );
    path
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            OpenMpi => "openmpi",
            Mpich => "mpich",
        }
    }

    pub fn library(self) -> PathBuf {
        let path = match self {
            OpenMpi => root().join("target/release/libcommtune.so"),
            Mpich => root().join("target/mpich/release/libcommtune.so"),
        };
        assert!(
            path.exists(),
            "{} is missing: build both flavours first (scripts/test does)",
            path.display()
        );
        path
    }

    pub fn cc(self) -> &'static str {
        match self {
            OpenMpi => "mpicc.openmpi",
            Mpich => "mpicc.mpich",
        }
    }

    fn fortran(self) -> &'static str {
        match self {
            OpenMpi => "mpif90.openmpi",
            Mpich => "mpif90.mpich",
        }
    }

    /// The launcher with the options every job needs on this machine.
    fn launcher(self, np: usize) -> Command {
        match self {
            OpenMpi => {
                let mut c = Command::new("mpirun.openmpi");
                c.args(["--oversubscribe", "-np", &np.to_string()])
                    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                    // Open MPI 4.1.4's AVX op component gets 8-bit sums wrong on this host.
                    .env("OMPI_MCA_op", "^avx");
                c
            }
            Mpich => {
                let mut c = Command::new("mpiexec.mpich");
                c.args(["-np", &np.to_string()]);
                c
            }
        }
    }

    /// Passes one environment variable to every rank.
    fn pass_env(self, cmd: &mut Command, name: &str, value: &str) {
        match self {
            OpenMpi => cmd.args(["-x", &format!("{name}={value}")]),
            Mpich => cmd.args(["-genv", name, value]),
        };
    }
}

/// A scratch directory per test, under target/.
pub fn scratch(test: &str) -> PathBuf {
    let dir = root().join("target/test-runs").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// Compiles `tests/programs/<source>` for `flavour` into `dir`.
pub fn compile(flavour: Flavour, source: &str, dir: &Path) -> PathBuf {
    compile_with(flavour, source, dir, &[], "")
}

/// Compiles with extra compiler `flags`; `variant` tells the executables of one source apart.
pub fn compile_with(
    flavour: Flavour,
    source: &str,
    dir: &Path,
    flags: &[&str],
    variant: &str,
) -> PathBuf {
    let src = root().join("tests/programs").join(source);
    let stem = Path::new(source).file_stem().unwrap().to_string_lossy();
    let exe = dir.join(format!("{stem}{variant}-{}", flavour.name()));
    let mut cmd = if source.ends_with(".c") {
        let mut c = Command::new(flavour.cc());
        c.args(["-g", "-O1", "-pthread", "-Wall"]);
        c
    } else {
        let mut c = Command::new(flavour.fortran());
        // mpif.h has no interfaces: gfortran >= 10 needs this for choice buffers.
        c.args(["-g", "-O1", "-fallow-argument-mismatch", "-w"]);
        c.current_dir(dir);
        c
    };
    let out = cmd
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the compiler");
    assert!(
        out.status.success(),
        "compiling {source} for {flavour:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Compiles the bundled example (example/stencil.c) for `flavour` into `dir`.
pub fn compile_example(flavour: Flavour, dir: &Path) -> PathBuf {
    let exe = dir.join(format!("stencil-example-{}", flavour.name()));
    compile_c(flavour, &root().join("example/stencil.c"), &exe);
    exe
}

/// Compiles one C file (with debug information, so that sites have lines) into `exe`.
pub fn compile_c(flavour: Flavour, source: &Path, exe: &Path) {
    let out = Command::new(flavour.cc())
        .args(["-g", "-O1"])
        .arg(source)
        .arg("-o")
        .arg(exe)
        .arg("-lm")
        .output()
        .expect("run the compiler");
    assert!(
        out.status.success(),
        "compiling {} for {flavour:?} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One finished job.
pub struct Job {
    pub output: Output,
    pub report_path: PathBuf,
}

impl Job {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn assert_success(&self) -> &Self {
        assert!(
            self.output.status.success(),
            "job failed ({})\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            self.stdout(),
            self.stderr()
        );
        self
    }

    /// The verdict of a randomized test (tests/programs/fuzz_*.c: "fuzz: N calls, M failures,
    /// ..."), checked: the job succeeded, found nothing wrong and made enough calls to mean
    /// anything. Returns the verdict line.
    pub fn assert_fuzz_passed(&self) -> String {
        let verdict = self
            .stdout()
            .lines()
            .find_map(|l| {
                l.strip_prefix("fuzz: ")
                    .filter(|l| l.contains(" calls, "))
                    .map(String::from)
            })
            .unwrap_or_else(|| panic!("no verdict\n{}\n{}", self.stdout(), self.stderr()));
        self.assert_success();
        let calls: u64 = verdict.split(' ').next().unwrap().parse().unwrap();
        assert!(verdict.contains(" 0 failures"), "{}", self.stdout());
        assert!(calls >= 1000, "too few calls to mean anything: {verdict}");
        verdict
    }

    pub fn report(&self) -> Value {
        let text = std::fs::read_to_string(&self.report_path).unwrap_or_else(|e| {
            panic!(
                "no report at {}: {e}\nstderr:\n{}",
                self.report_path.display(),
                self.stderr()
            )
        });
        serde_json::from_str(&text).expect("the report is valid JSON")
    }
}

/// A job description: program, ranks, environment of the ranks.
pub struct Run<'a> {
    flavour: Flavour,
    np: usize,
    program: Vec<String>,
    env: Vec<(String, String)>,
    dir: &'a Path,
    preload: bool,
    /// One rank per host of the cluster in a box (`Cluster`), over TCP.
    on_cluster: bool,
    /// The start of the line a program prints when its work is done, just before MPI_Finalize
    /// (`finishes_with`).
    done: Option<String>,
}

pub fn run<'a>(flavour: Flavour, np: usize, program: &Path, dir: &'a Path) -> Run<'a> {
    Run {
        flavour,
        np,
        program: vec![program.to_string_lossy().into_owned()],
        env: Vec::new(),
        dir,
        preload: true,
        on_cluster: false,
        done: None,
    }
}

impl Run<'_> {
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.program.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Runs one rank per host of the cluster in a box; hold a `Cluster` meanwhile.
    pub fn on_cluster(mut self) -> Self {
        self.on_cluster = true;
        self
    }

    /// The program prints a line starting with `line` when its work is done, just before
    /// MPI_Finalize. MPICH across hosts (UCX over TCP) rarely hangs in MPI_Finalize, with or
    /// without the library (LD_PRELOAD.md, "Seeing what commtune does on a slow network"): such a
    /// job that timed out after that line runs once more, and fails only if it hangs again.
    pub fn finishes_with(mut self, line: &str) -> Self {
        self.done = Some(line.into());
        self
    }

    /// tests/programs/tuned_loop.c's allreduce tuned alone (its alltoall and allgatherv forced
    /// native, so that its calls alone count the communicator's instances), searched at once
    /// (COMMTUNE_BUDGET=1) and briefly (`brute`, 2 samples), under the injected `delays`.
    pub fn tuned_allreduce_alone(self, delays: &[String]) -> Self {
        self.env("COMMTUNE_MODE", "tune")
            .env("COMMTUNE_BUDGET", "1")
            .env("COMMTUNE_FORCE", "alltoall=native,allgatherv=native")
            .env("COMMTUNE_SEARCH", "brute")
            .env("COMMTUNE_SAMPLES", "2")
            .env("COMMTUNE_INJECT_DELAY", &delays.join(","))
    }

    /// Runs without the library (the reference run).
    pub fn native(mut self) -> Self {
        self.preload = false;
        self
    }

    /// Runs the job; the report goes to `<dir>/report.json` unless COMMTUNE_REPORT is set, and
    /// the library profiles (COMMTUNE_MODE=profile) unless COMMTUNE_MODE is set: tests that
    /// count calls per codelet must not depend on what the tuner decides. The history store is
    /// off unless COMMTUNE_HISTORY is set (tests never use the user's, and a job predicts only
    /// from a store its test made for it).
    pub fn go(self) -> Job {
        let _one_at_a_time = lock();
        let (mut cmd, report_path) = self.command();
        let output = match (self.flavour, self.on_cluster, self.done.as_deref()) {
            (Mpich, true, Some(done)) => match run_until_timeout(&mut cmd) {
                Ok(output) => output,
                Err(hung) if finished_work(&hung, done) => {
                    eprintln!("job {cmd:?} hung after its work was done: running it once more");
                    cluster(&["kill"]);
                    run_with_timeout(cmd)
                }
                Err(hung) => timed_out(&cmd, &hung),
            },
            _ => run_with_timeout(cmd),
        };
        Job {
            output,
            report_path,
        }
    }

    /// Runs several jobs at once (while no other job of this test binary runs).
    pub fn go_together(runs: Vec<Self>) -> Vec<Job> {
        let _one_at_a_time = lock();
        let started: Vec<_> = runs
            .iter()
            .map(|run| {
                let (cmd, report_path) = run.command();
                (
                    std::thread::spawn(move || run_with_timeout(cmd)),
                    report_path,
                )
            })
            .collect();
        started
            .into_iter()
            .map(|(job, report_path)| Job {
                output: job.join().expect("the job's thread"),
                report_path,
            })
            .collect()
    }

    /// The launcher's command line for the job, and where its report goes.
    fn command(&self) -> (Command, PathBuf) {
        // The ranks run in `dir`: a relative COMMTUNE_REPORT is relative to it.
        let report_path = match self.env.iter().find(|(k, _)| k == "COMMTUNE_REPORT") {
            Some((_, path)) => self.dir.join(path),
            None => self.dir.join("report.json"),
        };
        let _ = std::fs::remove_file(&report_path);
        let mut cmd = if self.on_cluster {
            cluster_launcher(self.flavour, self.np)
        } else {
            self.flavour.launcher(self.np)
        };
        let mut env = self.env.clone();
        if !env.iter().any(|(k, _)| k == "COMMTUNE_REPORT") {
            env.push((
                "COMMTUNE_REPORT".into(),
                report_path.to_string_lossy().into_owned(),
            ));
        }
        if !env.iter().any(|(k, _)| k == "COMMTUNE_MODE") {
            env.push(("COMMTUNE_MODE".into(), "profile".into()));
        }
        if !env.iter().any(|(k, _)| k == "COMMTUNE_HISTORY") {
            env.push(("COMMTUNE_HISTORY".into(), "off".into()));
        }
        if self.preload {
            let lib = self.flavour.library();
            env.push(("LD_PRELOAD".into(), lib.to_string_lossy().into_owned()));
        }
        for (name, value) in &env {
            self.flavour.pass_env(&mut cmd, name, value);
        }
        cmd.args(&self.program).current_dir(self.dir);
        (cmd, report_path)
    }
}

/// A service tests share (a cluster), held while any test holds it: the first to hold it starts
/// it, the last to drop its hold stops it.
pub struct Held {
    users: &'static Mutex<usize>,
    stop: fn(),
}

impl Held {
    pub fn new(users: &'static Mutex<usize>, start: impl FnOnce(), stop: fn()) -> Held {
        let mut n = users.lock().unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            start();
        }
        *n += 1;
        Held { users, stop }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut n = self.users.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            (self.stop)();
        }
    }
}

/// The cluster in a box (scripts/cluster: network namespaces on a bridge, shaped NICs) while any
/// test holds one.
pub struct Cluster {
    /// Stops the cluster when the last holder drops.
    _held: Held,
}

static CLUSTER_USERS: Mutex<usize> = Mutex::new(0);

impl Cluster {
    /// `hosts` hosts with NICs at `rate` (as tc takes it). Needs root, as CI has.
    pub fn up(hosts: usize, rate: &str) -> Cluster {
        Cluster {
            _held: Held::new(
                &CLUSTER_USERS,
                || {
                    cluster(&["up", "--hosts", &hosts.to_string(), "--rate", rate]);
                },
                || {
                    cluster(&["down"]);
                },
            ),
        }
    }
}

fn cluster(args: &[&str]) -> String {
    let out = Command::new(root().join("scripts/cluster"))
        .args(args)
        .output()
        .expect("run scripts/cluster");
    assert!(
        out.status.success(),
        "scripts/cluster {args:?} failed (it needs root and iproute2):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cluster's launcher for `flavour` with `np` ranks, one per host.
fn cluster_launcher(flavour: Flavour, np: usize) -> Command {
    let words = cluster(&["launcher", flavour.name(), "-np", &np.to_string()]);
    let mut words = words.lines();
    let mut cmd = Command::new(words.next().expect("a launcher"));
    cmd.args(words);
    if flavour == OpenMpi {
        // As `launcher`: Open MPI 4.1.4's AVX op component gets 8-bit sums wrong on this host.
        cmd.args(["--mca", "op", "^avx"]);
    }
    cmd
}

/// Runs `job` while no other job of this test binary runs.
pub fn alone<T>(job: impl FnOnce() -> T) -> T {
    let _one_at_a_time = lock();
    job()
}

fn lock() -> MutexGuard<'static, ()> {
    JOBS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `cmd`, killing it after JOB_TIMEOUT (a deadlock must fail the test, not hang CI).
pub fn run_with_timeout(mut cmd: Command) -> Output {
    run_until_timeout(&mut cmd).unwrap_or_else(|hung| timed_out(&cmd, &hung))
}

/// Runs `cmd`: its output, or what it printed before JOB_TIMEOUT killed it.
fn run_until_timeout(cmd: &mut Command) -> Result<Output, Output> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for the job").is_some() {
            return Ok(child.wait_with_output().expect("collect the job's output"));
        }
        if start.elapsed() > JOB_TIMEOUT {
            let _ = child.kill();
            return Err(child.wait_with_output().expect("collect the job's output"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn timed_out(cmd: &Command, hung: &Output) -> ! {
    panic!(
        "job {cmd:?} did not finish in {JOB_TIMEOUT:?} (deadlock?)\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&hung.stdout),
        String::from_utf8_lossy(&hung.stderr)
    );
}

/// Whether a job that hung had printed a line starting with `done`.
fn finished_work(hung: &Output, done: &str) -> bool {
    String::from_utf8_lossy(&hung.stdout)
        .lines()
        .any(|l| l.starts_with(done))
}

/// The line of `marker` (e.g. `SITE:allreduce`) in a test program's source.
pub fn marker_line(source: &str, marker: &str) -> u64 {
    let text = std::fs::read_to_string(root().join("tests/programs").join(source)).unwrap();
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            l.split(marker)
                .nth(1)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "marker {marker} must be on exactly one line of {source}"
    );
    lines[0] as u64
}

/// The report's sites.
pub fn sites(report: &Value) -> &Vec<Value> {
    report["sites"].as_array().expect("sites is an array")
}

/// The events of kind `event` in a key's timeline (its report's `tuning`).
pub fn events<'a>(tuning: &'a Value, event: &str) -> Vec<&'a Value> {
    tuning["timeline"]
        .as_array()
        .unwrap_or_else(|| panic!("no timeline: {tuning:#}"))
        .iter()
        .filter(|e| e["event"] == event)
        .collect()
}

/// The one site whose source line is `line`.
pub fn site_at_line(report: &Value, line: u64) -> &Value {
    let found: Vec<&Value> = sites(report)
        .iter()
        .filter(|s| s["line"].as_u64() == Some(line))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one site at line {line}, report:\n{}",
        serde_json::to_string_pretty(report).unwrap()
    );
    found[0]
}

/// Each operation's codelets as `commtune codelets` lists them, native first.
pub const ALLREDUCE: &[&str] = &[
    "native",
    "linear",
    "nonoverlapping",
    "recursive_doubling",
    "ring",
    "rabenseifner",
    "binomial",
];
pub const ALLTOALL: &[&str] = &[
    "native",
    "linear",
    "linear_sync2",
    "linear_sync4",
    "linear_sync8",
    "pairwise",
    "pairwise_excl",
    "bruck",
];
pub const ALLGATHERV: &[&str] = &[
    "native",
    "linear",
    "ring",
    "recursive_doubling",
    "bruck",
    "neighbor_exchange",
];

/// COMMTUNE_INJECT_DELAY items with which the self-check reopens an allreduce's search with
/// the other timing (a search of `tuned_allreduce_alone`: its decision at call 19): ring wins
/// it, every other codelet taking `lead`, then from call 24 on, inside the window the
/// self-check times after the decision, ring takes `ring_after` and the others `after`, more
/// than their samples showed, so the runner-up misses its estimate too.
pub fn reopening_delays(lead: &str, after: &str, ring_after: &str) -> Vec<String> {
    let mut delays = all_but("allreduce", ALLREDUCE, "ring", &format!("{after}@24"));
    delays.extend(all_but("allreduce", ALLREDUCE, "ring", lead));
    delays.push(format!("allreduce:ring={ring_after}@24"));
    delays
}

/// A launcher-independent wrapper program that sets the variable `name` to its first argument on
/// rank 0 and to its second on every other rank, then runs the rest of its arguments: ranks that
/// see different stores, or weigh a search differently.
pub fn per_rank_env(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("per-rank-{name}.sh"));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             rank=${{OMPI_COMM_WORLD_RANK:-$PMI_RANK}}\n\
             if [ \"$rank\" = 0 ]; then {name}=$1; else {name}=$2; fi\n\
             export {name}\n\
             shift 2\n\
             exec \"$@\"\n"
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&path, permissions).unwrap();
    path
}

/// COMMTUNE_INJECT_DELAY items making `winner` the only codelet of `op` (among `codelets`)
/// without `delay`.
pub fn all_but(op: &str, codelets: &[&str], winner: &str, delay: &str) -> Vec<String> {
    codelets
        .iter()
        .filter(|c| **c != winner)
        .map(|c| format!("{op}:{c}={delay}"))
        .collect()
}
