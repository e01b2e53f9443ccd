//! Bad input never breaks the application: unknown knobs and bad values are reported once and
//! the defaults used, an unwritable report path loses only the file, MODE=off is a pass-through,
//! and a library of the other MPI flavour refuses clearly instead of crashing.

mod common;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Flavour, Mpich, OpenMpi, compile, run, scratch};

const PROGRAM: &str = "known_calls.c";
const CORRECT: &str = "known_calls: results correct";

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn unknown_knob_and_bad_values_are_named_once_and_defaults_used() {
    let dir = scratch("bad_knobs");
    let exe = compile(OpenMpi, PROGRAM, &dir);
    let job = run(OpenMpi, 4, &exe, &dir)
        .env("COMMTUNE_MODEE", "off")
        .env("COMMTUNE_MODE", "fast")
        .env("COMMTUNE_VERBOSE", "9")
        .go();
    job.assert_success();
    assert!(job.stdout().contains(CORRECT));
    let err = job.stderr();
    assert_eq!(count(&err, "unknown knob COMMTUNE_MODEE"), 1, "{err}");
    assert_eq!(
        count(
            &err,
            "COMMTUNE_MODE=\"fast\" is not valid (accepted: off, profile, tune)"
        ),
        1,
        "{err}"
    );
    assert_eq!(
        count(
            &err,
            "COMMTUNE_VERBOSE=\"9\" is not valid (accepted: 0, 1, 2)"
        ),
        1,
        "{err}"
    );
    // The default mode (tune) still ran and produced the report.
    assert_eq!(job.report()["nprocs"], 4);
}

/// A knob value that is not UTF-8 gets the same one line as any other bad value (a singleton
/// run: launchers pass such values on unreliably).
#[test]
fn knob_value_not_utf8_is_named_once() {
    use std::os::unix::ffi::OsStrExt;
    for flavour in [OpenMpi, Mpich] {
        let dir = scratch(&format!("not_utf8_{}", flavour.name()));
        let exe = compile(flavour, PROGRAM, &dir);
        let mut cmd = std::process::Command::new(&exe);
        cmd.env("LD_PRELOAD", flavour.library())
            .env("COMMTUNE_MODE", std::ffi::OsStr::from_bytes(b"pro\xfffile"))
            .env("COMMTUNE_REPORT", dir.join("report.json"))
            .current_dir(&dir);
        let out = common::run_with_timeout(cmd);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains(CORRECT));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            count(
                &err,
                "commtune: COMMTUNE_MODE=\"pro\u{fffd}file\" is not valid (accepted: off, profile, \
                 tune); using the default tune"
            ),
            1,
            "{err}"
        );
        assert!(dir.join("report.json").exists(), "the default mode ran");
    }
}

#[test]
fn unwritable_report_path_keeps_the_application_going() {
    for flavour in [OpenMpi, Mpich] {
        let dir = scratch(&format!("unwritable_{}", flavour.name()));
        let exe = compile(flavour, PROGRAM, &dir);
        let path = "/nonexistent-commtune-dir/report.json";
        let job = run(flavour, 2, &exe, &dir)
            .env("COMMTUNE_REPORT", path)
            .go();
        job.assert_success();
        assert!(job.stdout().contains(CORRECT));
        assert_eq!(
            count(&job.stderr(), &format!("cannot write the report to {path}")),
            1
        );
    }
}

#[test]
fn report_none_writes_no_file() {
    let dir = scratch("report_none");
    let exe = compile(OpenMpi, PROGRAM, &dir);
    let job = run(OpenMpi, 2, &exe, &dir)
        .env("COMMTUNE_REPORT", "none")
        .go();
    job.assert_success();
    assert!(
        job.stderr().contains("known_calls.c:"),
        "the summary is still printed"
    );
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(
        files
            .iter()
            .all(|f| !f.file_name().to_string_lossy().ends_with(".json")),
        "no JSON file"
    );
}

/// What one rank, started alone (no launcher, whose forwarding would join the pieces), wrote to
/// a stderr that keeps write boundaries: a datagram socket, one datagram per write(2).
fn writes_to_stderr(flavour: Flavour, dir: &std::path::Path, env: &[(&str, &str)]) -> Vec<String> {
    let exe = compile(flavour, PROGRAM, dir);
    let (ours, theirs) = UnixDatagram::pair().expect("socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    let mut cmd = Command::new(&exe);
    cmd.env("LD_PRELOAD", flavour.library())
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::from(OwnedFd::from(theirs)));
    let mut writes = Vec::new();
    let mut buf = vec![0u8; 1 << 17];
    let mut drain = |writes: &mut Vec<String>| {
        while let Ok(n) = ours.recv(&mut buf) {
            writes.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    };
    let status = common::alone(|| {
        let mut child = cmd.spawn().expect("start the program");
        let start = Instant::now();
        loop {
            // Read while it runs: a full socket buffer would block its writes.
            drain(&mut writes);
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{} did not finish", exe.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    drain(&mut writes);
    assert!(status.success(), "{status}: {writes:?}");
    writes
}

/// Every line the library prints is one write(2) with its newline (the unknown-knob warning was
/// once written as the line, then the newline: another rank's output could land between).
#[test]
fn every_line_is_one_write() {
    for flavour in [OpenMpi, Mpich] {
        let dir = scratch(&format!("one_write_{}", flavour.name()));
        let report = dir.join("report.json");
        let writes = writes_to_stderr(
            flavour,
            &dir,
            &[
                ("COMMTUNE_MODEE", "off"),
                ("COMMTUNE_VERBOSE", "2"),
                ("COMMTUNE_REPORT", report.to_str().unwrap()),
            ],
        );
        let ours: Vec<&String> = writes.iter().filter(|w| w.contains("commtune")).collect();
        for expected in [
            "unknown knob COMMTUNE_MODEE",
            "report written to",
            "% of the",
        ] {
            assert!(
                ours.iter().any(|w| w.contains(expected)),
                "{flavour:?}: no message with {expected:?}: {writes:?}"
            );
        }
        for write in &writes {
            assert!(
                !write.contains("commtune") || (write.ends_with('\n') && write.len() > 1),
                "{flavour:?}: a message in pieces: {write:?}\nall writes: {writes:?}"
            );
            assert_ne!(write, "\n", "{flavour:?}: a lone newline: {writes:?}");
        }
    }
}

fn mode_off(flavour: Flavour) {
    let dir = scratch(&format!("mode_off_{}", flavour.name()));
    let exe = compile(flavour, PROGRAM, &dir);
    let job = run(flavour, 2, &exe, &dir).env("COMMTUNE_MODE", "off").go();
    job.assert_success();
    assert!(job.stdout().contains(CORRECT));
    assert!(
        !job.stderr().contains("commtune"),
        "silent: {}",
        job.stderr()
    );
    assert!(!job.report_path.exists(), "no report with MODE=off");
}

#[test]
fn mode_off_is_a_pass_through_openmpi() {
    mode_off(OpenMpi);
}

#[test]
fn mode_off_is_a_pass_through_mpich() {
    mode_off(Mpich);
}

#[test]
fn library_of_the_other_mpi_refuses_clearly() {
    let dir = scratch("wrong_flavour");
    let exe = compile(Mpich, PROGRAM, &dir);
    let mut cmd = std::process::Command::new(&exe);
    cmd.env("LD_PRELOAD", OpenMpi.library()).current_dir(&dir);
    let out = common::run_with_timeout(cmd);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("built for Open MPI but the program uses MPICH"),
        "{err}"
    );
}

/// Intercommunicators: per-rank arrays sized by the remote group, never tuned, correct results.
#[test]
fn intercommunicator_collectives_stay_native_and_correct() {
    for (flavour, np) in [(OpenMpi, 4), (Mpich, 3)] {
        for mode in ["profile", "tune"] {
            let dir = scratch(&format!("intercomm_{mode}_{}", flavour.name()));
            let exe = compile(flavour, "intercomm.c", &dir);
            let job = run(flavour, np, &exe, &dir).env("COMMTUNE_MODE", mode).go();
            job.assert_success();
            assert!(
                job.stdout().contains("intercomm: results correct"),
                "{mode}"
            );
            let report = job.report();
            for site in report["sites"].as_array().unwrap() {
                let codelets = site["codelets"].as_object().unwrap();
                assert_eq!(codelets.keys().collect::<Vec<_>>(), ["native"], "{site:#}");
            }
        }
    }
}

/// A site whose signature changes on every call keeps 1024 signatures apart and folds the rest
/// into one untuned key: bounded memory, every call counted, correct results.
#[test]
fn many_signatures_at_one_site_are_folded() {
    for mode in ["profile", "tune"] {
        let dir = scratch(&format!("many_signatures_{mode}"));
        let exe = compile(OpenMpi, "many_signatures.c", &dir);
        let job = run(OpenMpi, 2, &exe, &dir).env("COMMTUNE_MODE", mode).go();
        job.assert_success();
        assert!(job.stdout().contains("many_signatures: results correct"));
        let report = job.report();
        let sites = report["sites"].as_array().unwrap();
        let line = common::marker_line("many_signatures.c", "SITE:changing");
        let at_line: Vec<_> = sites
            .iter()
            .filter(|s| s["line"].as_u64() == Some(line))
            .collect();
        assert_eq!(at_line.len(), 1025, "{mode}");
        let calls: u64 = at_line.iter().map(|s| s["calls"].as_u64().unwrap()).sum();
        assert_eq!(calls, 1100, "{mode}: every call counted");
        let other = at_line
            .iter()
            .find(|s| {
                s["signature"]
                    .as_str()
                    .unwrap()
                    .starts_with("signatures beyond")
            })
            .expect("the folded key");
        assert_eq!(other["calls"], 1100 - 1024);
        // Reported together, tuned apart: no single tuning to show.
        assert!(other.get("tuning").is_none(), "{other:#}");
        assert!(
            other["notes"][0]
                .as_str()
                .unwrap()
                .contains("each call is still tuned")
        );
    }
}
