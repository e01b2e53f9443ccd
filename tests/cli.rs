//! The `commtune` command line: dry runs only (no MPI job starts here) and `commtune report`.
//!
//! Tests that need a real library use the two builds made before `cargo test`:
//! target/release/libcommtune.so (`cargo build --release`) and
//! target/mpich/release/libcommtune.so (`MPICC=mpicc.mpich cargo build --release --target-dir
//! target/mpich`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn library(flavour: &str) -> PathBuf {
    let (dir, build) = match flavour {
        "openmpi" => ("target/release", "cargo build --release"),
        _ => (
            "target/mpich/release",
            "MPICC=mpicc.mpich cargo build --release --target-dir target/mpich",
        ),
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join("libcommtune.so");
    assert!(
        path.is_file(),
        "{} is missing: build it with `{build}` before running these tests",
        path.display()
    );
    path.canonicalize().expect("canonical library path")
}

/// `commtune` with a clean COMMTUNE_* environment and both libraries named explicitly.
fn commtune(args: &[&str]) -> Command {
    let mut cmd = Command::new(common::cli());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("COMMTUNE_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("LD_PRELOAD")
        .env_remove("SLURM_MPI_TYPE")
        .env("COMMTUNE_LIB_OPENMPI", library("openmpi"))
        .env("COMMTUNE_LIB_MPICH", library("mpich"))
        .args(args);
    cmd
}

fn run(cmd: &mut Command) -> (Output, String, String) {
    let output = cmd.output().expect("commtune runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

/// Runs a dry run that must succeed; returns (comment lines, command line, stderr).
fn dry_run(cmd: &mut Command) -> (String, String, String) {
    let (output, stdout, stderr) = run(cmd);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let (comments, command): (Vec<&str>, Vec<&str>) =
        stdout.lines().partition(|l| l.starts_with('#'));
    assert_eq!(command.len(), 1, "one command line expected:\n{stdout}");
    (comments.join("\n"), command[0].to_string(), stderr)
}

#[test]
fn mpirun_gets_dash_x() {
    let lib = library("openmpi");
    let (comments, line, _) = dry_run(
        commtune(&["run", "--dry-run", "--mode", "profile", "--"])
            .args(["mpirun", "-np", "2", "./prog"])
            .env("COMMTUNE_VERBOSE", "2"),
    );
    assert!(comments.contains("Open MPI"), "{comments}");
    assert!(comments.contains("environment: unchanged"), "{comments}");
    assert_eq!(
        line,
        format!(
            "mpirun -x LD_PRELOAD={} -x COMMTUNE_MODE=profile -x COMMTUNE_VERBOSE=2 -np 2 ./prog",
            lib.display()
        )
    );
}

#[test]
fn mpiexec_mpich_gets_genv() {
    let lib = library("mpich");
    let (comments, line, _) = dry_run(
        commtune(&["run", "--dry-run", "--report", "out dir/r.json", "--"])
            .args(["mpiexec.mpich", "-np", "2", "./prog"])
            .env("LD_PRELOAD", "/other.so"),
    );
    assert!(comments.contains("MPICH"), "{comments}");
    assert_eq!(
        line,
        format!(
            "mpiexec.mpich -genv LD_PRELOAD {}:/other.so -genv COMMTUNE_REPORT 'out dir/r.json' \
             -np 2 ./prog",
            lib.display()
        )
    );
}

#[test]
fn srun_gets_export() {
    let lib = library("openmpi");
    let (_, line, _) = dry_run(
        commtune(&[
            "run",
            "--dry-run",
            "--mpi",
            "openmpi",
            "--mode",
            "off",
            "--",
        ])
        .args(["srun", "-n", "4", "./prog"]),
    );
    assert_eq!(
        line,
        format!(
            "srun --export=ALL,LD_PRELOAD={},COMMTUNE_MODE=off --mpi=pmix -n 4 ./prog",
            lib.display()
        )
    );
    // srun's MPI plugin chosen by the user (here through the environment) is kept.
    let (_, line, _) = dry_run(
        commtune(&["run", "--dry-run", "--mpi", "openmpi", "--"])
            .args(["srun", "-n", "4", "./prog"])
            .env("SLURM_MPI_TYPE", "pmix_v4"),
    );
    assert!(!line.contains("--mpi"), "{line}");
    // A value with a comma cannot go into --export: it goes into srun's environment.
    let (comments, line, _) = dry_run(
        commtune(&[
            "run",
            "--dry-run",
            "--mpi",
            "openmpi",
            "--report",
            "a,b.json",
            "--",
        ])
        .args(["srun", "./prog"]),
    );
    assert!(
        comments.contains("environment: COMMTUNE_REPORT=a,b.json"),
        "{comments}"
    );
    assert!(line.starts_with("srun --export=ALL,LD_PRELOAD="), "{line}");
    assert!(
        line.ends_with(",COMMTUNE_REPORT --mpi=pmix ./prog"),
        "{line}"
    );
}

#[test]
fn srun_detects_the_program() {
    // Any ELF file linked to MPICH serves as the "program": the MPICH library itself.
    let lib = library("mpich");
    let program = lib.display().to_string();
    let (comments, line, _) = dry_run(&mut commtune(&[
        "run",
        "--dry-run",
        "--",
        "srun",
        "-n",
        "2",
        &program,
    ]));
    assert!(comments.contains("links libmpich.so.12"), "{comments}");
    assert_eq!(
        line,
        format!("srun --export=ALL,LD_PRELOAD={program} --mpi=pmi2 -n 2 {program}")
    );
}

#[test]
fn program_overrides_launcher_with_a_warning() {
    let program = library("openmpi").display().to_string();
    let (comments, line, stderr) = dry_run(&mut commtune(&[
        "run",
        "--dry-run",
        "--",
        "mpiexec.mpich",
        "-n",
        "2",
        &program,
    ]));
    assert!(stderr.contains("warning"), "{stderr}");
    assert!(comments.contains("Open MPI"), "{comments}");
    // The launcher's syntax stays Hydra's; the library is the Open MPI one.
    assert!(
        line.starts_with(&format!("mpiexec.mpich -genv LD_PRELOAD {program} ")),
        "{line}"
    );
}

#[test]
fn direct_program_gets_environment() {
    let program = library("mpich").display().to_string();
    let (comments, line, _) = dry_run(
        commtune(&["run", "--dry-run", "--", &program, "arg"]).env("COMMTUNE_LIB_OTHER", "x"),
    );
    assert!(
        comments.contains(&format!("environment: LD_PRELOAD={program}\n"))
            || comments.ends_with(&format!("environment: LD_PRELOAD={program}")),
        "{comments}"
    );
    assert_eq!(line, format!("{program} arg"));
}

#[test]
fn program_without_mpi_needs_dash_dash_mpi() {
    let (output, stdout, stderr) = run(&mut commtune(&[
        "run",
        "--dry-run",
        "--",
        "/bin/sh",
        "-c",
        "true",
    ]));
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("--mpi"), "{stderr}");
}

#[test]
fn wrong_flavour_library_is_rejected() {
    let (output, stdout, stderr) = run(commtune(&["run", "--dry-run", "--"])
        .args(["mpiexec.mpich", "-np", "2", "./prog"])
        .env("COMMTUNE_LIB_MPICH", library("openmpi")));
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("built for Open MPI"), "{stderr}");
    assert!(
        stderr.contains("MPICC=mpicc.mpich cargo build --release --target-dir target/mpich"),
        "{stderr}"
    );
}

#[test]
fn missing_library_names_the_build_command() {
    let (output, _, stderr) = run(commtune(&["run", "--dry-run", "--"])
        .args(["mpirun", "-np", "2", "./prog"])
        .env("COMMTUNE_LIB_OPENMPI", "/nonexistent/libcommtune.so"));
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/libcommtune.so: not found"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo build --release"), "{stderr}");
}

#[test]
fn library_found_next_to_the_executable() {
    // Without COMMTUNE_LIB_*, the cargo layout is searched from the executable's directory.
    let exe = common::cli();
    let exe_dir = exe.parent().expect("exe dir");
    let mut cmd = commtune(&["run", "--dry-run", "--", "mpirun", "-np", "2", "./prog"]);
    cmd.env_remove("COMMTUNE_LIB_OPENMPI");
    let (output, stdout, stderr) = run(&mut cmd);
    match exe_dir.join("libcommtune.so").canonicalize() {
        Ok(lib) => {
            assert!(output.status.success(), "{stderr}");
            assert!(
                stdout.contains(&format!("LD_PRELOAD={}", lib.display())),
                "{stdout}"
            );
        }
        Err(_) => assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}"),
    }
}

#[test]
fn report_prints_the_summary() {
    let dir = std::env::temp_dir().join(format!("commtune-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("report.json");
    std::fs::write(
        &file,
        r#"{"version":1,"mpi":"Test MPI 1.0","nprocs":2,"ranks_reporting":2,"run_time_s":1.0,"sites":[]}"#,
    )
    .expect("write report");
    let file_arg = file.display().to_string();
    let (output, stdout, stderr) = run(&mut commtune(&["report", &file_arg, "--top", "5"]));
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("Test MPI 1.0"), "{stdout}");

    // A report of a later format is refused, not misread.
    std::fs::write(
        &file,
        r#"{"version":99,"mpi":"Test MPI 1.0","nprocs":2,"ranks_reporting":2,"run_time_s":1.0,"sites":[]}"#,
    )
    .expect("write report");
    let (output, _, stderr) = run(&mut commtune(&["report", &file_arg]));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr.contains("report format version 99 is newer"),
        "{stderr}"
    );

    std::fs::write(&file, "{not json").expect("write bad report");
    let (output, _, stderr) = run(&mut commtune(&["report", &file_arg]));
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains(&file_arg), "{stderr}");

    let missing = dir.join("missing.json").display().to_string();
    let (output, _, stderr) = run(&mut commtune(&["report", &missing]));
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains(&missing), "{stderr}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn help_explains_detection_and_injection() {
    let (output, stdout, _) = run(&mut commtune(&["run", "--help"]));
    assert!(output.status.success());
    for word in [
        "--dry-run",
        "--mpi",
        "-genv",
        "--export",
        "COMMTUNE_LIB_MPICH",
    ] {
        assert!(stdout.contains(word), "{word} missing from:\n{stdout}");
    }
}

#[test]
fn codelets_lists_every_operation_from_the_library() {
    let (out, stdout, stderr) = run(&mut commtune(&["codelets", "--json"]));
    assert!(out.status.success(), "{stderr}");
    let catalogue: serde_json::Value = serde_json::from_str(&stdout).expect("JSON catalogue");
    let ops: Vec<&str> = catalogue["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["allreduce", "alltoall", "allgatherv", "halo"]);
    let allreduce: Vec<&str> = catalogue["operations"][0]["codelets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        allreduce,
        [
            "native",
            "linear",
            "nonoverlapping",
            "recursive_doubling",
            "ring",
            "rabenseifner",
            "binomial"
        ]
    );
    let (out, table, _) = run(&mut commtune(&["codelets"]));
    assert!(out.status.success());
    assert!(table.contains("ring                 pair      no           an intra-communicator, a commutative operation"), "{table}");
}

#[test]
fn a_reader_that_stops_early_is_no_error() {
    // `commtune codelets | head -1`: the pipe closes before the table is written.
    let mut child = commtune(&["codelets"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("commtune runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
