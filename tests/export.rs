//! `commtune export` with real MPI jobs: a history store of decisions becomes Open MPI's
//! coll_tuned rules file or MPICH's selection file, and a job run with that file alone (no
//! preload library) runs the exported algorithms. What a job sends tells the algorithm without
//! timing it: per peer, the messages and bytes rank 0 sent (Open MPI's pml monitoring
//! component), or how many messages each rank handed to UCX (MPICH, counted by
//! tests/programs/count_sends.c). With the file, that equals the job with the algorithm forced
//! by the MPI library's own variable, and differs from the job left to its default.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Flavour, Mpich, OpenMpi, Run, cli, compile, run, scratch};
use commtune_history::{Entry, Estimate, How, Platform};
use commtune_tune::settings::Settings;

const RANKS: usize = 4;
/// Elements per call of export_probe: 64 doubles (allreduce, 512 bytes) or 64 ints per block
/// (alltoall and allgatherv: 1024 bytes received on 4 ranks).
const COUNT: &str = "64";

/// One exported decision and the MPI library's own variable that forces the same algorithm.
struct Case {
    op: &'static str,
    bytes: u64,
    winner: &'static str,
    forced: [(&'static str, &'static str); 2],
}

/// Each algorithm differs from the library's default for its call on 4 ranks (checked below).
fn cases(flavour: Flavour) -> Vec<Case> {
    let case = |op, bytes, winner, forced| Case {
        op,
        bytes,
        winner,
        forced,
    };
    match flavour {
        OpenMpi => {
            let dynamic = ("OMPI_MCA_coll_tuned_use_dynamic_rules", "1");
            vec![
                case(
                    "allreduce",
                    512,
                    "ring",
                    [dynamic, ("OMPI_MCA_coll_tuned_allreduce_algorithm", "4")],
                ),
                case(
                    "alltoall",
                    1024,
                    "bruck",
                    [dynamic, ("OMPI_MCA_coll_tuned_alltoall_algorithm", "3")],
                ),
                case(
                    "allgatherv",
                    1024,
                    "ring",
                    [dynamic, ("OMPI_MCA_coll_tuned_allgatherv_algorithm", "3")],
                ),
            ]
        }
        Mpich => {
            // A forced algorithm MPICH cannot apply then fails the job instead of running the
            // default unnoticed.
            let loud = ("MPIR_CVAR_COLLECTIVE_FALLBACK", "error");
            vec![
                case(
                    "allreduce",
                    512,
                    "recursive_doubling",
                    [
                        loud,
                        ("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "recursive_doubling"),
                    ],
                ),
                case(
                    "alltoall",
                    1024,
                    "bruck",
                    [loud, ("MPIR_CVAR_ALLTOALL_INTRA_ALGORITHM", "brucks")],
                ),
                case(
                    "allgatherv",
                    1024,
                    "ring",
                    [loud, ("MPIR_CVAR_ALLGATHERV_INTRA_ALGORITHM", "ring")],
                ),
            ]
        }
    }
}

/// The MPI library's version as the preload library records it (the report's `mpi`, the same
/// string as a history entry's), from a short profiled job.
fn library_version(flavour: Flavour, exe: &Path, dir: &Path) -> String {
    let job = run(flavour, 2, exe, dir).args(&["alltoall", "4"]).go();
    job.assert_success();
    job.report()["mpi"]
        .as_str()
        .expect("the report names the MPI library")
        .to_string()
}

/// A search's decision, timed as the library times by default (what export takes by default).
fn entry(mpi: &str, op: &str, bytes: u64, winner: &str) -> Entry {
    Entry {
        op: op.into(),
        comm_size: RANKS as u32,
        ranks_per_node: Some(RANKS as u32),
        size_class: String::new(),
        bytes,
        signature: String::new(),
        facts: format!("size={RANKS} commutative=true"),
        mpi: mpi.into(),
        platform: Platform {
            host: "node#".into(),
            cpu: "unknown".into(),
            transport: "shared memory".into(),
        },
        estimates: vec![
            Estimate {
                codelet: "native".into(),
                us: 100.0,
                error_us: 1.0,
            },
            Estimate {
                codelet: winner.into(),
                us: 50.0,
                error_us: 1.0,
            },
        ],
        timing: Some(Settings::default().timing.name().into()),
        reopened_from: None,
        realised_us: None,
        winner: winner.into(),
        replaced: None,
        time: 0,
        how: How::Search,
    }
}

/// A store with `cases`' decisions, a small alltoall whose winner has no counterpart anywhere,
/// a small native allreduce, one entry of another MPI library, and two of the first case which
/// native won, one timed otherwise, one measured on another platform (pooled with the case's,
/// native would win: median 55 µs against 275).
fn store(dir: &Path, mpi: &str, cases: &[Case]) -> PathBuf {
    let store = dir.join("store");
    let mut entries: Vec<Entry> = cases
        .iter()
        .map(|c| entry(mpi, c.op, c.bytes, c.winner))
        .collect();
    let mut native = entries[0].clone();
    native.estimates[0].us = 10.0;
    native.estimates[1].us = 500.0;
    native.winner = "native".into();
    assert_ne!(OTHER_TIMING, Settings::default().timing.name());
    let other_timing = Entry {
        timing: Some(OTHER_TIMING.into()),
        ..native.clone()
    };
    let other_platform = Entry {
        platform: rig(),
        ..native
    };
    entries.extend([other_timing, other_platform]);
    entries.push(entry(mpi, "alltoall", 64, "pairwise_excl"));
    entries.push(entry(mpi, "allreduce", 8, "native"));
    entries.push(entry("Another MPI 1.0", "allreduce", 512, "ring"));
    commtune_history::write(&store, "job.jsonl", &entries).expect("write the store");
    store
}

/// Not the library's default timing.
const OTHER_TIMING: &str = "period";

/// The platform of `entry`'s decisions, as `commtune map` and export name it.
const PLATFORM: &str = "node# (unknown, transport shared memory)";

/// Another platform than `entry`'s.
fn rig() -> Platform {
    Platform {
        host: "rig#".into(),
        cpu: "unknown".into(),
        transport: "OMPI_MCA_btl=tcp,self".into(),
    }
}

fn export(format: &str, store: &Path, output: &Path) -> Output {
    export_with(format, store, output, &[])
}

fn export_with(format: &str, store: &Path, output: &Path, args: &[&str]) -> Output {
    Command::new(cli())
        .args(["export", "--format", format, "--dir"])
        .arg(store)
        .arg("--output")
        .arg(output)
        .args(args)
        .output()
        .expect("run commtune export")
}

/// The output of an export that succeeded.
fn exported(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout
}

/// The error output of an export that exited with `code`.
fn refused(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

/// What the job sent, without the preload library: sorted lines, the same for the same
/// algorithms. `env`: the MPI library's variables for this run.
fn sent(flavour: Flavour, exe: &Path, dir: &Path, op: &str, env: &[(&str, &str)]) -> String {
    sent_on(RANKS, flavour, exe, dir, op, env)
}

fn sent_on(
    ranks: usize,
    flavour: Flavour,
    exe: &Path,
    dir: &Path,
    op: &str,
    env: &[(&str, &str)],
) -> String {
    // Open MPI's monitoring writes each rank's counts to PREFIX.RANK.prof (enable_output 3): on
    // stderr, mpirun now and then lost rank 0's line at MPI_Finalize.
    let monitoring = dir.join("monitoring");
    let rank0 = dir.join("monitoring.0.prof");
    let _ = std::fs::remove_file(&rank0);
    let mut job: Run = run(flavour, ranks, exe, dir).native().args(&[op, COUNT]);
    job = match flavour {
        OpenMpi => job
            .env("OMPI_MCA_pml_monitoring_enable", "2")
            .env("OMPI_MCA_pml_monitoring_enable_output", "3")
            .env(
                "OMPI_MCA_pml_monitoring_filename",
                &monitoring.to_string_lossy(),
            ),
        Mpich => job
            .env("LD_PRELOAD", &dir.join("count_sends.so").to_string_lossy())
            .env("MPIR_CVAR_NOLOCAL", "1"),
    };
    for (name, value) in env {
        job = job.env(name, value);
    }
    let job = job.go();
    job.assert_success();
    let mut text = format!("{}{}", job.stdout(), job.stderr());
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok") || l.starts_with("user op:")),
        "{text}"
    );
    if flavour == OpenMpi {
        text += &std::fs::read_to_string(&rank0).expect("rank 0's monitoring file");
    }
    // Open MPI: "I|E <rank> <peer> <n> bytes <n> msgs sent <histogram>"; rank 0's sends.
    // MPICH: "sends: <per rank>". Allreduce: also each rank's results, whose rounding and
    // operand order differ between some algorithms.
    let observed = ["I\t0\t", "E\t0\t", "sends:", "user op:", "sum:"];
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| observed.iter().any(|o| l.starts_with(o)))
        .map(|l| l.split('\t').take(5).collect::<Vec<_>>().join(" "))
        .collect();
    lines.sort();
    assert!(!lines.is_empty(), "nothing counted:\n{text}");
    lines.join("\n")
}

fn exported_rules_change_the_choice(flavour: Flavour) {
    let name = flavour.name();
    let dir = scratch(&format!("export_{name}"));
    let exe = compile(flavour, "export_probe.c", &dir);
    if flavour == Mpich {
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(dir.join("count_sends.so"))
            .arg(common::root().join("tests/programs/count_sends.c"))
            .arg("-ldl")
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mpi = library_version(flavour, &exe, &dir);
    let cases = cases(flavour);
    let store = store(&dir, &mpi, &cases);
    let file = dir.join(match flavour {
        OpenMpi => "rules.txt",
        Mpich => "selection.json",
    });
    let out = export_with(name, &store, &file, &["--platform", "node#"]);
    let stdout = exported(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let library = match flavour {
        OpenMpi => "Open MPI",
        Mpich => "MPICH",
    };
    let unmapped = format!(
        "alltoall on 4 ranks from 0 bytes: pairwise_excl has no {library} counterpart; left to {library}'s own choice"
    );
    assert!(
        stderr.contains(&format!("commtune: export: {unmapped}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("skipped 1 entries measured with another MPI library"),
        "{stderr}"
    );
    let note = format!(
        "{mpi} on {PLATFORM}, timed {}; left out 1 entry of other timings ({OTHER_TIMING} 1); \
         left out 1 entry of other MPI versions or platforms ({mpi} on {} 1)",
        Settings::default().timing.name(),
        rig()
    );
    assert!(stdout.contains(&note), "{stdout}");
    let text = std::fs::read_to_string(&file).expect("the exported file");
    let shown = file.display().to_string();
    let using: Vec<(&str, &str)> = match flavour {
        OpenMpi => {
            assert!(text.contains(&format!("# {unmapped}")), "{text}");
            assert!(
                text.contains(&format!("its decisions of {note}.")),
                "{text}"
            );
            assert!(
                stdout.contains(&format!(
                    "--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename {shown}"
                )),
                "{stdout}"
            );
            vec![
                ("OMPI_MCA_coll_tuned_use_dynamic_rules", "1"),
                ("OMPI_MCA_coll_tuned_dynamic_rules_filename", &shown),
            ]
        }
        Mpich => {
            assert!(
                stdout.contains(&format!(
                    "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE {shown}"
                )),
                "{stdout}"
            );
            vec![("MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE", &shown)]
        }
    };
    for case in &cases {
        let default = sent(flavour, &exe, &dir, case.op, &[]);
        let forced = sent(flavour, &exe, &dir, case.op, &case.forced);
        let exported = sent(flavour, &exe, &dir, case.op, &using);
        assert_ne!(
            forced, default,
            "{} {}: forcing {} sends what the default does; the case proves nothing",
            name, case.op, case.winner
        );
        assert_eq!(
            exported, forced,
            "{} {}: the exported file did not run {}\n{text}",
            name, case.op, case.winner
        );
    }
    // The store measured 4 ranks only: 2 ranks keep the library's own choice.
    let op = cases[0].op;
    assert_eq!(
        sent_on(2, flavour, &exe, &dir, op, &using),
        sent_on(2, flavour, &exe, &dir, op, &[]),
        "{name} {op}: the 4-rank decisions reached a 2-rank job\n{text}"
    );
}

#[test]
fn openmpi_runs_the_exported_algorithms() {
    exported_rules_change_the_choice(OpenMpi);
}

#[test]
fn mpich_runs_the_exported_algorithms() {
    exported_rules_change_the_choice(Mpich);
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = scratch("export_bad_input");
    let output = dir.join("out");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();

    let stderr = refused(&export("lam", &empty, &output), 2);
    assert!(stderr.contains("invalid value 'lam'"), "{stderr}");

    let stderr = refused(&export("openmpi", &empty, &output), 1);
    assert!(stderr.contains("has no entries"), "{stderr}");

    let other = dir.join("other");
    commtune_history::write(
        &other,
        "job.jsonl",
        &[entry("MPICH Version: 4.0.2", "allreduce", 8, "native")],
    )
    .unwrap();
    let stderr = refused(&export("openmpi", &other, &output), 1);
    assert!(stderr.contains("nothing to export"), "{stderr}");
    assert!(!output.exists(), "no file for nothing");

    // Only decisions of another timing: nothing by default, all of them when asked for.
    let timed = dir.join("timed");
    let mut decision = entry("Open MPI v4.1.4", "allreduce", 8, "native");
    decision.timing = Some(OTHER_TIMING.into());
    commtune_history::write(&timed, "job.jsonl", &[decision]).unwrap();
    let stderr = refused(&export("openmpi", &timed, &output), 1);
    assert!(
        stderr.contains(&format!(
            "left out 1 entry of other timings ({OTHER_TIMING} 1); --timing chooses another"
        )),
        "{stderr}"
    );
    assert!(!output.exists(), "no file for nothing");
    let stdout = exported(&export_with(
        "openmpi",
        &timed,
        &output,
        &["--timing", OTHER_TIMING],
    ));
    assert!(
        stdout.contains(&format!(
            "from 1 entries of {}: Open MPI v4.1.4 on {PLATFORM}, timed {OTHER_TIMING}; no \
             entries of other timings",
            timed.display()
        )),
        "{stdout}"
    );
    let stderr = refused(
        &export_with("openmpi", &timed, &output, &["--timing", "wall"]),
        2,
    );
    assert!(stderr.contains("--timing"), "{stderr}");

    // Decisions of two platforms: a rules file is for one, and export will not guess which.
    let platforms = dir.join("platforms");
    let shm = entry("Open MPI v4.1.4", "allreduce", 8, "native");
    let on_rig = Entry {
        platform: rig(),
        ..shm.clone()
    };
    commtune_history::write(&platforms, "job.jsonl", &[shm, on_rig.clone(), on_rig]).unwrap();
    let _ = std::fs::remove_file(&output);
    let stderr = refused(&export("openmpi", &platforms, &output), 2);
    for listed in [
        format!("\n  Open MPI v4.1.4 on {PLATFORM}: 1 entry"),
        format!("\n  Open MPI v4.1.4 on {}: 2 entries", rig()),
    ] {
        assert!(stderr.contains(&listed), "{stderr}");
    }
    assert!(stderr.contains("choose it with --platform"), "{stderr}");
    assert!(!output.exists(), "no file for an unchosen platform");
    let stdout = exported(&export_with(
        "openmpi",
        &platforms,
        &output,
        &["--platform", "rig"],
    ));
    assert!(
        stdout.contains(&format!(
            "from 2 entries of {}: Open MPI v4.1.4 on {}, timed",
            platforms.display(),
            rig()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "left out 1 entry of other MPI versions or platforms (Open MPI v4.1.4 on {PLATFORM} 1)"
        )),
        "{stdout}"
    );
}
