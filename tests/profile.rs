//! Profiling of programs whose calls are known: sites, ops, calls, bytes and source lines in the
//! JSON report, under both MPIs, for C, Fortran (mpif.h and mpi_f08), Python and threads.

mod common;

use common::{
    Flavour, Mpich, OpenMpi, compile, compile_with, marker_line, run, scratch, site_at_line, sites,
};
use serde_json::Value;

/// (marker, op, calls per rank, bytes per rank as a function of the number of ranks)
type Expected = (&'static str, &'static str, u64, fn(u64) -> u64);

const KNOWN_CALLS_C: &[Expected] = &[
    ("SITE:allreduce_vec", "allreduce", 10, |_| 10 * 4 * 8),
    ("SITE:allreduce_inplace", "allreduce", 5, |_| 5 * 4),
    ("SITE:alltoall", "alltoall", 3, |p| 3 * 2 * 4 * p),
    // rank i contributes i+1 ints: p(p+1)/2 ints gathered per call
    ("SITE:allgatherv", "allgatherv", 7, |p| {
        7 * 4 * p * (p + 1) / 2
    }),
    ("SITE:halo_waitall", "halo", 6, |_| 6 * 2 * 8 * 8),
    ("SITE:halo_wait", "halo", 4, |_| 4 * 2 * 8 * 8),
];

const KNOWN_CALLS_FORTRAN: &[Expected] = &[
    ("SITE:allreduce", "allreduce", 3, |_| 3 * 3 * 8),
    ("SITE:allreduce_inplace", "allreduce", 2, |_| 2 * 4),
    ("SITE:alltoall", "alltoall", 2, |p| 2 * 4 * p),
    ("SITE:halo_waitall", "halo", 2, |_| 2 * 2 * 5 * 8),
    ("SITE:halo_testall", "halo", 2, |_| 2 * 2 * 5 * 8),
    ("SITE:halo_waitany", "halo", 2, |_| 2 * 2 * 5 * 8),
];

fn check_report(report: &Value, source: &str, np: u64, expected: &[Expected]) {
    assert_eq!(report["version"], commtune_report::VERSION);
    assert_eq!(report["nprocs"], np);
    assert_eq!(report["ranks_reporting"], np);
    let ranks = report["ranks"].as_array().expect("ranks");
    let host = hostname();
    for (i, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["rank"], i as u64);
        assert_eq!(rank["host"], host.as_str());
        assert!(rank["run_s"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(ranks.len() as u64, np);
    assert_eq!(
        sites(report).len(),
        expected.len(),
        "one site per marked call:\n{}",
        serde_json::to_string_pretty(report).unwrap()
    );
    for &(marker, op, calls, bytes) in expected {
        let line = marker_line(source, marker);
        let site = site_at_line(report, line);
        assert_eq!(site["op"], op, "{marker}");
        assert_eq!(site["calls"], calls, "{marker}");
        assert_eq!(site["ranks"]["calls"]["min"], calls, "{marker}: every rank");
        assert_eq!(site["ranks"]["count"], np, "{marker}: seen on every rank");
        assert_eq!(site["bytes"], bytes(np), "{marker}");
        assert_eq!(site["codelet"], "native");
        let file = site["file"].as_str().unwrap_or_default();
        assert!(file.ends_with(source), "{marker}: file {file}");
        let location = site["location"].as_str().unwrap();
        assert!(
            location.starts_with(&format!("{source}:{line} (")),
            "{marker}: location {location}"
        );
        let time = &site["time"];
        for q in ["min_us", "p50_us", "p90_us", "p99_us", "max_us"] {
            assert!(time[q].as_f64().unwrap() > 0.0, "{marker}: {q}");
        }
        assert!(time["min_us"].as_f64() <= time["p50_us"].as_f64());
        assert!(time["p50_us"].as_f64() <= time["p99_us"].as_f64());
        assert!(time["p99_us"].as_f64() <= time["max_us"].as_f64());
        let share = time["share"].as_f64().unwrap();
        assert!(share > 0.0 && share < 1.0, "{marker}: share {share}");
        // Every rank made every call: a time for each, within the spread.
        let by_rank = site["ranks"]["time_by_rank_s"].as_array().expect("by rank");
        assert_eq!(by_rank.len() as u64, np, "{marker}");
        let (min, max) = (
            site["ranks"]["time_s"]["min"].as_f64().unwrap(),
            site["ranks"]["time_s"]["max"].as_f64().unwrap(),
        );
        for t in by_rank {
            let t = t.as_f64().expect("a time");
            assert!(t >= min && t <= max, "{marker}: {t} outside {min}..{max}");
        }
        if op == "halo" {
            assert_eq!(site["rank_signatures"].as_array().unwrap().len() as u64, np);
        }
    }
}

fn hostname() -> String {
    let out = std::process::Command::new("hostname")
        .output()
        .expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `flags` may select the MPI-4 large-count entry points (`-DLARGE_COUNT`): the same report.
fn known_calls_c(flavour: Flavour, np: u64, flags: &[&str]) {
    let variant = flags.concat();
    let dir = scratch(&format!("known_calls_c{variant}_{}", flavour.name()));
    let exe = compile_with(flavour, "known_calls.c", &dir, flags, &variant);
    let job = run(flavour, np as usize, &exe, &dir).go();
    job.assert_success();
    assert!(job.stdout().contains("known_calls: results correct"));
    check_report(&job.report(), "known_calls.c", np, KNOWN_CALLS_C);
    // The text summary names the top site.
    assert!(job.stderr().contains("commtune: report written to"));
    assert!(job.stderr().contains("known_calls.c:"));
}

#[test]
fn c_program_openmpi_4_ranks() {
    known_calls_c(OpenMpi, 4, &[]);
}

#[test]
fn c_program_mpich_2_ranks() {
    known_calls_c(Mpich, 2, &[]);
}

/// MPICH 4 has the MPI_Count entry points (Open MPI 4.1 has not); mpi4py on MPICH uses them.
#[test]
fn c_program_large_count_entry_points_mpich_2_ranks() {
    known_calls_c(Mpich, 2, &["-DLARGE_COUNT"]);
    // The codelets read MPI_Count counts and MPI_Aint displacements too.
    let dir = scratch("known_calls_c-DLARGE_COUNT_forced_mpich");
    let exe = compile_with(
        Mpich,
        "known_calls.c",
        &dir,
        &["-DLARGE_COUNT"],
        "-DLARGE_COUNT",
    );
    let force = "allreduce=recursive_doubling,alltoall=pairwise,allgatherv=ring";
    let job = run(Mpich, 2, &exe, &dir).env("COMMTUNE_FORCE", force).go();
    job.assert_success();
    assert!(job.stdout().contains("known_calls: results correct"));
    let report = job.report();
    for (marker, codelet) in [
        ("SITE:allreduce_vec", "recursive_doubling"),
        ("SITE:alltoall", "pairwise"),
        ("SITE:allgatherv", "ring"),
    ] {
        let site = site_at_line(&report, marker_line("known_calls.c", marker));
        assert_eq!(site["codelet"], codelet, "{marker}");
    }
}

/// The Fortran program through one of the three Fortran interfaces: one source, `interface`
/// selects mpif.h (""), the mpi module ("USE_MPI") or the mpi_f08 module ("F08").
fn known_calls_fortran(flavour: Flavour, interface: &str) {
    let source = "known_calls.F90";
    let variant = format!(
        "-{}",
        if interface.is_empty() {
            "mpif"
        } else {
            interface
        }
    );
    let dir = scratch(&format!("known_calls{variant}_{}", flavour.name()));
    let define = format!("-D{interface}");
    let flags: &[&str] = if interface.is_empty() {
        &[]
    } else {
        &[&define]
    };
    let exe = compile_with(flavour, source, &dir, flags, &variant);
    let job = run(flavour, 2, &exe, &dir).go();
    job.assert_success();
    assert!(job.stdout().contains("results correct"), "{}", job.stdout());
    check_report(&job.report(), source, 2, KNOWN_CALLS_FORTRAN);
    // Persistent requests travel through the Fortran handle conversions and come back as
    // MPI_REQUEST_NULL (the second exchange of each loop reuses the first one's messages).
    // irecv_first has nothing to change (the program posts its receives first): its episodes
    // count as native, and the report says so.
    for codelet in ["persistent", "irecv_first"] {
        let job = run(flavour, 2, &exe, &dir)
            .env("COMMTUNE_FORCE", &format!("halo={codelet}"))
            .go();
        job.assert_success();
        assert!(job.stdout().contains("results correct"), "{}", job.stdout());
        let report = job.report();
        for marker in [
            "SITE:halo_waitall",
            "SITE:halo_testall",
            "SITE:halo_waitany",
        ] {
            let site = site_at_line(&report, marker_line(source, marker));
            if codelet == "irecv_first" {
                assert_eq!(site["codelets"]["native"], 4, "{marker}: {site:#}");
                assert!(
                    site["notes"].to_string().contains(
                        "halo codelet irecv_first changed nothing in 2 episodes (all ranks), \
                         which count as native"
                    ),
                    "{marker}: {site:#}"
                );
            } else {
                assert_eq!(
                    site["codelets"][codelet], 2,
                    "{marker}: the second episode of each rank: {site:#}"
                );
            }
        }
    }
}

#[test]
fn fortran_mpif_h_openmpi() {
    known_calls_fortran(OpenMpi, "");
}

#[test]
fn fortran_use_mpi_openmpi() {
    known_calls_fortran(OpenMpi, "USE_MPI");
}

#[test]
fn fortran_mpi_f08_openmpi() {
    known_calls_fortran(OpenMpi, "F08");
}

#[test]
fn fortran_mpif_h_mpich() {
    known_calls_fortran(Mpich, "");
}

#[test]
fn fortran_use_mpi_mpich() {
    known_calls_fortran(Mpich, "USE_MPI");
}

#[test]
fn fortran_mpi_f08_mpich() {
    known_calls_fortran(Mpich, "F08");
}

/// A program that exits without MPI_Finalize still gets its report, from the at-exit fallback
/// (rank 0's own data): as a singleton started without a launcher, and under the launcher,
/// which ends the job when the first rank exits (MPICH's Hydra killed rank 0 while it wrote,
/// in half the runs: the other ranks now wait for rank 0's report). Several runs, since
/// that was a race.
fn report_without_finalize(flavour: Flavour) {
    let dir = scratch(&format!("no_finalize_{}", flavour.name()));
    let exe = compile(flavour, "no_finalize.c", &dir);
    let report = dir.join("report.json");
    let mut cmd = std::process::Command::new(&exe);
    cmd.env("LD_PRELOAD", flavour.library())
        .env("COMMTUNE_REPORT", &report)
        .current_dir(&dir);
    let out = common::run_with_timeout(cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no_finalize: sum 1"));
    let check = |path: &std::path::Path, stderr: &str| {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("no report at {}: {e}\n{stderr}", path.display()));
        let report: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(report["ranks_reporting"], 1);
        let site = site_at_line(&report, marker_line("no_finalize.c", "SITE:allreduce"));
        assert_eq!(site["calls"], 3);
    };
    check(&report, "");
    for _ in 0..4 {
        let job = run(flavour, 2, &exe, &dir).go();
        assert!(
            job.stdout().contains("no_finalize: sum 2"),
            "{}",
            job.stdout()
        );
        check(&job.report_path, &job.stderr());
    }
}

#[test]
fn report_without_finalize_openmpi() {
    report_without_finalize(OpenMpi);
}

#[test]
fn report_without_finalize_mpich() {
    report_without_finalize(Mpich);
}

/// `commtune run` end to end: it picks the flavour's library and the ranks are profiled.
#[test]
fn commtune_run_profiles_both_mpis() {
    for (flavour, launcher) in [(OpenMpi, "mpirun.openmpi"), (Mpich, "mpiexec.mpich")] {
        let dir = scratch(&format!("cli_run_{}", flavour.name()));
        let exe = compile(flavour, "known_calls.c", &dir);
        let mut cmd = std::process::Command::new(common::cli());
        cmd.args([
            "run", "--mode", "profile", "--report", "cli.json", "--", launcher, "-np", "2",
        ])
        .arg(&exe)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("COMMTUNE_LIB_OPENMPI", OpenMpi.library())
        .env("COMMTUNE_LIB_MPICH", Mpich.library())
        .current_dir(&dir);
        let out = common::run_with_timeout(cmd);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(dir.join("cli.json")).expect("report written");
        let report: Value = serde_json::from_str(&text).unwrap();
        check_report(&report, "known_calls.c", 2, KNOWN_CALLS_C);
    }
}
