//! Synthetic entries for the unit tests of the prediction and the map.

use crate::{Entry, Estimate, How, Platform};

pub fn entry(op: &str, comm_size: u32, bytes: u64, times: &[(&str, f64)]) -> Entry {
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
        timing: Some("local".to_string()),
        reopened_from: None,
        realised_us: None,
        winner: String::new(),
        replaced: None,
        time: 0,
        how: How::Search,
    }
}

/// A latency-bound codelet (`small`) against a bandwidth-bound one (`large`): they cross at
/// 40 000 bytes.
pub fn crossover(comm_size: u32, bytes: u64) -> Entry {
    let b = bytes as f64;
    entry(
        "allreduce",
        comm_size,
        bytes,
        &[("small", 10.0 + b * 1e-3), ("large", 30.0 + b * 5e-4)],
    )
}

/// Sizes 8 B to 4 MiB, one per power of two.
pub fn powers() -> impl Iterator<Item = u64> {
    (3..=22).map(|k| 1u64 << k)
}

/// A deterministic pseudo-random sequence in [0, 1) (no dependency for the tests' noise).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}
