//! Prediction from the history: which codelet a problem never searched in this job should start
//! with, and how long a call of it should take. Pure: no MPI.
//!
//! ADCL's historic learning (Gabriel et al., "Incorporating historic knowledge into a
//! communication library for self-optimizing HPC"): the entries of the store are merged into
//! one measured problem per (operation, communicator size, bytes); each problem gets a *reach*,
//! the largest distance within which its winner stays within `pmax` of the best of every other
//! problem of its operation it covers; a new problem is predicted from the problems whose reach
//! covers it, either the closest one (`Predictor::Closest`) or a 1/distance-weighted vote
//! (`Predictor::Vote`). Where nothing covers it, the decision map (`crate::map`) answers
//! (`Predictor::Map`).
//!
//! Distance, within one operation: `sqrt(dx² + (COMM_WEIGHT·dy)²)` with `dx` the difference of
//! log2 bytes and `dy` that of log2 communicator size. A doubling of the communicator weighs as
//! much as a quadrupling of the message: an algorithm's step count (its latency term) changes
//! with the communicator, and whether the size is a power of two changes which algorithms apply
//! at all, while along the message size costs change smoothly from latency- to bandwidth-bound.
//!
//! Everything here is a function of the set of entries, never of their order (the entries are
//! sorted; ties break by communicator size, bytes, then codelet name), so that ranks that read
//! the same store reach the same answer, bit for bit.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use crate::map::Map;
use crate::{Entry, How, Platform};

/// The problem a prediction is for.
pub struct Problem<'a> {
    pub op: &'a str,
    pub comm_size: u32,
    pub bytes: u64,
}

/// Which rule chose a prediction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Predictor {
    /// The closest measured problem whose reach covers the problem.
    Closest,
    /// A 1/distance-weighted vote of the measured problems whose reach covers the problem.
    Vote,
    /// No measured problem covers it: the decision map of the operation.
    Map,
}

impl Predictor {
    pub fn name(self) -> &'static str {
        match self {
            Predictor::Closest => "closest",
            Predictor::Vote => "vote",
            Predictor::Map => "map",
        }
    }
}

/// A measured problem a prediction came from.
#[derive(Clone, PartialEq, Debug)]
pub struct Source {
    pub comm_size: u32,
    pub bytes: u64,
    pub how: How,
}

/// A predicted winner and its predicted time per call.
#[derive(Clone, PartialEq, Debug)]
pub struct Predicted {
    pub winner: String,
    pub us: f64,
    pub predictor: Predictor,
    /// For `Closest` and `Vote`: the covering problems that chose the winner, closest first; for
    /// `Map`: the problems the predicted time was read from.
    pub from: Vec<Source>,
}

/// How much a doubling of the communicator weighs against a doubling of the message (see the
/// module's documentation).
pub const COMM_WEIGHT: f64 = 2.0;

/// No problem reaches farther than this distance (8× the message at one communicator size):
/// beyond, the history says little, and the bound keeps the analysis and the lookups local.
pub const MAX_REACH: f64 = 3.0;

/// The analysis of a problem's reach looks at no more than this many nearest neighbours, so that
/// it costs O(n log n) over a store however dense.
pub const NEIGHBOURS: usize = 32;

/// The predictor `Knowledge::predict` uses for covered problems (see `commtune map` for the
/// evaluation that chose it).
pub const DEFAULT_PREDICTOR: Predictor = Predictor::Closest;

/// One problem of the history: every entry of one (operation, communicator size, bytes) merged.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub op: String,
    pub comm_size: u32,
    pub bytes: u64,
    /// Per codelet the median of the jobs' estimates (us per call), by codelet name.
    pub times: Vec<(String, f64)>,
    /// The strongest way the problem was measured (calibrate, then search, then a confirmed
    /// prediction).
    pub how: How,
    /// Every job's estimate per codelet, by codelet name then time: what `times` is the median of.
    samples: Vec<(String, Vec<f64>)>,
}

impl Measured {
    /// The median time of `codelet`, if some job measured it.
    pub fn time(&self, codelet: &str) -> Option<f64> {
        self.times
            .binary_search_by(|(c, _)| c.as_str().cmp(codelet))
            .ok()
            .map(|i| self.times[i].1)
    }

    /// The fastest codelet (ties: the first by name) and its time.
    pub fn best(&self) -> (&str, f64) {
        let mut best = (self.times[0].0.as_str(), self.times[0].1);
        for (codelet, us) in &self.times[1..] {
            if *us < best.1 {
                best = (codelet, *us);
            }
        }
        best
    }

    /// How much slower `codelet` is here than the best (0.1: 10 %), if it was measured.
    pub fn penalty(&self, codelet: &str) -> Option<f64> {
        Some(self.time(codelet)? / self.best().1 - 1.0)
    }

    fn x(&self) -> f64 {
        log2(self.bytes)
    }

    fn y(&self) -> f64 {
        log2(u64::from(self.comm_size))
    }

    fn source(&self) -> Source {
        Source {
            comm_size: self.comm_size,
            bytes: self.bytes,
            how: self.how,
        }
    }

    /// Adds one job's estimates and recomputes the medians.
    fn absorb(&mut self, entry: &Entry) {
        for e in &entry.estimates {
            if !(e.us.is_finite() && e.us > 0.0) {
                continue;
            }
            match self.samples.binary_search_by(|(c, _)| c.cmp(&e.codelet)) {
                Ok(i) => {
                    let times = &mut self.samples[i].1;
                    let at = times.partition_point(|t| t.total_cmp(&e.us).is_lt());
                    times.insert(at, e.us);
                }
                Err(i) => self.samples.insert(i, (e.codelet.clone(), vec![e.us])),
            }
        }
        self.how = strongest(self.how, entry.how);
        self.times = self
            .samples
            .iter()
            .map(|(c, times)| (c.clone(), median(times)))
            .collect();
    }
}

fn log2(n: u64) -> f64 {
    (n.max(1) as f64).log2()
}

/// The median of sorted times.
fn median(sorted: &[f64]) -> f64 {
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

fn strongest(a: How, b: How) -> How {
    let rank = |h: How| match h {
        How::Calibrate => 2,
        How::Search => 1,
        How::PredictionConfirmed => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The entries merged into one problem per (operation, communicator size, bytes), sorted by
/// them; per codelet the median of the jobs' estimates. Entries without a usable estimate are
/// left out.
pub fn merge(entries: &[Entry]) -> Vec<Measured> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| key(a).cmp(&key(b)));
    let mut merged: Vec<Measured> = Vec::new();
    for entry in sorted {
        let same = |last: &Measured| (last.op.as_str(), last.comm_size, last.bytes) == key(entry);
        if !merged.last().is_some_and(same) {
            merged.push(blank(entry));
        }
        merged.last_mut().expect("pushed").absorb(entry);
    }
    merged.retain(|m| !m.times.is_empty());
    merged
}

fn key(entry: &Entry) -> (&str, u32, u64) {
    (entry.op.as_str(), entry.comm_size, entry.bytes)
}

fn blank(entry: &Entry) -> Measured {
    Measured {
        op: entry.op.clone(),
        comm_size: entry.comm_size,
        bytes: entry.bytes,
        times: Vec::new(),
        how: entry.how,
        samples: Vec::new(),
    }
}

/// Whether an entry was measured with the same MPI library (version string) and platform.
pub fn compatible(entry: &Entry, mpi: &str, platform: &Platform) -> bool {
    entry.mpi == mpi && entry.platform == *platform
}

/// A measured problem with its analysis.
#[derive(Clone, Debug)]
struct Point {
    measured: Measured,
    x: f64,
    y: f64,
    /// The fastest codelet.
    winner: String,
    /// How far from the problem its winner is still within `pmax` of the best (ADCL's maximum
    /// distance); 0: identical problems only.
    reach: f64,
}

/// The problems of one communicator size: a run of `Operation::points`, by bytes.
#[derive(Clone, Debug)]
struct Group {
    comm_size: u32,
    y: f64,
    start: usize,
    end: usize,
    /// The largest reach of its problems: how far a lookup must search the group.
    max_reach: f64,
}

/// The measured problems of one operation, by communicator size then bytes.
#[derive(Clone, Debug, Default)]
struct Operation {
    points: Vec<Point>,
    groups: Vec<Group>,
}

fn distance(x0: f64, y0: f64, x1: f64, y1: f64) -> f64 {
    let (dx, dy) = (x1 - x0, COMM_WEIGHT * (y1 - y0));
    (dx * dx + dy * dy).sqrt()
}

/// A neighbour met in a walk outward from a point: ordered by distance, then by index (the
/// problems' order), so that walks are deterministic.
#[derive(PartialEq)]
struct Near {
    distance: f64,
    index: usize,
    /// The group and the direction (-1 down, +1 up) the walk came from.
    group: usize,
    step: isize,
}

impl Eq for Near {}

impl Ord for Near {
    fn cmp(&self, other: &Near) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Near) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The problems of an operation in order of distance from (x, y), up to `radius`.
struct Walk<'a> {
    operation: &'a Operation,
    x: f64,
    y: f64,
    radius: f64,
    heap: BinaryHeap<Reverse<Near>>,
}

impl<'a> Walk<'a> {
    fn new(operation: &'a Operation, x: f64, y: f64, radius: f64) -> Walk<'a> {
        let mut walk = Walk {
            operation,
            x,
            y,
            radius,
            heap: BinaryHeap::new(),
        };
        for (g, group) in operation.groups.iter().enumerate() {
            if COMM_WEIGHT * (group.y - y).abs() > radius {
                continue;
            }
            let points = &operation.points[group.start..group.end];
            let at = group.start + points.partition_point(|p| p.x < x);
            if at > group.start {
                walk.push(g, at - 1, -1);
            }
            if at < group.end {
                walk.push(g, at, 1);
            }
        }
        walk
    }

    fn push(&mut self, group: usize, index: usize, step: isize) {
        let p = &self.operation.points[index];
        let distance = distance(self.x, self.y, p.x, p.y);
        if distance <= self.radius {
            self.heap.push(Reverse(Near {
                distance,
                index,
                group,
                step,
            }));
        }
    }
}

impl Iterator for Walk<'_> {
    type Item = (f64, usize);

    fn next(&mut self) -> Option<(f64, usize)> {
        let Reverse(near) = self.heap.pop()?;
        let group = &self.operation.groups[near.group];
        let next = near.index as isize + near.step;
        if next >= group.start as isize && next < group.end as isize {
            self.push(near.group, next as usize, near.step);
        }
        Some((near.distance, near.index))
    }
}

impl Operation {
    fn new(measured: Vec<Measured>, pmax: f64) -> Operation {
        let mut operation = Operation {
            points: measured.into_iter().map(point).collect(),
            groups: Vec::new(),
        };
        operation.regroup();
        for i in 0..operation.points.len() {
            operation.points[i].reach = operation.reach(i, pmax);
        }
        operation.update_max_reach();
        operation
    }

    fn regroup(&mut self) {
        self.groups.clear();
        for (i, p) in self.points.iter().enumerate() {
            match self.groups.last_mut() {
                Some(g) if g.comm_size == p.measured.comm_size => g.end = i + 1,
                _ => self.groups.push(Group {
                    comm_size: p.measured.comm_size,
                    y: p.y,
                    start: i,
                    end: i + 1,
                    max_reach: 0.0,
                }),
            }
        }
    }

    fn update_max_reach(&mut self) {
        for g in &mut self.groups {
            g.max_reach = self.points[g.start..g.end]
                .iter()
                .map(|p| p.reach)
                .fold(0.0, f64::max);
        }
    }

    /// ADCL's maximum distance of problem `i`: walking outward, the distance of the last
    /// neighbour where its winner is within `pmax` of the best before the first where it is not.
    /// A neighbour that did not measure the winner neither confirms nor refutes it; neighbours at
    /// the same distance as a refuting one do not count.
    fn reach(&self, i: usize, pmax: f64) -> f64 {
        let p = &self.points[i];
        let mut reach = 0.0;
        let mut level: Option<f64> = None;
        let walk = Walk::new(self, p.x, p.y, MAX_REACH).filter(|&(_, j)| j != i);
        for (d, j) in walk.take(NEIGHBOURS) {
            let Some(penalty) = self.points[j].measured.penalty(&p.winner) else {
                continue;
            };
            if let Some(l) = level
                && d > l
            {
                reach = l;
            }
            if penalty > pmax {
                level = None;
                break;
            }
            level = Some(d);
        }
        level.map_or(reach, |l| l)
    }

    /// The problems whose reach covers (x, y) and whose winner is applicable, with their
    /// distance, by index.
    fn covering(&self, x: f64, y: f64, applicable: &dyn Fn(&str) -> bool) -> Vec<(f64, usize)> {
        let mut found = Vec::new();
        for group in &self.groups {
            let dy = COMM_WEIGHT * (group.y - y).abs();
            if dy > group.max_reach {
                continue;
            }
            let dx = (group.max_reach * group.max_reach - dy * dy).sqrt();
            let points = &self.points[group.start..group.end];
            let from = points.partition_point(|p| p.x < x - dx);
            let to = points.partition_point(|p| p.x <= x + dx);
            for (k, p) in points[from..to].iter().enumerate() {
                let d = distance(x, y, p.x, p.y);
                if d <= p.reach && applicable(&p.winner) {
                    found.push((d, group.start + from + k));
                }
            }
        }
        found
    }

    /// `codelet`'s time at (comm_size, bytes), log-log interpolated between the nearest sizes of
    /// the same communicator size that measured it on both sides (or the same size), with the
    /// problems it was read from; None when it was not measured on both sides.
    fn interpolated(&self, comm_size: u32, bytes: u64, codelet: &str) -> Option<(f64, Vec<usize>)> {
        let g = self
            .groups
            .binary_search_by(|g| g.comm_size.cmp(&comm_size))
            .ok()?;
        let group = &self.groups[g];
        let at = group.start
            + self.points[group.start..group.end].partition_point(|p| p.measured.bytes < bytes);
        let measures = |j: &usize| self.points[*j].measured.time(codelet).is_some();
        let above = (at..group.end).find(measures)?;
        let time = |j: usize| self.points[j].measured.time(codelet).expect("measured");
        if self.points[above].measured.bytes == bytes {
            return Some((time(above), vec![above]));
        }
        let below = (group.start..at).rev().find(measures)?;
        let (x0, x1) = (self.points[below].x, self.points[above].x);
        let (t0, t1) = (time(below).ln(), time(above).ln());
        let t = t0 + (t1 - t0) * (log2(bytes) - x0) / (x1 - x0);
        Some((t.exp(), vec![below, above]))
    }

    /// The nearest problem of the operation that measured `codelet`.
    fn nearest_measuring(&self, x: f64, y: f64, codelet: &str) -> Option<usize> {
        Walk::new(self, x, y, f64::INFINITY)
            .map(|(_, j)| j)
            .find(|&j| self.points[j].measured.time(codelet).is_some())
    }

    fn sources(&self, indices: &[usize]) -> Vec<Source> {
        indices
            .iter()
            .map(|&j| self.points[j].measured.source())
            .collect()
    }

    fn measured(&self) -> impl Iterator<Item = &Measured> {
        self.points.iter().map(|p| &p.measured)
    }
}

fn point(measured: Measured) -> Point {
    let winner = measured.best().0.to_string();
    Point {
        x: measured.x(),
        y: measured.y(),
        winner,
        reach: 0.0,
        measured,
    }
}

/// What the history knows, analysed for prediction.
#[derive(Clone, Debug)]
pub struct Knowledge {
    pmax: f64,
    operations: BTreeMap<String, Operation>,
    map: Map,
}

impl Knowledge {
    /// `entries`: already filtered to this job's MPI library and platform (see `compatible`).
    pub fn new(entries: &[Entry], pmax: f64) -> Knowledge {
        Knowledge::from_measured(merge(entries), pmax)
    }

    /// From problems already merged (`merge`).
    pub fn from_measured(measured: Vec<Measured>, pmax: f64) -> Knowledge {
        let map = Map::new(&measured, pmax);
        let mut operations: BTreeMap<String, Vec<Measured>> = BTreeMap::new();
        for m in measured {
            operations.entry(m.op.clone()).or_default().push(m);
        }
        let operations = operations
            .into_iter()
            .map(|(op, measured)| (op, Operation::new(measured, pmax)))
            .collect();
        Knowledge {
            pmax,
            operations,
            map,
        }
    }

    /// A decision taken in this run (cheap enough to call at every decision).
    pub fn add(&mut self, entry: Entry) {
        let op = self.operations.entry(entry.op.clone()).or_default();
        let at = op.points.partition_point(|p| {
            (p.measured.comm_size, p.measured.bytes) < (entry.comm_size, entry.bytes)
        });
        let existing = op.points.get(at).is_some_and(|p| {
            (p.measured.comm_size, p.measured.bytes) == (entry.comm_size, entry.bytes)
        });
        if existing {
            let mut measured = op.points[at].measured.clone();
            measured.absorb(&entry);
            op.points[at] = point(measured);
        } else {
            let mut measured = blank(&entry);
            measured.absorb(&entry);
            if measured.times.is_empty() {
                return;
            }
            op.points.insert(at, point(measured));
            op.regroup();
        }
        // Only the problems within MAX_REACH of the new one can see it in their analysis.
        let (x, y) = (op.points[at].x, op.points[at].y);
        let near: Vec<usize> = Walk::new(op, x, y, MAX_REACH).map(|(_, j)| j).collect();
        for j in near {
            op.points[j].reach = op.reach(j, self.pmax);
        }
        op.update_max_reach();
        let measured: Vec<&Measured> = op.measured().collect();
        self.map.rebuild(&entry.op, &measured, self.pmax);
    }

    /// The predicted winner among the codelets for which `applicable` holds, with its predicted
    /// time per call in microseconds; None when nothing in the history is close enough (ADCL's
    /// max distance) and the decision map has no answer either.
    pub fn predict(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<Predicted> {
        self.predict_with(problem, applicable, DEFAULT_PREDICTOR)
    }

    /// `predict` with the given predictor for covered problems (`Predictor::Map`: the map only).
    pub fn predict_with(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
        predictor: Predictor,
    ) -> Option<Predicted> {
        let op = self.operations.get(problem.op)?;
        let (x, y) = (log2(problem.bytes), log2(u64::from(problem.comm_size)));
        let covering = match predictor {
            Predictor::Map => Vec::new(),
            _ => op.covering(x, y, applicable),
        };
        let chosen = match predictor {
            _ if covering.is_empty() => None,
            Predictor::Closest => closest(op, &covering),
            Predictor::Vote => vote(op, &covering),
            Predictor::Map => None,
        };
        if let Some((winner, from)) = chosen {
            let (us, _) = op
                .interpolated(problem.comm_size, problem.bytes, &winner)
                .or_else(|| {
                    let j = from
                        .iter()
                        .copied()
                        .find(|&j| op.points[j].measured.time(&winner).is_some())?;
                    Some((op.points[j].measured.time(&winner)?, vec![j]))
                })?;
            return Some(Predicted {
                winner,
                us,
                predictor,
                from: op.sources(&from),
            });
        }
        let winner = self
            .map
            .decide(problem.op, problem.comm_size, problem.bytes, applicable)?
            .to_string();
        let (us, from) = op
            .interpolated(problem.comm_size, problem.bytes, &winner)
            .or_else(|| {
                let j = op.nearest_measuring(x, y, &winner)?;
                Some((op.points[j].measured.time(&winner)?, vec![j]))
            })?;
        Some(Predicted {
            winner,
            us,
            predictor: Predictor::Map,
            from: op.sources(&from),
        })
    }

    /// The decision map the prediction falls back to.
    pub fn map(&self) -> &Map {
        &self.map
    }
}

/// The closest covering problem's winner (ties: the first problem).
fn closest(op: &Operation, covering: &[(f64, usize)]) -> Option<(String, Vec<usize>)> {
    let &(_, j) = covering
        .iter()
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?;
    Some((op.points[j].winner.clone(), vec![j]))
}

/// The winner with the most 1/distance weight among the covering problems (a problem at
/// distance 0 decides alone; ties: the first codelet by name), and the problems that chose it,
/// closest first.
fn vote(op: &Operation, covering: &[(f64, usize)]) -> Option<(String, Vec<usize>)> {
    let mut by_distance = covering.to_vec();
    by_distance.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if by_distance.first()?.0 == 0.0 {
        return closest(op, &by_distance);
    }
    let mut weights: BTreeMap<&str, f64> = BTreeMap::new();
    for &(d, j) in &by_distance {
        *weights.entry(op.points[j].winner.as_str()).or_default() += 1.0 / d;
    }
    let mut winner: Option<(&str, f64)> = None;
    for (codelet, w) in weights {
        if winner.is_none_or(|(_, best)| w > best) {
            winner = Some((codelet, w));
        }
    }
    let winner = winner?.0.to_string();
    let from = by_distance
        .iter()
        .filter(|(_, j)| op.points[*j].winner == winner)
        .map(|&(_, j)| j)
        .collect();
    Some((winner, from))
}

#[cfg(test)]
#[path = "predict_tests.rs"]
mod tests;
