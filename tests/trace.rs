//! COMMTUNE_TRACE: every rank writes every instance of its tuned calls, and the files say the
//! same thing on every rank (the same codelet for the same instance of a key), which the
//! simulator relies on (`commtune_tune::simulate`).

mod common;

use std::collections::BTreeMap;

use common::*;
use commtune_tune::trace::{self, Kind, Trace};

const ITERATIONS: u64 = 200;

fn traced(flavour: Flavour) {
    let dir = scratch(&format!("trace-{}", flavour.name()));
    let program = compile(flavour, "tuned_loop.c", &dir);
    let prefix = dir.join("t");
    run(flavour, 2, &program, &dir)
        .env("COMMTUNE_MODE", "tune")
        // Search as soon as warm: the trace must hold search instances.
        .env("COMMTUNE_BUDGET", "1")
        .env("COMMTUNE_TRACE", &prefix.to_string_lossy())
        .args(&[&ITERATIONS.to_string()])
        .go()
        .assert_success();
    let traces: Vec<Trace> = (0..2)
        .map(|rank| {
            let path = format!("{}.{rank}.tsv", prefix.display());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            trace::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect();
    // Per rank: key -> (k -> codelet), and the kinds seen.
    let mut seen: Vec<BTreeMap<u64, BTreeMap<u64, usize>>> = Vec::new();
    for (rank, t) in traces.iter().enumerate() {
        assert_eq!((t.rank as usize, t.ranks), (rank, 2));
        assert_eq!(t.dropped, 0);
        for op in ["allreduce", "alltoall", "allgatherv"] {
            let codelets = t.codelets_of(op).unwrap_or_else(|| panic!("{op} listed"));
            assert_eq!(codelets[0].name, "native");
        }
        // Every call of the three lines is traced, not one in eight.
        assert_eq!(t.records.len() as u64, 3 * ITERATIONS, "rank {rank}");
        let mut keys: BTreeMap<u64, BTreeMap<u64, usize>> = BTreeMap::new();
        for r in &t.records {
            assert!(r.start <= r.call_start && r.call_start <= r.end, "{r:?}");
            let previous = keys.entry(r.key).or_default().insert(r.k, r.codelet);
            assert!(previous.is_none(), "instance {} of {:x} twice", r.k, r.key);
        }
        assert_eq!(keys.len(), 3, "one key per line");
        for instances in keys.values() {
            let ks: Vec<u64> = instances.keys().copied().collect();
            assert_eq!(ks, (1..=ITERATIONS).collect::<Vec<_>>());
        }
        let kinds = |kind| t.records.iter().filter(|r| r.kind == kind).count();
        assert!(
            kinds(Kind::Warmup) >= 3 && kinds(Kind::Search) > 0,
            "rank {rank}"
        );
        assert!(kinds(Kind::Production) > 0, "rank {rank}: a key decided");
        seen.push(keys);
    }
    assert_eq!(
        seen[0], seen[1],
        "every rank ran the same codelet at each instance"
    );
}

#[test]
fn every_instance_is_traced_alike_on_every_rank_open_mpi() {
    traced(OpenMpi);
}

#[test]
fn every_instance_is_traced_alike_on_every_rank_mpich() {
    traced(Mpich);
}
