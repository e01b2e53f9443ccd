//! Halo decisions across runs with real MPI jobs (tests/programs/stencil.c on 2 ranks, Open MPI
//! and MPICH): every rank's decision reaches the store, a second run of the same stencil starts
//! each rank's exchange in production with the recorded winner and the safety net confirms it
//! (no search), a winner the self-check replaced with its runner-up is recorded so that the
//! runner-up is what a second run predicts, a decision reached with the other timing is predicted
//! with it, a slowed-down winner is dismissed by the safety net and searched (after native, the
//! entry's runner-up, beat it on trial), one that native does not beat on a machine slower for
//! both is kept, the collective-only readers (`commtune map`, `export`) say the same with halo
//! entries in the store as without, `commtune history` lists them after the collectives', and a
//! damaged halo file is one warning line.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Flavour, Job, Mpich, OpenMpi, Run, cli, compile, run, scratch, sites};
use commtune_history::How;
use commtune_history::halo::HaloEntry;
use serde_json::Value;

/// Native and pairwise only, `brute` with two samples each, searching as soon as warm; a wide
/// COMMTUNE_PMAX: a rank's 2 ms episode also waits for its peer, which sleeps its own delay at
/// another phase, so one run's pairwise episodes took 2.1 ms and the next one's 4 ms (MPICH),
/// and 6.1 ms on a machine busy compiling beside the test (Open MPI, 188 % over the prediction);
/// the dismissed prediction misses by 900 %.
const TUNING: &[(&str, &str)] = &[
    ("COMMTUNE_MODE", "tune"),
    ("COMMTUNE_BUDGET", "1"),
    ("COMMTUNE_SEARCH", "brute"),
    ("COMMTUNE_HALO_SAMPLES", "2"),
    ("COMMTUNE_HALO_BLOCK", "2"),
    ("COMMTUNE_PMAX", "3"),
    (
        "COMMTUNE_EXCLUDE",
        "halo=persistent,halo=irecv_first,halo=pack",
    ),
];

/// Pairwise the known winner: every episode 2 ms slower on each rank, native's 30 ms. With
/// native's 10 ms, pairwise's production episodes once took 16 ms in a full suite run (each waits
/// for its peer's delay too, and MPICH's ranks busy-poll two cores), and the self-check rightly
/// replaced pairwise with native.
const PAIRWISE_WINS: &str = "halo:native=30ms,halo:pairwise=2ms";

/// The stencil (a 2-D periodic torus, 80 exchanges) on 2 ranks, tuned with `delays`, recording
/// into and predicting from `store`.
fn stencil_job(flavour: Flavour, dir: &Path, store: &Path, delays: &str) -> Job {
    stencil_job_on(2, flavour, dir, store, delays)
}

/// `stencil_job` on `ranks` ranks.
fn stencil_job_on(ranks: usize, flavour: Flavour, dir: &Path, store: &Path, delays: &str) -> Job {
    let job = stencil_run(ranks, flavour, dir, store, delays).go();
    job.assert_success();
    job
}

/// The job `stencil_job_on` runs, not started.
fn stencil_run<'a>(
    ranks: usize,
    flavour: Flavour,
    dir: &'a Path,
    store: &Path,
    delays: &str,
) -> Run<'a> {
    let program = compile(flavour, "stencil.c", dir);
    let mut job = run(flavour, ranks, &program, dir)
        .args(&["2", "12", "1", "1", "80", "waitall", "none", "sends_first"])
        .env("COMMTUNE_INJECT_DELAY", delays)
        .env("COMMTUNE_HISTORY", &store.to_string_lossy());
    for (name, value) in TUNING {
        job = job.env(name, value);
    }
    job
}

/// `stencil_job` with no warning; the report's halo exchange's tuning.
fn stencil(flavour: Flavour, dir: &Path, store: &Path, delays: &str) -> Value {
    stencil_on(2, flavour, dir, store, delays)
}

/// `stencil` on `ranks` ranks.
fn stencil_on(ranks: usize, flavour: Flavour, dir: &Path, store: &Path, delays: &str) -> Value {
    let job = stencil_job_on(ranks, flavour, dir, store, delays);
    assert!(
        !job.stderr().contains("history store"),
        "no warning about the store: {}",
        job.stderr()
    );
    let report = job.report();
    let site = sites(&report)
        .iter()
        .filter(|s| s["op"] == "halo")
        .max_by_key(|s| s["bytes"].as_u64())
        .unwrap_or_else(|| panic!("no halo site: {report:#}"))
        .clone();
    site["tuning"].clone()
}

/// A second run's halo tuning: `winner` predicted, confirmed by the safety net and kept, and
/// nothing searched.
fn confirmed_without_search(second: &Value, winner: &str) {
    let prediction = &second["prediction"];
    assert_eq!(prediction["winner"], winner, "{second:#}");
    assert_eq!(prediction["outcome"], "confirmed", "{second:#}");
    assert_eq!(second["winner"], winner, "{second:#}");
    assert_eq!(
        (
            second["searches"].as_u64(),
            second["search_instances"].as_u64()
        ),
        (Some(0), Some(0)),
        "no search: {second:#}"
    );
}

/// The store's entries of confirmed predictions, each of `winner`.
fn confirmed_entries(store: &Path, winner: &str) -> Vec<HaloEntry> {
    let confirmed: Vec<HaloEntry> = halo_entries(store)
        .into_iter()
        .filter(|e| e.how == How::PredictionConfirmed)
        .collect();
    assert!(
        confirmed.iter().all(|e| e.winner == winner),
        "{confirmed:#?}"
    );
    confirmed
}

/// The store's halo entries, by rank (the newest file's when a rank has several).
fn halo_entries(store: &Path) -> Vec<HaloEntry> {
    let loaded = commtune_history::halo::load(store);
    assert_eq!(loaded.warning(store), None);
    let mut entries = loaded.entries;
    entries.sort_by_key(|e| (e.episode.rank, e.time));
    entries
}

/// The first run searches and records each rank's decision; the second predicts it, confirms it,
/// searches nothing and keeps the winner.
fn second_run_skips_the_search(flavour: Flavour, name: &str) {
    let dir = scratch(name);
    let store = dir.join("store");
    let first = stencil(flavour, &dir, &store, PAIRWISE_WINS);
    assert_eq!(first["winner"], "pairwise", "{first:#}");
    assert_eq!(first["searches"], 1, "{first:#}");
    assert!(first.get("prediction").is_none(), "nothing to predict from");
    let searched = first["search_instances"].as_u64().unwrap();
    assert!(searched > 0, "{first:#}");

    let entries = halo_entries(&store);
    let ranks: Vec<u32> = entries.iter().map(|e| e.episode.rank).collect();
    assert_eq!(
        ranks,
        [0, 1],
        "every rank's decision reached the store: {entries:#?}"
    );
    for e in &entries {
        assert_eq!(
            (e.winner.as_str(), e.how),
            ("pairwise", How::Search),
            "{e:#?}"
        );
        assert_eq!((e.episode.comm_size, e.episode.messages), (2, 8), "{e:#?}");
        assert_eq!(e.timing, "period", "a halo search's default timing");
        assert!(e.estimates.iter().any(|c| c.codelet == "native"), "{e:#?}");
        let realised = e.realised_us.expect("the self-check's realised time");
        assert!(
            (2_000.0..20_000.0).contains(&realised),
            "pairwise's, not native's 30 ms: {e:#?}"
        );
    }
    assert_eq!(
        entries[0].episode.shape, entries[1].episode.shape,
        "a torus of 2: the same exchange relative to each rank"
    );

    let second = stencil(flavour, &dir, &store, PAIRWISE_WINS);
    let prediction = &second["prediction"];
    confirmed_without_search(&second, "pairwise");
    assert_eq!(prediction["from"][0]["how"], "search", "{second:#}");
    assert_eq!(
        prediction["saved_instances"].as_u64(),
        Some(searched),
        "the first run's search (2 codelets x 2 samples x blocks of 2): {second:#}"
    );
    let confirmed = confirmed_entries(&store, "pairwise");
    assert_eq!(confirmed.len(), 2, "both ranks confirmed: {confirmed:#?}");
}

#[test]
fn a_second_run_skips_the_halo_search_openmpi() {
    second_run_skips_the_search(OpenMpi, "halo-history-second-openmpi");
}

#[test]
fn a_second_run_skips_the_halo_search_mpich() {
    second_run_skips_the_search(Mpich, "halo-history-second-mpich");
}

/// The second run's pairwise is 20 ms slower, native as before: the safety net dismisses the
/// prediction, the exchange is searched, and native wins.
fn a_slower_winner_is_dismissed(flavour: Flavour, name: &str) {
    let dir = scratch(name);
    let store = dir.join("store");
    let first = stencil(flavour, &dir, &store, PAIRWISE_WINS);
    assert_eq!(first["winner"], "pairwise", "{first:#}");
    let second = stencil(flavour, &dir, &store, "halo:native=10ms,halo:pairwise=20ms");
    let prediction = &second["prediction"];
    assert_eq!(prediction["outcome"], "dismissed", "{second:#}");
    assert_eq!(prediction["saved_instances"], 0, "{second:#}");
    let measured = prediction["measured_us"].as_f64().unwrap();
    assert!(measured > 15_000.0, "pairwise's 20 ms: {second:#}");
    assert_eq!(
        prediction["trial"]["codelet"], "native",
        "the entry's runner-up was tried first, and beat pairwise: {second:#}"
    );
    assert_eq!(
        second["searches"], 1,
        "searched after the dismissal: {second:#}"
    );
    assert!(second["search_instances"].as_u64().unwrap() > 0);
    assert_eq!(second["winner"], "native", "{second:#}");
    let newest: Vec<HaloEntry> = halo_entries(&store)
        .into_iter()
        .filter(|e| e.winner == "native")
        .collect();
    assert_eq!(newest.len(), 2, "both ranks recorded the new search");
    assert!(newest.iter().all(|e| e.how == How::Search));
}

#[test]
fn a_slower_predicted_halo_winner_is_searched_again_openmpi() {
    a_slower_winner_is_dismissed(OpenMpi, "halo-history-dismissed-openmpi");
}

#[test]
fn a_slower_predicted_halo_winner_is_searched_again_mpich() {
    a_slower_winner_is_dismissed(Mpich, "halo-history-dismissed-mpich");
}

/// The second run's machine is slower for both codelets: pairwise takes 50 ms where the first
/// run measured a few (at most 16 on a loaded machine, so that COMMTUNE_PMAX=1 finds the miss),
/// native 100 ms. Native, the entry's runner-up, tried for a window, does worse than pairwise:
/// each rank keeps its prediction, searches nothing, and records pairwise's time now.
fn a_slower_machine_keeps_the_prediction(flavour: Flavour, name: &str) {
    let dir = scratch(name);
    let store = dir.join("store");
    let first = stencil(flavour, &dir, &store, PAIRWISE_WINS);
    assert_eq!(first["winner"], "pairwise", "{first:#}");
    let slower = "halo:native=100ms,halo:pairwise=50ms";
    let second = stencil_run(2, flavour, &dir, &store, slower)
        .env("COMMTUNE_PMAX", "1")
        .go();
    second.assert_success();
    let report = second.report();
    let halo = sites(&report)
        .iter()
        .find(|s| s["op"] == "halo" && s["tuning"].get("prediction").is_some())
        .unwrap_or_else(|| panic!("no predicted halo site: {report:#}"))
        .clone();
    let t = &halo["tuning"];
    let prediction = &t["prediction"];
    assert_eq!(
        (&prediction["winner"], &prediction["outcome"]),
        (&"pairwise".into(), &"kept".into()),
        "{t:#}"
    );
    assert!(
        prediction["measured_us"].as_f64().unwrap() > 40_000.0,
        "{t:#}"
    );
    assert_eq!(prediction["trial"]["codelet"], "native", "{t:#}");
    assert!(
        prediction["trial"]["measured_us"].as_f64().unwrap() > 80_000.0,
        "{t:#}"
    );
    assert_eq!(
        (&t["winner"], &t["searches"], &t["search_instances"]),
        (&"pairwise".into(), &0.into(), &0.into()),
        "{t:#}"
    );
    let kept = confirmed_entries(&store, "pairwise");
    assert_eq!(kept.len(), 2, "both ranks recorded it: {kept:#?}");
    assert!(
        kept.iter().all(|e| e.realised_us.unwrap() > 40_000.0),
        "pairwise's time now: {kept:#?}"
    );
}

#[test]
fn a_slower_machine_keeps_the_halo_prediction_openmpi() {
    a_slower_machine_keeps_the_prediction(OpenMpi, "halo-history-kept-openmpi");
}

#[test]
fn a_slower_machine_keeps_the_halo_prediction_mpich() {
    a_slower_machine_keeps_the_prediction(Mpich, "halo-history-kept-mpich");
}

/// Pairwise wins the search (native is 10 ms slower), then misses its prediction by 40 ms;
/// native, tried for a window, takes its 10 ms and replaces pairwise (as tests/halo.rs's
/// `a_runner_up_that_holds_its_estimate_replaces_the_halo_winner`, on one rank: a torus of one
/// exchanging with itself, so that no peer's delay lands in a trial). The store records native
/// with its trial's time and pairwise's realised time; the second run with the same delays
/// predicts native, not the misjudged pairwise, confirms it and searches nothing.
fn a_replaced_winner_is_not_predicted_again(flavour: Flavour, name: &str) {
    let dir = scratch(name);
    let store = dir.join("store");
    let delays = "halo:native=10ms,halo:pairwise=40ms@14";
    let first = stencil_on(1, flavour, &dir, &store, delays);
    assert_eq!(first["check"]["verdict"], "runner_up", "{first:#}");
    assert_eq!(first["winner"], "native", "{first:#}");
    let entries = halo_entries(&store);
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let e = &entries[0];
    assert_eq!(
        (e.winner.as_str(), e.how),
        ("native", How::Search),
        "{e:#?}"
    );
    let replaced = e.replaced.as_ref().expect("the winner it replaced");
    assert_eq!(replaced.codelet, "pairwise", "{e:#?}");
    let native = e.realised_us.expect("the trial's time");
    assert!(
        (5_000.0..30_000.0).contains(&native) && replaced.realised_us > native + 10_000.0,
        "native's 10 ms in its trial, pairwise's 40 ms: {e:#?}"
    );
    let estimate = |codelet: &str| {
        e.estimates
            .iter()
            .find(|c| c.codelet == codelet)
            .map(|c| c.us)
    };
    assert!(
        estimate("pairwise") > estimate("native"),
        "pairwise's estimate corrected behind native's: {e:#?}"
    );

    let second = stencil_on(1, flavour, &dir, &store, delays);
    confirmed_without_search(&second, "native");
    let confirmed = confirmed_entries(&store, "native");
    assert_eq!(confirmed.len(), 1, "{confirmed:#?}");
}

#[test]
fn a_replaced_halo_winner_is_not_predicted_again_openmpi() {
    a_replaced_winner_is_not_predicted_again(OpenMpi, "halo-history-replaced-openmpi");
}

#[test]
fn a_replaced_halo_winner_is_not_predicted_again_mpich() {
    a_replaced_winner_is_not_predicted_again(Mpich, "halo-history-replaced-mpich");
}

/// The first run's self-check finds its search misled twice over and searches again with
/// `local` timing (tests/halo.rs's `self_check_reopens`, on one rank for the same reason), whose
/// decision, native, the store keeps with that timing and the timing the job asked for. The
/// second run, of the default timing (`period`), measured nothing of its own there: it predicts
/// native with local timing, its safety net (timing episodes as that search did) confirms it,
/// and nothing is searched.
fn a_decision_reached_with_the_other_timing_is_predicted_with_it(flavour: Flavour, name: &str) {
    let dir = scratch(name);
    let store = dir.join("store");
    let delays = "halo:native=15ms@14,halo:native=5ms,halo:pairwise=30ms@14";
    let first = stencil_on(1, flavour, &dir, &store, delays);
    assert_eq!(first["searches"], 2, "reopened: {first:#}");
    assert_eq!(first["check"]["timing"], "local", "{first:#}");
    assert_eq!(first["winner"], "native", "{first:#}");
    let entries = halo_entries(&store);
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let e = &entries[0];
    assert_eq!(
        (
            e.winner.as_str(),
            e.timing.as_str(),
            e.reopened_from.as_deref()
        ),
        ("native", "local", Some("period")),
        "{e:#?}"
    );

    let second = stencil_on(1, flavour, &dir, &store, delays);
    confirmed_without_search(&second, "native");
    let confirmed = confirmed_entries(&store, "native");
    assert_eq!(confirmed.len(), 1, "{confirmed:#?}");
    assert_eq!(
        (
            confirmed[0].timing.as_str(),
            confirmed[0].reopened_from.as_deref()
        ),
        ("local", Some("period")),
        "kept with the timing its safety net measured: {confirmed:#?}"
    );
}

#[test]
fn a_halo_decision_reached_with_the_other_timing_is_predicted_with_it_openmpi() {
    a_decision_reached_with_the_other_timing_is_predicted_with_it(
        OpenMpi,
        "halo-history-other-timing-openmpi",
    );
}

#[test]
fn a_halo_decision_reached_with_the_other_timing_is_predicted_with_it_mpich() {
    a_decision_reached_with_the_other_timing_is_predicted_with_it(
        Mpich,
        "halo-history-other-timing-mpich",
    );
}

/// `commtune map` and `export` over a store of collective entries print the same with halo
/// entries in it as without, and `history` lists them after the collective entries.
#[test]
fn collective_readers_ignore_halo_entries() {
    let dir = scratch("halo-history-readers");
    let store = dir.join("store");
    stencil(OpenMpi, &dir, &store, PAIRWISE_WINS);
    let halo_files = std::fs::read_dir(&store).unwrap().count();
    assert_eq!(halo_files, 1, "the halo file");
    let platform = &halo_entries(&store)[0].platform;
    let collectives: Vec<commtune_history::Entry> = (3..=20)
        .map(|k| {
            let bytes = 1u64 << k;
            let mut e = commtune_history::Entry {
                op: "allreduce".into(),
                comm_size: 2,
                ranks_per_node: Some(2),
                size_class: String::new(),
                bytes,
                signature: String::new(),
                facts: String::new(),
                mpi: "Open MPI v4.1.4".into(),
                platform: platform.clone(),
                estimates: Vec::new(),
                timing: Some("barrier".into()),
                reopened_from: None,
                realised_us: None,
                winner: String::new(),
                replaced: None,
                time: 1_795_000_000,
                how: How::Search,
            };
            // Recursive doubling up to 64 KiB, ring beyond.
            let b = bytes as f64;
            for (codelet, us) in [
                ("native", 20.0 + b * 2e-3),
                ("recursive_doubling", 5.0 + b * 1e-3),
                ("ring", 30.0 + b * 5e-4),
            ] {
                e.estimates.push(commtune_history::Estimate {
                    codelet: codelet.into(),
                    us,
                    error_us: 0.1,
                });
            }
            e.winner = if bytes <= 1 << 16 {
                "recursive_doubling"
            } else {
                "ring"
            }
            .into();
            e
        })
        .collect();
    let without = dir.join("without");
    commtune_history::write(&without, "job.jsonl", &collectives).unwrap();
    commtune_history::write(&store, "job.jsonl", &collectives).unwrap();
    let commtune = |args: &[&str], store: &Path| {
        let out = Command::new(cli())
            .args(args)
            .arg("--dir")
            .arg(store)
            .env_remove("COMMTUNE_HISTORY")
            .output()
            .expect("commtune runs");
        assert!(out.status.success(), "commtune {args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        text.replace(store.to_string_lossy().as_ref(), "STORE")
    };
    let (with, without_halo) = (commtune(&["map"], &store), commtune(&["map"], &without));
    assert!(with.contains("recursive_doubling"), "commtune map:\n{with}");
    assert_eq!(with, without_halo, "commtune map");
    // `history` lists the halo entries after the collective ones, which it lists as before.
    let (with, without_halo) = (
        commtune(&["history"], &store),
        commtune(&["history"], &without),
    );
    let halo = with.strip_prefix(&without_halo).unwrap_or_else(|| {
        panic!("commtune history:\n{with}\nwithout halo entries:\n{without_halo}")
    });
    assert!(
        halo.starts_with("halo episodes: 2 entries in 1 files\n") && halo.contains("pairwise"),
        "{halo}"
    );
    let exported = |store: &Path| {
        let rules = dir.join("rules");
        let rules_arg = rules.to_string_lossy().into_owned();
        commtune(
            &["export", "--format", "openmpi", "--output", &rules_arg],
            store,
        );
        std::fs::read_to_string(&rules)
            .unwrap()
            .replace(store.to_string_lossy().as_ref(), "STORE")
    };
    let (with, without) = (exported(&store), exported(&without));
    assert!(with.contains("allreduce"), "{with}");
    assert_eq!(with, without, "commtune export");
}

/// A damaged halo file is one warning line on rank 0; the job's entries are added all the same.
#[test]
fn a_damaged_halo_file_is_one_warning() {
    let dir = scratch("halo-history-damaged");
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("future.halo"),
        "{\"commtune_halo_history\":99}\n{}\n",
    )
    .unwrap();
    let job = stencil_job(OpenMpi, &dir, &store, PAIRWISE_WINS);
    let stderr = job.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("history store"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("ignored 1 file (future.halo: format version 99"),
        "{}",
        lines[0]
    );
    let loaded = commtune_history::halo::load(&store);
    assert_eq!((loaded.files, loaded.skipped_files), (1, 1));
    assert_eq!(loaded.entries.len(), 2, "both ranks' decisions");
}
