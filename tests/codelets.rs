//! Forced codelets against native MPI: tests/programs/differential.c (every tested call compared
//! with PMPI on a duplicate communicator) under COMMTUNE_FORCE, with the JSON report proving that
//! the forced codelet really ran wherever the call meets its requirements and that native ran,
//! with a note, wherever it does not.
//!
//! Round `i` forces the i-th codelet (registry order, wrapping) of every operation at once, so
//! eight rounds cover every codelet; round 0 is all native (the program's own baseline).
//! The requirement table below is the specification, independent of the library's registry.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::{Flavour, Mpich, OpenMpi, compile, marker_line, run, scratch, sites};
use serde_json::Value;

/// What a codelet needs from a call (besides an intra-communicator, which every call here has).
#[derive(Clone, Copy, Debug)]
enum Need {
    Commutative,
    PowerOfTwoSize,
    EvenSize,
}

impl Need {
    fn holds(self, size: u64, commutative: bool) -> bool {
        match self {
            Need::Commutative => commutative,
            Need::PowerOfTwoSize => size.is_power_of_two(),
            Need::EvenSize => size.is_multiple_of(2),
        }
    }

    /// As the report's fallback note words it.
    fn describe(self) -> &'static str {
        match self {
            Need::Commutative => "a commutative operation",
            Need::PowerOfTwoSize => "a power-of-two communicator size",
            Need::EvenSize => "an even communicator size",
        }
    }
}

struct Codelet {
    name: &'static str,
    needs: &'static [Need],
}

const fn c(name: &'static str, needs: &'static [Need]) -> Codelet {
    Codelet { name, needs }
}

const ALLREDUCE: &[Codelet] = &[
    c("native", &[]),
    c("linear", &[]),
    c("nonoverlapping", &[]),
    c("recursive_doubling", &[]),
    c("ring", &[Need::Commutative]),
    c("rabenseifner", &[Need::Commutative]),
    c("binomial", &[]),
];

const ALLTOALL: &[Codelet] = &[
    c("native", &[]),
    c("linear", &[]),
    c("linear_sync2", &[]),
    c("linear_sync4", &[]),
    c("linear_sync8", &[]),
    c("pairwise", &[]),
    c("pairwise_excl", &[Need::PowerOfTwoSize]),
    c("bruck", &[]),
];

const ALLGATHERV: &[Codelet] = &[
    c("native", &[]),
    c("linear", &[]),
    c("ring", &[]),
    c("recursive_doubling", &[Need::PowerOfTwoSize]),
    c("bruck", &[]),
    c("neighbor_exchange", &[Need::EvenSize]),
];

const OPERATIONS: [(&str, &[Codelet]); 3] = [
    ("allreduce", ALLREDUCE),
    ("alltoall", ALLTOALL),
    ("allgatherv", ALLGATHERV),
];

/// Enough rounds for the operation with the most codelets.
const ROUNDS: usize = 8;

/// The codelet each operation runs in `round`.
fn round_codelets(round: usize) -> Vec<(&'static str, &'static Codelet)> {
    OPERATIONS
        .iter()
        .map(|(op, codelets)| (*op, &codelets[round % codelets.len()]))
        .collect()
}

fn force_value(forced: &[(&str, &Codelet)]) -> String {
    forced
        .iter()
        .map(|(op, codelet)| format!("{op}={}", codelet.name))
        .collect::<Vec<_>>()
        .join(",")
}

/// The calls of a program whose sites the report must show: (marker, op, commutative).
type Marker = (&'static str, &'static str, bool);

const DIFFERENTIAL_MARKERS: &[Marker] = &[
    ("SITE:allreduce", "allreduce", true),
    ("SITE:allreduce_noncommutative", "allreduce", false),
    ("SITE:alltoall", "alltoall", true),
    ("SITE:allgatherv", "allgatherv", true),
];

/// `comm_size=N` from a site's signature.
fn comm_size(site: &Value) -> u64 {
    let signature = site["signature"].as_str().unwrap_or_default();
    signature
        .split_whitespace()
        .find_map(|w| w.strip_prefix("comm_size="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no comm_size in signature {signature:?}"))
}

fn codelet_counts(site: &Value) -> BTreeMap<String, u64> {
    site["codelets"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

fn notes(site: &Value) -> Vec<String> {
    site["notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Calls of the site summed over ranks, when every rank made the same number of calls.
fn total_calls(site: &Value) -> Option<u64> {
    let ranks = &site["ranks"];
    let (min, max) = (
        ranks["calls"]["min"].as_u64()?,
        ranks["calls"]["max"].as_u64()?,
    );
    (min == max).then(|| min * ranks["count"].as_u64().unwrap_or(0))
}

/// The problems of one site under `codelet` (the one forced for its operation).
fn check_site(site: &Value, codelet: &Codelet, commutative: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let size = comm_size(site);
    let counts = codelet_counts(site);
    let notes = notes(site);
    let what = format!(
        "{} site {} [{}]",
        site["op"].as_str().unwrap_or("?"),
        site["location"].as_str().unwrap_or("?"),
        site["signature"].as_str().unwrap_or("?")
    );
    let unmet = codelet.needs.iter().find(|n| !n.holds(size, commutative));
    let expected = if codelet.name == "native" || unmet.is_some() {
        "native"
    } else {
        codelet.name
    };
    if counts.len() != 1 || counts.get(expected).copied().unwrap_or(0) == 0 {
        problems.push(format!(
            "{what}: expected every call to run `{expected}`{}, codelets {counts:?}, notes {notes:?}",
            match unmet {
                Some(need) if codelet.name != "native" =>
                    format!(" (forced {} needs {})", codelet.name, need.describe()),
                _ => String::new(),
            }
        ));
    } else if let Some(total) = total_calls(site)
        && counts[expected] != total
    {
        problems.push(format!(
            "{what}: {} calls ran `{expected}` of {total}",
            counts[expected]
        ));
    }
    let fallback_notes: Vec<&String> = notes
        .iter()
        .filter(|n| n.starts_with("forced codelet"))
        .collect();
    match unmet {
        Some(need) if codelet.name != "native" => {
            let note = format!(
                "forced codelet {} not applicable (needs {}): ran native",
                codelet.name,
                need.describe()
            );
            if !notes.contains(&note) {
                problems.push(format!("{what}: no note {note:?}; notes {notes:?}"));
            }
        }
        _ => {
            if !fallback_notes.is_empty() {
                problems.push(format!(
                    "{what}: `{}` should have run, but the report says {fallback_notes:?}",
                    codelet.name
                ));
            }
        }
    }
    problems
}

/// Every site of the report is one of `markers` and ran what `forced` prescribes.
fn check_report(
    report: &Value,
    source: &str,
    np: u64,
    markers: &[Marker],
    forced: &[(&str, &Codelet)],
) -> Vec<String> {
    let mut problems = Vec::new();
    if report["nprocs"] != np || report["ranks_reporting"] != np {
        problems.push(format!(
            "report of {} ranks with {} reporting, expected {np}",
            report["nprocs"], report["ranks_reporting"]
        ));
    }
    let lines: Vec<(u64, &str, bool)> = markers
        .iter()
        .map(|&(marker, op, commutative)| (marker_line(source, marker), op, commutative))
        .collect();
    let mut seen = vec![0usize; lines.len()];
    for site in sites(report) {
        let op = site["op"].as_str().unwrap_or("?");
        let line = site["line"].as_u64();
        let Some(index) = lines
            .iter()
            .position(|&(l, o, _)| Some(l) == line && o == op)
        else {
            problems.push(format!(
                "unexpected {op} site {} (line {line:?})",
                site["location"]
            ));
            continue;
        };
        seen[index] += 1;
        let (_, codelet) = forced
            .iter()
            .find(|(o, _)| *o == op)
            .expect("every operation is forced");
        problems.extend(check_site(site, codelet, lines[index].2));
    }
    for (i, &(marker, _, _)) in markers.iter().enumerate() {
        if seen[i] == 0 {
            problems.push(format!("no site for {marker} in the report"));
        }
    }
    problems
}

/// The differential program's verdict: "differential: N cases, M failures".
fn check_output(job: &common::Job, min_cases: u64) -> Vec<String> {
    let stdout = job.stdout();
    let mut problems: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("differential: FAIL"))
        .take(25)
        .map(str::to_string)
        .collect();
    let summary = stdout
        .lines()
        .find_map(|l| l.strip_prefix("differential: ")?.strip_suffix(" failures"));
    match summary.and_then(|s| {
        let (cases, failures) = s.split_once(" cases, ")?;
        Some((cases.parse::<u64>().ok()?, failures.parse::<u64>().ok()?))
    }) {
        Some((cases, 0)) if cases >= min_cases => {}
        Some((cases, failures)) => problems.push(format!("{cases} cases, {failures} failures")),
        None => problems.push(format!(
            "no summary line ({}):\nstdout tail:\n{}\nstderr tail:\n{}",
            job.output.status,
            tail(&stdout, 15),
            tail(&job.stderr(), 15)
        )),
    }
    if !job.output.status.success() && problems.is_empty() {
        problems.push(format!("exit status {}", job.output.status));
    }
    problems
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// All rounds of the differential program at `np` ranks, with program arguments `args`.
fn differential_rounds(flavour: Flavour, np: u64, args: &[&str]) {
    let dir = scratch(&format!("codelets_{}_{np}", flavour.name()));
    let exe = compile(flavour, "differential.c", &dir);
    let start = Instant::now();
    let mut problems = Vec::new();
    for round in 0..ROUNDS {
        let forced = round_codelets(round);
        let force = force_value(&forced);
        let round_start = Instant::now();
        let job = run(flavour, np as usize, &exe, &dir)
            .env("COMMTUNE_FORCE", &force)
            .args(args)
            .go();
        // Includes waiting for other tests' jobs (one job at a time).
        eprintln!(
            "{} np={np} round {round}: {:.1} s",
            flavour.name(),
            round_start.elapsed().as_secs_f64()
        );
        let mut found = check_output(&job, 50);
        if job.report_path.exists() {
            found.extend(check_report(
                &job.report(),
                "differential.c",
                np,
                DIFFERENTIAL_MARKERS,
                &forced,
            ));
        } else {
            found.push("no report".to_string());
        }
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("round {round} (COMMTUNE_FORCE={force}): {p}")),
        );
    }
    eprintln!(
        "{} rounds, {} at {np} ranks: {:.1} s",
        ROUNDS,
        flavour.name(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) with forced codelets, {} at {np} ranks (program arguments {args:?}):\n{}",
        problems.len(),
        flavour.name(),
        problems.join("\n")
    );
}

/// Oversubscribed ranks (4 and 5 on two cores) make every collective slow: fewer random cases.
const OPENMPI_FEW_RANKS: &[&str] = &[];
const OPENMPI_MANY_RANKS: &[&str] = &["--random", "60"];
/// MPICH busy-polls: "large" just above 1 MiB; at 3 ranks (oversubscribed) the reduced matrix.
const MPICH_2: &[&str] = &["--large", "1100000", "--random", "100"];
const MPICH_3: &[&str] = &["--quick", "--large", "1100000", "--random", "10"];

#[test]
fn openmpi_1_rank() {
    differential_rounds(OpenMpi, 1, OPENMPI_FEW_RANKS);
}

#[test]
fn openmpi_2_ranks() {
    differential_rounds(OpenMpi, 2, OPENMPI_FEW_RANKS);
}

#[test]
fn openmpi_3_ranks() {
    differential_rounds(OpenMpi, 3, OPENMPI_FEW_RANKS);
}

#[test]
fn openmpi_4_ranks() {
    differential_rounds(OpenMpi, 4, OPENMPI_MANY_RANKS);
}

#[test]
fn openmpi_5_ranks() {
    differential_rounds(OpenMpi, 5, OPENMPI_MANY_RANKS);
}

#[test]
fn mpich_2_ranks() {
    differential_rounds(Mpich, 2, MPICH_2);
}

#[test]
fn mpich_3_ranks() {
    differential_rounds(Mpich, 3, MPICH_3);
}

/// A codelet that needs a commutative operation, forced on a program with a non-commutative
/// user operation: native runs that site (correct, rank-ordered results) and the report says
/// why; the commutative site of the same program runs the forced codelet.
fn fallback_for_noncommutative(flavour: Flavour, np: u64) {
    const SOURCE: &str = "forced_fallback.c";
    let dir = scratch(&format!("codelets_fallback_{}", flavour.name()));
    let exe = compile(flavour, SOURCE, &dir);
    let noncommutative = marker_line(SOURCE, "SITE:noncommutative");
    let commutative = marker_line(SOURCE, "SITE:commutative");
    for name in ["ring", "rabenseifner"] {
        let job = run(flavour, np as usize, &exe, &dir)
            .env("COMMTUNE_FORCE", &format!("allreduce={name}"))
            .go();
        job.assert_success();
        assert!(
            job.stdout().contains("forced_fallback: results correct"),
            "{name}: {}",
            job.stdout()
        );
        let report = job.report();
        let note = format!(
            "forced codelet {name} not applicable (needs a commutative operation): ran native"
        );
        let mut checked = (0, 0);
        for site in sites(&report) {
            let line = site["line"].as_u64().expect("sites have lines");
            let counts = codelet_counts(site);
            let calls = total_calls(site).expect("same calls on every rank");
            if line == noncommutative {
                checked.0 += 1;
                assert_eq!(
                    counts,
                    BTreeMap::from([("native".to_string(), calls)]),
                    "{name}: non-commutative site {}",
                    site["signature"]
                );
                assert_eq!(notes(site), vec![note.clone()], "{name}: notes");
            } else {
                assert_eq!(line, commutative, "{name}: unexpected site");
                checked.1 += 1;
                assert_eq!(
                    counts,
                    BTreeMap::from([(name.to_string(), calls)]),
                    "{name}: commutative site {}",
                    site["signature"]
                );
                assert!(notes(site).is_empty(), "{name}: {:?}", notes(site));
            }
        }
        // counts 1, 5 and 1000: three signatures per call site
        assert_eq!(checked, (3, 3), "{name}: sites in the report");
    }
}

#[test]
fn noncommutative_op_falls_back_to_native_openmpi() {
    fallback_for_noncommutative(OpenMpi, 3);
}

#[test]
fn noncommutative_op_falls_back_to_native_mpich() {
    fallback_for_noncommutative(Mpich, 2);
}

/// The report check is not vacuous: on a run where native was forced everywhere (what the
/// library does with an assignment to a codelet it does not have), it reports every operation
/// whose forced codelet should have run, and the missing fallback note where a requirement fails.
#[test]
fn report_check_rejects_a_run_without_the_forced_codelets() {
    let dir = scratch("codelets_check_rejects");
    let exe = compile(OpenMpi, "differential.c", &dir);
    let all_native = round_codelets(0);
    let job = run(OpenMpi, 2, &exe, &dir)
        .env("COMMTUNE_FORCE", &force_value(&all_native))
        .args(&["--quick", "--random", "0"])
        .go();
    assert_eq!(check_output(&job, 50), Vec::<String>::new());
    let report = job.report();
    assert_eq!(
        check_report(
            &report,
            "differential.c",
            2,
            DIFFERENTIAL_MARKERS,
            &all_native
        ),
        Vec::<String>::new()
    );
    for round in 1..ROUNDS {
        let forced = round_codelets(round);
        let problems = check_report(&report, "differential.c", 2, DIFFERENTIAL_MARKERS, &forced);
        for (op, codelet) in &forced {
            if codelet.name == "native" {
                continue;
            }
            let expected = format!("to run `{}`", codelet.name);
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{op} site")) && p.contains(&expected)),
                "round {round}: no problem reported for {op}={}:\n{}",
                codelet.name,
                problems.join("\n")
            );
        }
    }
    let ring = [("allreduce", &ALLREDUCE[4])];
    assert_eq!(ring[0].1.name, "ring");
    let note = "no note \"forced codelet ring not applicable (needs a commutative operation): ran native\"";
    let problems = check_report(
        &report,
        "differential.c",
        2,
        &DIFFERENTIAL_MARKERS[..2],
        &ring,
    );
    assert!(
        problems.iter().any(|p| p.contains(note)),
        "{}",
        problems.join("\n")
    );
}
