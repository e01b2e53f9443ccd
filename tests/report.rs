//! The report tells the truth: shares and totals never exceed the run and say what is
//! estimated, savings are measured in the run with their uncertainty, forced codelets that did
//! not run say why, notes match the knobs in force, MPI_Abort leaves a partial report, and a
//! call left untuned says why and what changes it. Real jobs under both MPIs.

mod common;

use common::{
    Flavour, Job, Mpich, OpenMpi, compile, compile_with, marker_line, run, scratch, site_at_line,
    sites,
};
use serde_json::Value;

const SOURCE: &str = "report_cases.c";
const CORRECT: &str = "report_cases: results correct";

fn cases(flavour: Flavour, name: &str, args: &[&str], env: &[(&str, &str)]) -> Job {
    let dir = scratch(&format!("report_{name}_{}", flavour.name()));
    let exe = compile(flavour, SOURCE, &dir);
    let mut job = run(flavour, 2, &exe, &dir).args(args);
    for (k, v) in env {
        job = job.env(k, v);
    }
    job.go()
}

fn succeeded(job: Job) -> Job {
    job.assert_success();
    assert!(job.stdout().contains(CORRECT), "{}", job.stdout());
    job
}

fn allreduce_site(report: &Value) -> &Value {
    site_at_line(report, marker_line(SOURCE, "SITE:allreduce"))
}

/// Tuned production times one call in eight. The rank that waits for a late rank spends nearly
/// the whole run inside the call, so any time extrapolated beyond what was measured shows as
/// more time in the call than the run had: the library once scaled the search's calls, slow
/// here (the late rank sleeps through warm-up and search), up with the untimed production calls.
fn shares_and_totals_stay_within_the_run(flavour: Flavour) {
    let job = succeeded(cases(
        flavour,
        "imbalance",
        &["imbalance", "25", "20000"],
        // The search starts when warm: under a loaded machine's slow reductions the
        // do-no-harm rule may rightly find it not worth it on some rank.
        &[
            ("COMMTUNE_MODE", "tune"),
            ("COMMTUNE_SAMPLES", "3"),
            ("COMMTUNE_BUDGET", "1"),
        ],
    ));
    let report = job.report();
    let run_time = report["run_time_s"].as_f64().unwrap();
    for site in sites(&report) {
        let time = &site["time"];
        let total = time["total_s"].as_f64().unwrap();
        assert!(
            total <= run_time,
            "{flavour:?}: {total} s of {run_time} s: {site:#}"
        );
        assert!(site["ranks"]["time_s"]["max"].as_f64().unwrap() <= run_time);
        assert!(time["share"].as_f64().unwrap() <= 1.0, "{site:#}");
    }
    let share_in_calls = report["share_in_calls"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share_in_calls), "{report:#}");
    let site = allreduce_site(&report);
    let time = &site["time"];
    assert_eq!(site["tuning"]["phase"], "production", "{site:#}");
    let (estimated, error) = (time["estimated_s"].as_f64(), time["error_s"].as_f64());
    assert!(estimated > Some(0.0) && error > Some(0.0), "{site:#}");
    assert!(time["total_s"].as_f64() > estimated);
    assert!(time["timed_calls"].as_u64() < Some(2 * site["calls"].as_u64().unwrap()));
    let err = job.stderr();
    assert!(err.contains("partly estimated"), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("report_cases.c:"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.trim_start().starts_with('~'), "{line}");

    // No calls at all: no "-0.0%".
    let job = succeeded(cases(flavour, "no_calls", &["imbalance", "0", "0"], &[]));
    let err = job.stderr();
    assert!(
        err.contains("0 sites, 0.0% of the time in intercepted calls"),
        "{err}"
    );
    assert!(!err.contains("-0.0"), "{err}");
}

#[test]
fn shares_and_totals_stay_within_the_run_openmpi() {
    shares_and_totals_stay_within_the_run(OpenMpi);
}

#[test]
fn shares_and_totals_stay_within_the_run_mpich() {
    shares_and_totals_stay_within_the_run(Mpich);
}

/// Allreduce codelets other than ring, which the tuner may not try.
const ALL_BUT_RING: &str = "allreduce=linear,allreduce=nonoverlapping,\
    allreduce=recursive_doubling,allreduce=rabenseifner,allreduce=binomial";

/// A 20 ms delay in native makes ring (5 ms) the winner. Left alone, ring then saves time;
/// delayed by 60 ms from the 50th call on (after the decision and its self-check; no drift
/// check reopens the search), ring costs time, which the library once reported as time saved
/// (from the search's estimates). A busy machine can deschedule a rank for most of a second,
/// which may widen the interval to "no measurable saving" (a true statement), or make ring miss
/// its prediction in the self-check (then its cost goes unclaimed, rightly: native's search
/// calls ran without the time slices its production calls would have lost): the test checks
/// what the delays guarantee.
fn savings_are_measured(flavour: Flavour) {
    let tuned_after = |name: &str, delays: &str, warmup: &str| {
        let job = succeeded(cases(
            flavour,
            name,
            &["imbalance", "0", "100"],
            &[
                ("COMMTUNE_MODE", "tune"),
                // The search starts when warm, before ring's delay (no do-no-harm wait), and
                // too early for native's production calls to stand for it (below 8 of them).
                ("COMMTUNE_BUDGET", "1"),
                ("COMMTUNE_WARMUP", warmup),
                ("COMMTUNE_SEARCH", "brute"),
                ("COMMTUNE_SAMPLES", "8"),
                ("COMMTUNE_EXCLUDE", ALL_BUT_RING),
                ("COMMTUNE_DRIFT_INTERVAL", "1000000000"),
                ("COMMTUNE_INJECT_DELAY", delays),
            ],
        ));
        let report = job.report();
        let tuning = allreduce_site(&report)["tuning"].clone();
        assert_eq!(tuning["winner"], "ring", "{tuning:#}");
        assert!(tuning.get("saved_s").is_none(), "{tuning:#}");
        (tuning, job.stderr())
    };
    let tuned = |name: &str, delays: &str| tuned_after(name, delays, "3");
    let figure = |saving: &Value, name: &str| {
        saving[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: {saving:#}"))
    };
    // Ring's time slices in production beyond its samples do not undo a saving this wide.
    let (tuning, _) = tuned("saving", "allreduce:native=20ms,allreduce:ring=5ms");
    let saving = &tuning["saving"];
    assert_eq!(saving["replaced"], "native", "{saving:#}");
    assert_eq!(saving["replaced_in"], "search", "{saving:#}");
    // Every native call of the search slept 20 ms.
    assert!(figure(saving, "replaced_us") >= 20_000.0, "{saving:#}");
    let (low, saved, high) = (
        figure(saving, "low_s"),
        figure(saving, "saved_s"),
        figure(saving, "high_s"),
    );
    assert!(low <= saved && saved <= high, "{saving:#}");

    // Native's production calls before a later search (calls 1 to 19 of the 21 before it)
    // slept 60 ms, its search calls 20 (from call 22: the checkpoint at call 17 is acted on
    // four calls later): the saving is measured against what the application felt.
    let (tuning, _) = tuned_after(
        "production",
        "allreduce:native=20ms@20,allreduce:native=60ms,allreduce:ring=5ms",
        "12",
    );
    let saving = &tuning["saving"];
    assert_eq!(saving["replaced_in"], "production", "{tuning:#}");
    assert!(figure(saving, "replaced_us") >= 50_000.0, "{tuning:#}");
    assert!(figure(saving, "low_s") > 0.0, "{tuning:#}");

    // Ring takes four times its estimate from the self-check on (its search is calls 9 to 24:
    // the checkpoint at call 5 is acted on four calls later), still below native's 40 ms
    // estimate: the decision is kept without a trial, and its saving against native's search
    // calls (below 8 in production before them), understated, is still claimed. (A loaded
    // machine adds about the same to every call: ring's 5 ms samples took 24 ms once, and twice
    // its estimate was not enough to miss it.)
    let (tuning, _) = tuned(
        "miss",
        "allreduce:native=40ms,allreduce:ring=20ms@25,allreduce:ring=5ms",
    );
    let check = &tuning["check"];
    assert_eq!(check["verdict"], "kept", "{tuning:#}");
    assert!(
        figure(check, "realised_us") > 1.25 * figure(check, "predicted_us"),
        "ring missed: {tuning:#}"
    );
    assert_eq!(tuning["saving"]["replaced_in"], "search", "{tuning:#}");
    assert!(figure(&tuning["saving"], "low_s") > 0.0, "{tuning:#}");

    // Six of the ten sampled production calls (calls 57, 65, ..., 97) slept 60 ms: the
    // realised time is the winner's, and no saving is claimed. (The delay starts after the
    // self-check, calls 27 to 42, which would otherwise catch it and go back to native.)
    let (tuning, err) = tuned(
        "loss",
        "allreduce:native=20ms,allreduce:ring=60ms@50,allreduce:ring=5ms",
    );
    let saving = &tuning["saving"];
    if saving.is_null() {
        let check = &tuning["check"];
        assert!(
            figure(check, "realised_us") > 1.25 * figure(check, "predicted_us"),
            "no saving, no cost, no miss: {tuning:#}"
        );
        return;
    }
    assert!(
        figure(saving, "winner_us") >= 6.0 * 60_000.0 / 10.0,
        "{saving:#}"
    );
    assert!(
        figure(saving, "low_s") <= 0.0,
        "a saving claimed: {saving:#}"
    );
    let line = err.lines().find(|l| l.contains("production")).unwrap();
    assert!(
        line.contains("cost ") || line.contains("no measurable saving"),
        "{err}"
    );
}

#[test]
fn savings_are_measured_openmpi() {
    savings_are_measured(OpenMpi);
}

#[test]
fn savings_are_measured_mpich() {
    savings_are_measured(Mpich);
}

/// The halo sites of the Fortran program (mpif.h) under `env`.
fn fortran_halo_notes(flavour: Flavour, name: &str, env: &[(&str, &str)]) -> Vec<(Value, String)> {
    let dir = scratch(&format!("report_{name}_{}", flavour.name()));
    let exe = compile_with(flavour, "known_calls.F90", &dir, &[], "-mpif");
    let mut job = run(flavour, 2, &exe, &dir);
    for (k, v) in env {
        job = job.env(k, v);
    }
    let job = job.go();
    job.assert_success();
    let report = job.report();
    sites(&report)
        .iter()
        .filter(|s| s["op"] == "halo")
        .map(|s| (s["codelets"].clone(), s["notes"].to_string()))
        .collect()
}

/// Open MPI's Fortran bindings hide MPI calls, so a forced pairwise never runs there: every
/// episode says why. Notes about neighbor follow the knobs in force.
#[test]
fn forced_codelets_that_do_not_run_say_why_openmpi() {
    let halo = fortran_halo_notes(
        OpenMpi,
        "forced_pairwise",
        &[
            ("COMMTUNE_FORCE", "halo=pairwise"),
            ("COMMTUNE_HALO_NEIGHBOR", "on"),
        ],
    );
    assert!(!halo.is_empty());
    for (codelets, notes) in &halo {
        assert!(codelets.get("pairwise").is_none(), "{codelets}");
        assert!(
            notes.contains(
                "forced halo codelet pairwise did not run an episode: Open MPI's Fortran \
                 bindings are loaded"
            ),
            "{notes}"
        );
        assert!(
            notes.contains("neighbor is not tried: COMMTUNE_FORCE=halo=pairwise forces another"),
            "{notes}"
        );
    }
    let tuned = fortran_halo_notes(
        OpenMpi,
        "neighbor_on",
        &[("COMMTUNE_MODE", "tune"), ("COMMTUNE_HALO_NEIGHBOR", "on")],
    );
    for (_, notes) in &tuned {
        assert!(
            notes.contains("neighbor is not tried: it needs every MPI call visible"),
            "{notes}"
        );
        assert!(!notes.contains("COMMTUNE_HALO_NEIGHBOR=on"), "{notes}");
    }
}

/// Under MPICH every call is visible: forced pairwise runs from the first episode on, and a
/// forced persistent says why the first episode of each site ran natively. With
/// COMMTUNE_HALO_NEIGHBOR=on but profiling, the note says that knob needs tuning.
#[test]
fn forced_codelets_that_do_not_run_say_why_mpich() {
    for (codelets, notes) in fortran_halo_notes(
        Mpich,
        "forced_pairwise",
        &[("COMMTUNE_FORCE", "halo=pairwise")],
    ) {
        assert!(
            codelets["pairwise"].as_u64() > Some(0),
            "{codelets} {notes}"
        );
    }
    for (codelets, notes) in fortran_halo_notes(
        Mpich,
        "forced_persistent",
        &[
            ("COMMTUNE_FORCE", "halo=persistent"),
            ("COMMTUNE_HALO_NEIGHBOR", "on"),
        ],
    ) {
        assert_eq!(codelets["persistent"], 2, "{codelets}");
        assert!(
            notes.contains(
                "forced halo codelet persistent did not run an episode: it starts with the \
                 episode's second instance"
            ),
            "{notes}"
        );
    }
    for (_, notes) in fortran_halo_notes(
        Mpich,
        "neighbor_profile",
        &[("COMMTUNE_HALO_NEIGHBOR", "on")],
    ) {
        assert!(
            notes.contains("COMMTUNE_HALO_NEIGHBOR=on takes effect with COMMTUNE_MODE=tune"),
            "{notes}"
        );
    }
}

/// MPI_Abort on the last rank: that rank writes what it has, marked partial with the code,
/// before the job ends (no report at all before: Open MPI leaves through exit_group).
fn abort_leaves_a_partial_report(flavour: Flavour, source: &str, flags: &[&str], args: &[&str]) {
    let variant = flags.concat();
    let stem = source.split('.').next().unwrap();
    let dir = scratch(&format!("report_{stem}{variant}_{}", flavour.name()));
    let exe = compile_with(flavour, source, &dir, flags, &variant);
    let job = run(flavour, 2, &exe, &dir).args(args).go();
    assert!(!job.output.status.success(), "the job aborted");
    let report = job.report();
    assert_eq!(report["aborted"]["rank"], 1, "{report:#}");
    assert_eq!(report["aborted"]["code"], 3, "{report:#}");
    assert_eq!(report["ranks_reporting"], 1);
    assert_eq!(report["nprocs"], 2);
    let site = site_at_line(&report, marker_line(source, "SITE:allreduce"));
    // The summary printed before the abort may be lost with the launcher's output forwarding
    // (the report crate's tests check its text); the file is what must be there.
    assert_eq!(site["calls"], 5, "{site:#}");
}

#[test]
fn abort_leaves_a_partial_report_c() {
    for flavour in [OpenMpi, Mpich] {
        abort_leaves_a_partial_report(flavour, SOURCE, &[], &["abort"]);
    }
}

#[test]
fn abort_leaves_a_partial_report_fortran() {
    for flavour in [OpenMpi, Mpich] {
        for flags in [&[][..], &["-DF08"]] {
            abort_leaves_a_partial_report(flavour, "abort.F90", flags, &[]);
        }
    }
}

/// While one call of a communicator is searched, another waits for its checkpoint: left in
/// warm-up, it says why and which knobs change that.
fn untuned_calls_say_why(flavour: Flavour) {
    let job = succeeded(cases(
        flavour,
        "queue",
        &["queue"],
        &[
            ("COMMTUNE_MODE", "tune"),
            // Searches start when warm (no do-no-harm wait): the queue is what is tested.
            ("COMMTUNE_BUDGET", "1"),
            ("COMMTUNE_SEARCH", "brute"),
            ("COMMTUNE_SAMPLES", "8"),
        ],
    ));
    let report = job.report();
    let waiting = site_at_line(&report, marker_line(SOURCE, "SITE:waiting"));
    let tuning = &waiting["tuning"];
    assert_eq!(tuning["phase"], "warmup", "{waiting:#}");
    let reason = tuning["reason"].as_str().unwrap();
    for part in [
        "no checkpoint found every rank at this call: another call of this communicator was \
         being searched during 18 of its 20 calls",
        "COMMTUNE_SAMPLES",
        "A search starts only at a checkpoint, a collective call where",
    ] {
        assert!(reason.contains(part), "{part:?} not in {reason:?}");
    }
}

#[test]
fn untuned_calls_say_why_openmpi() {
    untuned_calls_say_why(OpenMpi);
}

#[test]
fn untuned_calls_say_why_mpich() {
    untuned_calls_say_why(Mpich);
}
