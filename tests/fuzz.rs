//! The randomized tests for a bounded time per MPI under tuning: the differential test of the
//! collectives (tests/programs/fuzz_collectives.c: every intercepted call against its PMPI
//! reference, guard zones, cross-rank agreement, handles freed and made again) and the halo
//! exchanges' test (tests/programs/fuzz_halo.c: episodes posted and completed every way the
//! standard allows, every received element, gap, guard zone and status checked). `scripts/fuzz`
//! runs both for long, over many seeds and settings.

mod common;

use common::{Flavour, Mpich, OpenMpi, compile, run, scratch};
use serde_json::Value;

/// Seconds per run: long enough for searches to run on the repeating templates.
const SECONDS: &str = "12";

/// The quiet halo run's calls at least, however long they take: where its ranks agree on
/// `neighbor` (a quiet machine makes about 70000 calls in `SECONDS`; the first agreement came
/// after about 27000, and none in 13000).
const QUIET_CALLS: &str = "50000";

/// Runs `program` (fuzz_PROGRAM.c) under tuning, and checks its verdict and that
/// codelets other than native ran at sites of `op` (every site when None): the tuner searched.
/// Returns the report.
fn fuzz(flavour: Flavour, np: usize, program: &str, seed: &str, op: Option<&str>) -> Value {
    fuzz_with(flavour, np, program, seed, op, &[], &[])
}

/// `fuzz` with more arguments, `args`, and knobs, `env`.
fn fuzz_with(
    flavour: Flavour,
    np: usize,
    program: &str,
    seed: &str,
    op: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Value {
    let dir = scratch(&format!("fuzz_{program}_{}_{seed}", flavour.name()));
    let exe = compile(flavour, &format!("fuzz_{program}.c"), &dir);
    let mut job = run(flavour, np, &exe, &dir)
        .args(&["--seconds", SECONDS, "--seed", seed])
        .args(args)
        .env("COMMTUNE_MODE", "tune");
    for (name, value) in env {
        job = job.env(name, value);
    }
    let job = job.go();
    job.assert_fuzz_passed();
    let report = job.report();
    let tried = common::sites(&report).iter().any(|s| {
        op.is_none_or(|op| s["op"] == op)
            && s["codelets"]
                .as_object()
                .is_some_and(|c| c.keys().any(|k| k != "native"))
    });
    assert!(tried, "no codelet but native ran ({op:?} sites)");
    report
}

#[test]
fn fuzz_collectives_openmpi() {
    fuzz(OpenMpi, 3, "collectives", "1601", None);
}

#[test]
fn fuzz_collectives_mpich() {
    fuzz(Mpich, 2, "collectives", "1602", None);
}

/// Seed 3 makes a noisy run (each rank varies its episodes now and then); seed 5 a quiet one
/// (episodes repeat alike on every rank, as a stencil's), where the ranks also agree on
/// `neighbor` for some episodes (COMMTUNE_HALO_NEIGHBOR=on: a rank that varies an agreed episode
/// would hang its peers, so not in noisy runs).
fn fuzz_halo(flavour: Flavour, np_quiet: usize, np_noisy: usize) {
    fuzz(flavour, np_noisy, "halo", "3", Some("halo"));
    let report = fuzz_with(
        flavour,
        np_quiet,
        "halo",
        "5",
        Some("halo"),
        &["--min-calls", QUIET_CALLS],
        &[("COMMTUNE_HALO_NEIGHBOR", "on")],
    );
    assert!(
        report
            .to_string()
            .contains("ranks agreed at collective call"),
        "the ranks agreed on neighbor for no episode: {:#?}",
        common::sites(&report)
    );
}

#[test]
fn fuzz_halo_openmpi() {
    fuzz_halo(OpenMpi, 3, 4);
}

#[test]
fn fuzz_halo_mpich() {
    fuzz_halo(Mpich, 2, 2);
}
