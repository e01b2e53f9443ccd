//! The randomized differential test (tests/programs/fuzz_collectives.c) for a bounded time per
//! MPI under default tuning: every intercepted call against its PMPI reference, guard zones,
//! cross-rank agreement, handles freed and made again. `scripts/fuzz-collectives` runs it for
//! long, over many seeds and settings.

mod common;

use common::{Flavour, Mpich, OpenMpi, compile, run, scratch};

/// Seconds per flavour: long enough for searches to run on the repeating templates.
const SECONDS: &str = "12";

fn fuzz(flavour: Flavour, np: usize, seed: &str) {
    let dir = scratch(&format!("fuzz_{}", flavour.name()));
    let exe = compile(flavour, "fuzz_collectives.c", &dir);
    let job = run(flavour, np, &exe, &dir)
        .args(&["--seconds", SECONDS, "--seed", seed])
        .env("COMMTUNE_MODE", "tune")
        .go();
    let verdict = job
        .stdout()
        .lines()
        .find_map(|l| {
            l.strip_prefix("fuzz: ")
                .filter(|l| l.contains(" calls, "))
                .map(String::from)
        })
        .unwrap_or_else(|| panic!("no verdict\n{}\n{}", job.stdout(), job.stderr()));
    job.assert_success();
    let calls: u64 = verdict.split(' ').next().unwrap().parse().unwrap();
    assert!(verdict.contains(" 0 failures"), "{}", job.stdout());
    assert!(calls >= 1000, "too few calls to mean anything: {verdict}");
    // Codelets other than native ran: the tuner searched some of the repeating calls.
    let report = job.report();
    let tried = common::sites(&report).iter().any(|s| {
        s["codelets"]
            .as_object()
            .is_some_and(|c| c.keys().any(|k| k != "native"))
    });
    assert!(tried, "no codelet but native ran");
}

#[test]
fn fuzz_collectives_openmpi() {
    fuzz(OpenMpi, 3, "1601");
}

#[test]
fn fuzz_collectives_mpich() {
    fuzz(Mpich, 2, "1602");
}
