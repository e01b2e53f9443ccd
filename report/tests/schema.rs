//! The report's JSON Schema (report.schema.json) against reports of every version: real ones
//! (tests/data: version 3 written by the bundled example under the tuner, version 2 the same
//! run as version 2 wrote it, version 1 as the first format did; version 5 the second run of
//! tests/programs/tuned_loop.c, predicted from the first's history; version 6 that of
//! tests/programs/skewed_loop.c, its predicted time from realised production; version 7 that of
//! tests/predict.rs's slower machine, its predictions kept or dismissed after a trial of native;
//! version 8 a run whose savings were measured against native's production calls; version 9
//! tests/predict.rs's winner slow only before its trial, kept after its window after the trial;
//! version 10 tests/programs/tuned_loop.c tuned with the defaults, 3000 iterations on 2 ranks of
//! shared memory, two keys searched with local timing under COMMTUNE_TIMING=auto; version 11 the
//! same, each self-check with its least rank's realised time)
//! and one made with every optional field present, so that a field added to the model and not to
//! the schema fails here (every object of the schema is closed).

use std::collections::BTreeMap;
use std::path::Path;

use commtune_report::{
    Aborted, Baseline, CodeletEstimate, Event, HistoryPrediction, HistorySource, KeyData, Location,
    Op, PredictionTrial, RankData, Report, SCHEMA, Saving, SelfCheck, SiteData, TuningData,
    VERSION, merge,
};
use serde_json::Value;

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema")
}

fn errors(report: &Value) -> Vec<String> {
    validator()
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn fixture(version: u32) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/version-{version}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A report with every field the model has, optional ones included.
fn full() -> Report {
    let tuning = TuningData {
        phase: "production".into(),
        reason: Some("search ended early: the call stopped repeating".into()),
        winner: Some("ring".into()),
        search_instances: 3,
        searches: 2,
        rounds: 1,
        codelets: vec![CodeletEstimate {
            name: "ring".into(),
            estimate_us: 5.0,
            error_us: 0.5,
        }],
        timeline: vec![
            Event::Search { call: 4, search: 1 },
            Event::Sample {
                call: 4,
                codelet: "ring".into(),
                us: 5.0,
            },
            Event::Decision {
                call: 5,
                winner: "ring".into(),
            },
            Event::Drift {
                call: 300,
                ratio: 1.1,
                reopened: false,
            },
        ],
        timeline_dropped: 1,
        saved_s: Some(0.5),
        saving: Some(Saving {
            replaced: "native".into(),
            replaced_us: 10.0,
            replaced_in: Baseline::Production,
            winner_us: 5.0,
            calls: 100,
            saved_s: 0.0005,
            low_s: 0.0004,
            high_s: 0.0006,
        }),
        check: Some(SelfCheck {
            predicted_us: 5.0,
            realised_us: 5.5,
            runner_up: Some("native".into()),
            runner_up_us: Some(10.0),
            runner_up_realised_us: Some(12.0),
            least_rank_us: Some(5.1),
            timing: "local".into(),
            verdict: "kept".into(),
        }),
        prediction: Some(HistoryPrediction {
            predictor: "vote".into(),
            from: vec![HistorySource {
                comm_size: 2,
                bytes: 64,
                how: "search".into(),
            }],
            winner: "ring".into(),
            predicted_us: 5.0,
            measured_us: Some(5.2),
            estimate_us: Some(4.5),
            pmax: 0.1,
            outcome: "kept".into(),
            saved_instances: 24,
            trial: Some(PredictionTrial {
                codelet: "native".into(),
                measured_us: 6.0,
                winner_after_us: Some(5.1),
            }),
        }),
        search_timing: Some("local".into()),
        collective_over_call: Some(0.8),
    };
    let key = |op: Op, rank: u32| KeyData {
        op,
        site: SiteData {
            id: op as u64,
            object: "/bin/app".into(),
            address: 0x10,
            python: None,
        },
        merge_key: "k".into(),
        signature: format!("messages of rank {rank}"),
        calls: 10,
        bytes: 80,
        timed: 5,
        measured_ns: 500,
        estimated_ns: 100,
        estimate_error_ns: 10,
        min_ns: 50,
        max_ns: 150,
        histogram: vec![(50, 2), (100, 2), (150, 1)],
        codelets: [("ring".to_string(), 10)].into(),
        unchanged: BTreeMap::new(),
        notes: vec!["a note".into()],
        tuning: Some(tuning.clone()),
        period_ns: Some(2000),
    };
    let ranks: Vec<RankData> = (0..2)
        .map(|rank| RankData {
            rank,
            host: format!("node{rank}"),
            run_ns: 1_000_000,
            keys: vec![key(Op::Halo, rank), key(Op::Allreduce, rank)],
        })
        .collect();
    merge(
        &ranks,
        "Test MPI",
        3,
        Some(Aborted { rank: 1, code: 2 }),
        |_| Location {
            text: "a.c:3 (main)".into(),
            file: Some("a.c".into()),
            line: Some(3),
            function: Some("main".into()),
        },
    )
}

#[test]
fn a_report_with_every_field_matches() {
    let report = serde_json::to_value(full()).unwrap();
    // Every optional field is there: the test covers them.
    let halo = &report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["op"] == "halo")
        .unwrap();
    for path in ["/share_in_calls", "/aborted", "/ranks/1/host"] {
        assert!(report.pointer(path).is_some(), "{path}");
    }
    for path in [
        "/notes",
        "/tuning/saving",
        "/tuning/saved_s",
        "/tuning/check/runner_up",
        "/tuning/timeline/3/ratio",
        "/tuning/timeline_dropped",
        "/period_us",
        "/ranks/time_by_rank_s/1",
        "/rank_signatures/1",
        "/time/timed_calls",
    ] {
        assert!(halo.pointer(path).is_some(), "{path}");
    }
    assert_eq!(report["version"], VERSION);
    assert_eq!(errors(&report), Vec::<String>::new());
}

#[test]
fn reports_of_every_version_match_and_read() {
    for version in 1..=VERSION {
        let report = fixture(version);
        assert_eq!(report["version"], version);
        assert_eq!(errors(&report), Vec::<String>::new(), "version {version}");
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/data/version-{version}.json"));
        let read = commtune_report::read(&path).expect("readable");
        assert!(!commtune_report::html(&read).is_empty());
    }
}

#[test]
fn the_schema_rejects_what_is_not_a_report() {
    let good = serde_json::to_value(full()).unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut r = good.clone();
        edit(&mut r);
        errors(&r)
    };
    // A field the schema does not know, at the top and deep down.
    assert!(!broken(&|r| r["extra"] = 1.into()).is_empty());
    assert!(!broken(&|r| r["sites"][0]["tuning"]["timeline"][0]["extra"] = 1.into()).is_empty());
    // A later version, an unknown operation, a share above one, a missing field.
    assert!(!broken(&|r| r["version"] = (VERSION + 1).into()).is_empty());
    assert!(!broken(&|r| r["sites"][0]["op"] = "bcast".into()).is_empty());
    assert!(!broken(&|r| r["sites"][0]["time"]["share"] = 1.5.into()).is_empty());
    assert!(
        !broken(&|r| {
            r["sites"][0].as_object_mut().unwrap().remove("calls");
        })
        .is_empty()
    );
    assert!(
        !broken(&|r| r["sites"][0]["tuning"]["timeline"][0]["event"] = "nap".into()).is_empty()
    );
}
