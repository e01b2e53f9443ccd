//! The batch path under a real Slurm: a one-node cluster (scripts/slurm: munged, slurmctld and
//! slurmd from Debian's slurm-wlm, started here and stopped after) runs the bundled example on
//! 4 ranks under both MPIs, once submitted with `sbatch scripts/commtune.sbatch` and once as
//! `commtune run -- srun -n 4 ./app`. Neither names srun's MPI plugin and the cluster's
//! `MpiDefault` is `none`: `commtune run` must pick it (pmix for Open MPI, pmi2 for MPICH), or
//! the MPICH ranks would be four singletons writing four one-rank reports over each other and
//! the Open MPI ranks would abort. Needs root, as CI has.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use common::{
    Flavour, Held, Mpich, OpenMpi, alone, compile_example, root, run_with_timeout, scratch,
};
use serde_json::Value;

/// The cluster while any test holds one.
struct Slurm {
    /// Stops the cluster when the last holder drops.
    _held: Held,
}

static USERS: Mutex<usize> = Mutex::new(0);

fn state_dir() -> PathBuf {
    root().join("target/test-runs/slurm-state")
}

fn slurm_script(args: &[&str]) {
    let out = Command::new(root().join("scripts/slurm"))
        .args(args)
        .env("COMMTUNE_SLURM_DIR", state_dir())
        .output()
        .expect("run scripts/slurm");
    assert!(
        out.status.success(),
        "scripts/slurm {args:?} failed (root, slurm-wlm and munge needed: scripts/install-deps):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Slurm {
    fn up() -> Slurm {
        Slurm {
            _held: Held::new(&USERS, || slurm_script(&["up"]), || slurm_script(&["down"])),
        }
    }

    /// A Slurm command of this cluster, with what every job here needs in its environment.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(dir)
            .env("SLURM_CONF", state_dir().join("slurm.conf"))
            .env_remove("SLURM_MPI_TYPE")
            .env("COMMTUNE", root().join("target/release/commtune"))
            // Cargo's build-script variable of this crate, no knob of the library.
            .env_remove("COMMTUNE_BUILD_FLAVOUR")
            // `commtune run` tunes, and a tuned job reads and writes the history store: never
            // the user's, which would carry one test run's decisions into the next.
            .env("COMMTUNE_HISTORY", "off")
            // 4 ranks on 2 cores: srun does not tell Open MPI it is oversubscribed, so it would
            // busy-poll (mpirun --oversubscribe makes it yield).
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
        cmd
    }
}

/// Small grids, and enough iterations for the alltoall and allgatherv (every 50th).
const ARGS: [&str; 2] = ["32", "100"];

fn read_report(path: &Path, log: &str) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no report at {}: {e}\n{log}", path.display()));
    serde_json::from_str(&text).expect("the report is JSON")
}

/// All 4 ranks in one job and every operation of the example seen.
fn check(report: &Value, flavour: Flavour, log: &str) {
    assert_eq!(report["nprocs"], 4, "{log}");
    assert_eq!(report["ranks_reporting"], 4, "{log}");
    let mpi = report["mpi"].as_str().unwrap_or_default();
    let expected = match flavour {
        OpenMpi => "Open MPI",
        Mpich => "MPICH",
    };
    assert!(mpi.contains(expected), "{mpi}");
    let ops: Vec<&str> = report["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .filter_map(|s| s["op"].as_str())
        .collect();
    for op in ["halo", "allreduce", "alltoall", "allgatherv"] {
        assert!(ops.contains(&op), "{op} missing in {ops:?}\n{log}");
    }
}

fn sbatch(slurm: &Slurm, flavour: Flavour, dir: &Path, exe: &Path) {
    let mut cmd = slurm.command("sbatch", dir);
    // The script asks for 2 nodes of 16 tasks, a template for real clusters: this one has one
    // node with 4 CPUs. Command-line options override #SBATCH lines.
    cmd.args(["--wait", "--nodes=1", "--ntasks=4", "--ntasks-per-node=4"])
        .arg("--output=slurm-%j.out")
        .arg(root().join("scripts/commtune.sbatch"))
        .arg(exe)
        .args(ARGS);
    let out = alone(|| run_with_timeout(cmd));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    let log = std::fs::read_to_string(dir.join(format!("slurm-{id}.out"))).unwrap_or_default();
    let log = format!(
        "sbatch: {stdout}{}\njob output:\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    assert!(log.contains("checks passed"), "{log}");
    assert!(!log.contains("unknown knob"), "{log}");
    let report = read_report(&dir.join(format!("commtune-{id}.json")), &log);
    check(&report, flavour, &log);
    assert!(
        report["sites"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.get("tuning").is_none()),
        "the script profiles (COMMTUNE_MODE=profile): {log}"
    );
}

fn srun(slurm: &Slurm, flavour: Flavour, dir: &Path, exe: &Path) {
    let report_path = dir.join("srun.json");
    let mut cmd = slurm.command(root().join("target/release/commtune"), dir);
    cmd.arg("run")
        .arg("--report")
        .arg(&report_path)
        .args(["--", "srun", "-n", "4"])
        .arg(exe)
        .args(ARGS);
    let out = alone(|| run_with_timeout(cmd));
    let log = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    // One job: the example prints its checksum once, from rank 0 of 4.
    assert_eq!(log.matches("checks passed").count(), 1, "{log}");
    check(&read_report(&report_path, &log), flavour, &log);
}

fn batch_path(flavour: Flavour) {
    let dir = scratch(&format!("slurm-{}", flavour.name()));
    let exe = compile_example(flavour, &dir);
    let slurm = Slurm::up();
    sbatch(&slurm, flavour, &dir, &exe);
    srun(&slurm, flavour, &dir, &exe);
}

#[test]
fn open_mpi_under_sbatch_and_srun() {
    batch_path(OpenMpi);
}

#[test]
fn mpich_under_sbatch_and_srun() {
    batch_path(Mpich);
}
