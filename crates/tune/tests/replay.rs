//! Replays of the traces recorded in tests/data (COMMTUNE_TRACE; how they were recorded:
//! tests/data/README.md) through the simulator: no MPI, so they run in CI. The numbers the
//! bounds come from are in LD_PRELOAD.md ("Why these defaults").

use std::path::Path;

use commtune_tune::settings::LOCAL_TIMING_FROM;
use commtune_tune::simulate::{self, Model, Outcome};
use commtune_tune::trace::{self, Trace};
use commtune_tune::{Search, Settings, Timing};

/// Every trace in tests/data, grouped into runs (one per PREFIX).
fn runs() -> Vec<(String, Vec<Trace>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("tests/data")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("a trace"))
        })
        .collect();
    files.sort();
    let mut runs: Vec<(String, Vec<Trace>)> = Vec::new();
    for (name, text) in files {
        let prefix = name.rsplitn(3, '.').nth(2).unwrap().to_string();
        let t = trace::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        match runs.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, run)) => run.push(t),
            None => runs.push((prefix, vec![t])),
        }
    }
    runs
}

fn models() -> Vec<Model> {
    let runs: Vec<Vec<Trace>> = runs().into_iter().map(|(_, r)| r).collect();
    Model::build(&runs).unwrap()
}

fn name(m: &Model) -> String {
    format!("{} {} B on {} ranks", m.op, m.bytes, m.ranks)
}

/// Seeded replays a regret is the median of: with 7, the rig's alltoall came out at 1.010 for
/// the defaults before the self-check tried runners-up; with 21 at 1.143 (the self-check
/// reversed the decision in about half of them), so fewer seeds can tell a story the model does
/// not.
const REPLICAS: u64 = 21;

/// The median regret of `settings` over seeds 1..=REPLICAS.
fn regret(m: &Model, settings: &Settings, calls: u64) -> f64 {
    let mut r: Vec<f64> = simulate::replays(m, settings, calls, REPLICAS)
        .iter()
        .map(|o| o.regret)
        .collect();
    r.sort_by(f64::total_cmp);
    r[r.len() / 2]
}

fn find<'m>(models: &'m [Model], op: &str, bytes: u64, ranks: usize) -> &'m Model {
    models
        .iter()
        .find(|m| m.op == op && m.bytes == bytes && m.ranks == ranks)
        .unwrap_or_else(|| panic!("no model of {op} {bytes} B on {ranks} ranks"))
}

#[test]
fn every_recorded_key_has_a_model_of_every_codelet() {
    let models = models();
    assert_eq!(models.len(), 9, "shared memory: 3 keys, rig: 6");
    for m in &models {
        let codelets = match m.op.as_str() {
            "alltoall" => 8,
            "allgatherv" => 6,
            _ => 7,
        };
        assert_eq!(m.codelets.len(), codelets, "{}: {:?}", name(m), m.missing);
        assert_eq!(m.runs, 3, "{}: brute, barrier and barrier of one", name(m));
        for c in &m.codelets {
            assert!(c.steady.len() >= 30, "{} {}: steady", name(m), c.name);
            assert!(c.switches.len() >= 10, "{} {}: switches", name(m), c.name);
            assert!(!c.barriered.is_empty() && !c.barriered_switches.is_empty());
        }
        assert!(m.disturbed < 0.06, "{}: {}", name(m), m.disturbed);
    }
}

/// On the rig at 64 KiB per rank, alltoall codelets that post every send at once (native and
/// the linear ones) have tails of their own: the shaper drops what a burst overflows and TCP
/// retransmits. They stay in those codelets' costs, and the paced codelets have none; pooled as
/// the machine's, they would make native look best.
#[test]
fn a_codelet_s_own_tail_is_its_cost() {
    let models = models();
    let m = find(&models, "alltoall", 1 << 18, 4);
    for tailed in ["native", "linear", "linear_sync8"] {
        assert!(
            m.tailed.iter().any(|t| t == tailed),
            "{tailed}: {:?}",
            m.tailed
        );
    }
    assert!(
        !m.tailed.iter().any(|t| t == "pairwise_excl"),
        "{:?}",
        m.tailed
    );
    let cost = |name: &str| m.cost(m.codelets.iter().find(|c| c.name == name).unwrap());
    assert!(cost("native") > 1.4 * cost("pairwise_excl"));
    assert!(
        m.disturbed < 0.01,
        "the machine's own rate: {}",
        m.disturbed
    );
}

/// The `# settings` line of a trace as `Settings` (search, timing, samples, block, warm-up).
fn traced_settings(t: &Trace) -> Settings {
    // Traces recorded before the header named the budget ran without one.
    let mut s = Settings {
        budget: 1.0,
        ..Settings::default()
    };
    for field in t.settings.split(' ') {
        match field.split_once('=') {
            Some(("search", v)) => {
                s.search = [Search::Brute, Search::Attributes, Search::Racing]
                    .into_iter()
                    .find(|x| format!("{x:?}") == v)
                    .unwrap()
            }
            Some(("timing", v)) => s = s.with_timing(v).unwrap(),
            Some(("samples", v)) => s.samples = v.parse().unwrap(),
            Some(("block", v)) => s.block = v.parse().unwrap(),
            Some(("warmup", v)) => s.warmup = v.parse().unwrap(),
            Some(("budget", v)) => s.budget = v.parse().unwrap(),
            _ => {}
        }
    }
    s
}

/// Replaying a recorded run under its own settings takes about the time the run took: the
/// search's schedule, its reductions and what switches cost add up as they did. Where the
/// machine disturbed a run more or less than the key's runs on average the replay differs by
/// that (the model pools disturbances, and leaves stalls out): up to half on shared memory,
/// where one run had 24 ms of stalls in 81 ms. A run at another level than the key's run with
/// the most steady instances is replayed at that run's level (`simulate::levels`): the rig's
/// 8-byte barrier runs, 1.2 to 1.5 times slower, replay short. On the rig at 1 MiB, what the model is for (a
/// network where switches cost), it is within 2 % (LD_PRELOAD.md, "The simulator").
#[test]
fn a_traced_run_replayed_under_its_own_settings_takes_its_time() {
    let models = models();
    let mut errors = Vec::new();
    for (prefix, run) in runs() {
        let t = &run[0];
        let key = t.records[0].key;
        let model = models.iter().find(|m| m.key == key).unwrap();
        let calls = t.records.len() as u64;
        let real = run
            .iter()
            .map(|t| t.records.last().unwrap().end - t.records[0].start)
            .max()
            .unwrap() as f64;
        let mut totals: Vec<f64> = simulate::replays(model, &traced_settings(t), calls, 7)
            .iter()
            .map(|o| o.total_ns)
            .collect();
        totals.sort_by(f64::total_cmp);
        let error = totals[3] / real - 1.0;
        eprintln!(
            "{prefix}: real {:.1} ms, replayed {:.1} ms ({:+.1} %)",
            real * 1e-6,
            totals[3] * 1e-6,
            error * 100.0
        );
        errors.push((prefix, error.abs()));
    }
    for (prefix, error) in errors
        .iter()
        .filter(|(p, _)| p.starts_with("rig-allreduce-1m"))
    {
        assert!(*error < 0.05, "{prefix}: {error}");
    }
    let mut all: Vec<f64> = errors.iter().map(|(_, e)| *e).collect();
    all.sort_by(f64::total_cmp);
    assert!(all[all.len() / 2] < 0.12, "median error: {errors:?}");
}

/// The library's defaults, replayed for 2000 calls of each key. Bounds per key, from the
/// replays (LD_PRELOAD.md, "Why these defaults"): within a few percent where the codelets differ
/// by a few percent (the rig's allreduce at 1 MiB: native, ring and rabenseifner within 1 %) or
/// where a barrier before each search call shows the winner (the rig's allgatherv and alltoall
/// at 1 MiB per rank, shared memory at 64 KiB; alltoall's linear_sync codelets run 1.2 to 1.3
/// times slower in production than in their samples, and without the runner-up's trial the
/// self-check reversed about half of those decisions: 1.143); shared memory at 1 MiB, where ring is 6 % faster
/// than native and no timing sees it (1.10); the 8-byte alltoall, where a call costs 0.3 us, the
/// search's own reductions (4.7 us each) are much of the regret, and native's tail of its own
/// (a mean of 0.6 us, twice the others') is rarely in the self-check's window, and do no harm
/// waits longer, its barriers and reductions weighed against calls shorter than they are; the
/// replay charges each checkpoint's reduction too, as the library pays it: five of them, 4 % of
/// the run (1.27); the rig's
/// 64 KiB alltoall, where native's tail makes it 1.6 times the best codelet, and a window's mean
/// shows it in about half of the runs (1.05); and the rig at
/// 64 KiB, where the oracle comes from one run whose network was faster (rabenseifner 280 us
/// instead of 830): every configuration of the grid replays at 1.18 to 1.34 there; the rig's
/// 8-byte allreduce, searched locally (`auto_timing_times_short_calls_locally`), where linear
/// is 2 % faster than recursive_doubling and 11 % than native in calls of 57 us (its runs
/// scaled to one level, `simulate::levels`; unscaled, recursive_doubling looked the best and
/// the regret was 1.136), and the search keeps linear in most replays (1.021) (1.05).
#[test]
fn the_default_settings_stay_within_what_the_data_allows() {
    let models = models();
    let bounds = [
        ("allreduce", 1 << 20, 4, 1.03),
        ("allreduce", 1 << 16, 4, 1.30),
        ("allgatherv", 4 << 20, 4, 1.05),
        ("alltoall", 4 << 20, 4, 1.05),
        ("allreduce", 1 << 20, 2, 1.12),
        ("allreduce", 1 << 16, 2, 1.04),
        ("alltoall", 16, 2, 1.30),
        ("alltoall", 1 << 18, 4, 1.12),
        ("allreduce", 8, 4, 1.05),
    ];
    for (op, bytes, ranks, bound) in bounds {
        let m = find(&models, op, bytes, ranks);
        let r = regret(m, &Settings::default(), 2000);
        eprintln!("{}: default regret {r:.3}", name(m));
        assert!(r <= bound, "{}: {r} > {bound}", name(m));
    }
}

/// On the rig, right after another codelet, allgatherv's ring costs 2.9 times a steady call (the
/// ranks arrive skewed and each step waits for the slowest) and native 0.7 times: timed locally
/// the search keeps native, 1.3 times slower than ring; after a barrier it finds ring. (Alltoall
/// is skewed alike, but less: local timing's regret is 1.09 there, barrier's 1.02.)
#[test]
fn barrier_timing_finds_what_local_timing_misses_on_the_rig() {
    let models = models();
    let m = find(&models, "allgatherv", 4 << 20, 4);
    assert_eq!(m.name(m.best().0), "ring");
    let (local, barrier) = local_and_barrier(m, 4);
    assert!(barrier < 1.05, "barrier {barrier}");
    assert!(local > barrier + 0.08, "local {local}, barrier {barrier}");
}

/// The regrets at 2000 calls of `attributes` with local timing (`local_samples` samples) and
/// with barrier timing (4 samples, the default), blocks of one.
fn local_and_barrier(m: &Model, local_samples: u32) -> (f64, f64) {
    let local = settings(Search::Attributes, Timing::Local, 1, local_samples);
    let barrier = settings(Search::Attributes, Timing::Barrier, 1, 4);
    (regret(m, &local, 2000), regret(m, &barrier, 2000))
}

/// A configuration searched whole: no budget cuts it short (what is compared is the search).
fn settings(search: Search, timing: Timing, block: u32, samples: u32) -> Settings {
    Settings {
        search,
        timing,
        auto_timing: false,
        block,
        samples,
        budget: 1.0,
        ..Settings::default()
    }
}

/// On shared memory at 64 KiB ring, rabenseifner and native have the same median call (9.5 us),
/// but ring is rarely slow (mean 10.0 us against 11.2 to 11.6): timed locally the three look
/// alike and the search keeps one of the slower; after a barrier ring's first calls are faster
/// (9.2 us against 9.8 to 10.3) and the search finds it (15 replays of 21 against 8). The
/// self-check's trial of a close race's runner-up then recovers most of what local timing lost
/// (regret 1.024 against 1.017 at 2000 calls; 1.028 against 1.014 before that trial, 1.11
/// against 1.01 before codelets far slower than the leader left after one round).
#[test]
fn local_timing_is_misled_where_barrier_timing_is_not() {
    let models = models();
    let m = find(&models, "allreduce", 1 << 16, 2);
    let local = settings(Search::Attributes, Timing::Local, 1, 8);
    let barrier = settings(Search::Attributes, Timing::Barrier, 1, 4);
    let found = |s: &Settings| {
        simulate::replays(m, s, 2000, REPLICAS)
            .iter()
            .filter(|o| o.searched_winner == Some(m.best().0))
            .count()
    };
    let (by_local, by_barrier) = (found(&local), found(&barrier));
    assert!(
        by_barrier >= by_local + 5,
        "searches that found ring: local {by_local}, barrier {by_barrier} of {REPLICAS}"
    );
    let (local, barrier) = local_and_barrier(m, 8);
    assert!(barrier < 1.03, "{barrier}");
    assert!(local > barrier, "local {local}, barrier {barrier}");
}

/// A long search (every codelet, four instances per sample, eight samples) costs more than it
/// can find where the codelets are close or calls are cheap. (Not on the rig at 64 KiB, where
/// rabenseifner, the best by a fifth, comes out of long searches more often than short ones.)
#[test]
fn a_long_search_costs_more_than_it_finds() {
    let models = models();
    let long = settings(Search::Brute, Timing::Local, 4, 8);
    for (op, bytes, ranks) in [("allreduce", 1 << 20, 4), ("alltoall", 16, 2)] {
        let m = find(&models, op, bytes, ranks);
        let (long, default) = (
            regret(m, &long, 2000),
            regret(m, &Settings::default(), 2000),
        );
        assert!(
            long > default + 0.03,
            "{}: long {long}, default {default}",
            name(m)
        );
    }
}

/// On the rig at 8 bytes a barrier takes 0.58 of native's call (its runs scaled to one level;
/// 0.77 unscaled): a barrier before each sample costs more than half the sample, and
/// COMMTUNE_TIMING=auto searches locally (`settings::LOCAL_TIMING_FROM`). Elsewhere in tests/data a barrier takes 0.17 of a call
/// (shared memory's 16-byte alltoall) or less, and auto is barrier timing.
#[test]
fn auto_timing_times_short_calls_locally() {
    let models = models();
    let auto = Settings::default();
    let barrier = auto.with_timing("barrier").unwrap();
    let local = auto.with_timing("local").unwrap();
    for m in &models {
        let over_call = m.barrier as f64 / m.cost(&m.codelets[0]);
        let short = m.op == "allreduce" && m.bytes == 8;
        assert_eq!(
            over_call >= LOCAL_TIMING_FROM,
            short,
            "{}: {over_call}",
            name(m)
        );
        let like = if short { &local } else { &barrier };
        assert_eq!(
            simulate::replays(m, &auto, 400, 3),
            simulate::replays(m, like, 400, 3),
            "{}",
            name(m)
        );
    }
    let m = find(&models, "allreduce", 8, 4);
    let (auto, barrier) = (regret(m, &auto, 400), regret(m, &barrier, 400));
    // 1.101 and 1.121 since trials are judged against the winner's windows around them.
    assert!(auto + 0.015 < barrier, "auto {auto}, barrier {barrier}");
}

#[test]
fn replays_are_deterministic() {
    let (a, b) = (models(), models());
    for (m, again) in a.iter().zip(&b) {
        let settings = Settings::default();
        let first: Vec<Outcome> = simulate::replays(m, &settings, 2000, 3);
        assert_eq!(
            first,
            simulate::replays(again, &settings, 2000, 3),
            "{}",
            name(m)
        );
    }
}
