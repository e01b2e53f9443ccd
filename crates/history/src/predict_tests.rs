use super::*;
use crate::{Estimate, Platform};

fn entry(op: &str, comm_size: u32, bytes: u64, times: &[(&str, f64)]) -> Entry {
    Entry {
        op: op.to_string(),
        comm_size,
        ranks_per_node: Some(comm_size),
        size_class: String::new(),
        bytes,
        signature: String::new(),
        facts: String::new(),
        mpi: "Open MPI v4.1.4".to_string(),
        platform: Platform {
            host: "node#".to_string(),
            cpu: "cpu".to_string(),
            transport: "unknown".to_string(),
        },
        estimates: times
            .iter()
            .map(|&(codelet, us)| Estimate {
                codelet: codelet.to_string(),
                us,
                error_us: 0.1,
            })
            .collect(),
        winner: String::new(),
        time: 0,
        how: How::Search,
    }
}

/// A latency-bound codelet (`small`) against a bandwidth-bound one (`large`): they cross at
/// 40 000 bytes.
fn crossover(comm_size: u32, bytes: u64) -> Entry {
    let b = bytes as f64;
    entry(
        "allreduce",
        comm_size,
        bytes,
        &[("small", 10.0 + b * 1e-3), ("large", 30.0 + b * 5e-4)],
    )
}

/// Sizes 8 B to 4 MiB, one per power of two.
fn powers() -> impl Iterator<Item = u64> {
    (3..=22).map(|k| 1u64 << k)
}

fn any(_: &str) -> bool {
    true
}

fn problem(op: &str, comm_size: u32, bytes: u64) -> Problem<'_> {
    Problem {
        op,
        comm_size,
        bytes,
    }
}

#[test]
fn an_empty_store_predicts_nothing() {
    let knowledge = Knowledge::new(&[], 0.1);
    assert_eq!(knowledge.predict(&problem("allreduce", 4, 64), &any), None);
}

#[test]
fn unseen_sizes_on_either_side_of_a_crossover_get_the_right_winner() {
    let entries: Vec<Entry> = powers().map(|b| crossover(4, b)).collect();
    let knowledge = Knowledge::new(&entries, 0.1);
    for (bytes, winner) in [
        (100, "small"),
        (3000, "small"),
        (400_000, "large"),
        (3_000_000, "large"),
    ] {
        let p = knowledge
            .predict(&problem("allreduce", 4, bytes), &any)
            .expect("covered");
        assert_eq!(p.winner, winner, "{bytes} B");
        assert_ne!(p.predictor, Predictor::Map, "{bytes} B: {p:?}");
        let truth = crossover(4, bytes)
            .estimates
            .iter()
            .find(|e| e.codelet == winner)
            .unwrap()
            .us;
        assert!(
            (p.us / truth - 1.0).abs() < 0.25,
            "{bytes} B: {} us, truly {truth}",
            p.us
        );
    }
}
