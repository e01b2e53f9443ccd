//! TEMPORARY stand-in for "map"'s prediction (same API), replaced by their predict.rs at merge.

use crate::{Entry, How, Platform};

pub struct Problem<'a> {
    pub op: &'a str,
    pub comm_size: u32,
    pub bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Predictor {
    Closest,
    Vote,
    Map,
}

#[derive(Clone, PartialEq, Debug)]
pub struct Source {
    pub comm_size: u32,
    pub bytes: u64,
    pub how: How,
}

#[derive(Clone, PartialEq, Debug)]
pub struct Predicted {
    pub winner: String,
    pub us: f64,
    pub predictor: Predictor,
    pub from: Vec<Source>,
}

pub struct Knowledge {
    entries: Vec<Entry>,
}

impl Knowledge {
    pub fn new(entries: &[Entry], _pmax: f64) -> Knowledge {
        Knowledge {
            entries: entries.to_vec(),
        }
    }

    pub fn add(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    pub fn predict(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<Predicted> {
        let distance =
            |e: &Entry| ((e.bytes.max(1) as f64).ln() - (problem.bytes.max(1) as f64).ln()).abs();
        let best = self
            .entries
            .iter()
            .filter(|e| {
                e.op == problem.op && e.comm_size == problem.comm_size && applicable(&e.winner)
            })
            .filter(|e| distance(e) <= 4.2)
            .min_by(|a, b| {
                distance(a)
                    .total_cmp(&distance(b))
                    .then(a.time.cmp(&b.time))
            })?;
        Some(Predicted {
            winner: best.winner.clone(),
            us: best.winner_estimate()?.us,
            predictor: Predictor::Closest,
            from: vec![Source {
                comm_size: best.comm_size,
                bytes: best.bytes,
                how: best.how,
            }],
        })
    }
}

pub fn compatible(entry: &Entry, mpi: &str, platform: &Platform) -> bool {
    entry.mpi == mpi && entry.platform == *platform
}
