//! Prediction from the history: which codelet a problem never searched in this job should start
//! with, and how long a call of it should take. Pure: no MPI.
//!
//! ADCL's historic learning (Gabriel et al., "Incorporating historic knowledge into a
//! communication library for self-optimizing HPC"): the entries of the store are merged into
//! one measured problem per (operation, communicator size, bytes); each problem gets a *reach*,
//! the largest distance within which its winner stays within `pmax` of the best of every other
//! problem of its operation it covers; a new problem is predicted from the problems whose reach
//! covers it, either the closest one (`Predictor::Closest`) or a 1/distance-weighted vote
//! (`Predictor::Vote`); or, where something covers it, from the codelets' measured times around
//! it fitted along the message size (`Predictor::Fit`, after Brunet et al.'s interpolation of
//! sampled costs), which sees a crossover between neighbours that all chose one side of it.
//! Where nothing covers it, the decision map (`crate::map`) answers (`Predictor::Map`).
//!
//! Distance, within one operation: `sqrt(dx² + (COMM_WEIGHT·dy)²)` with `dx` the difference of
//! log2 bytes and `dy` that of log2 communicator size. A doubling of the communicator weighs as
//! much as 16 times the message: an algorithm's step count (its latency term) changes with the
//! communicator, and whether the size is a power of two changes which algorithms apply at all,
//! while along the message size costs change smoothly from latency- to bandwidth-bound. On a
//! real store (40 sizes × 3 operations at 2, 3 and 4 ranks) weights 4 and 8 predicted 2 points
//! more problems within 10 % than 2, and 10 more than 1.
//!
//! Everything here is a function of the set of entries, never of their order (the entries are
//! sorted; ties break by communicator size, bytes, then codelet name), so that ranks that read
//! the same store reach the same answer, bit for bit.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use crate::map::{self, Map};
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
    /// Where a measured problem covers the problem: the codelet with the least time as a local
    /// fit of every codelet's measured times along the message size predicts it (Brunet et al.
    /// interpolate samples; the fit also averages out a noisy one), else the vote; the same
    /// problem, measured, decides alone.
    Fit,
    /// No measured problem covers it: the decision map of the operation.
    Map,
}

impl Predictor {
    pub fn name(self) -> &'static str {
        match self {
            Predictor::Closest => "closest",
            Predictor::Vote => "vote",
            Predictor::Fit => "fit",
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

/// What a predicted time per call was read from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Basis {
    /// The searches' estimates: no source recorded the winner's realised production time.
    Estimates,
    /// The estimates scaled by how much longer the winner took in the sources' production than
    /// their searches estimated (`Entry::realised_us`).
    Realised,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Estimates => "search estimates",
            Basis::Realised => "realised production",
        }
    }
}

/// A predicted winner and its predicted time per call.
#[derive(Clone, PartialEq, Debug)]
pub struct Predicted {
    pub winner: String,
    /// The time per call production should take (what the safety net measures).
    pub us: f64,
    /// The same time as the searches estimate it (`us` when `basis` is `Estimates`).
    pub estimate_us: f64,
    pub basis: Basis,
    pub predictor: Predictor,
    /// For `Closest` and `Vote`: the covering problems that chose the winner, closest first; for
    /// `Fit`: the problems of the fit, by bytes; for `Map`: the problems the predicted time was
    /// read from.
    pub from: Vec<Source>,
    /// The timing both times were measured with when it is not the job's (`Knowledge::
    /// with_other_timings`): the safety net must measure production the same way, and a search
    /// after it use it too. None: the job's.
    pub timing: Option<String>,
    /// The applicable codelet other than the winner with the least time at the problem
    /// (interpolated as the winner's is, else read where the winner's was; for a decision of
    /// another timing, its entry's least other estimate): what the safety net tries when a
    /// predicted `native` misses its time, so that a slower machine alone does not bring a
    /// search. None where no other applicable codelet has a time there.
    pub runner_up: Option<String>,
}

/// How much a doubling of the communicator weighs against a doubling of the message (see the
/// module's documentation).
pub const COMM_WEIGHT: f64 = 4.0;

/// The width, in octaves of the message size, of the weights of `Predictor::Fit` (the standard
/// deviation of a Gaussian): chosen on one store family (Open MPI, 2 ranks on shared memory, three
/// calibrations of 40 sizes × 3 operations; leave-one-out within 10 %, mean over the three):
/// 95.7 % at 0.15, 96.2 % at 0.25, 96.3 % at 0.35, 95.3 % at 0.5, 95.5 % at 0.75. The other
/// stores were only measured with it.
pub const FIT_WIDTH: f64 = 0.35;

/// The fit of `Predictor::Fit` reads at most this many measured sizes on either side (at the
/// calibrations' densest, a quarter octave apart, the whole window), so that it stays cheap
/// however dense a store.
pub const FIT_SIDE: usize = 6;

/// No problem reaches farther than this distance (8× the message at one communicator size):
/// beyond, the history says little, and the bound keeps the analysis and the lookups local.
pub const MAX_REACH: f64 = 3.0;

/// The analysis of a problem's reach looks at no more than this many nearest neighbours, so that
/// it costs O(n log n) over a store however dense.
pub const NEIGHBOURS: usize = 32;

/// The predictor `Knowledge::predict` uses for covered problems. The fit: leave-one-out
/// (`commtune map`) over 13 calibrations of 40 sizes × 3 operations (2 ranks on shared memory,
/// Open MPI and MPICH, 8 to 32 samples per codelet; 4 hosts over TCP), it predicted as many
/// problems within 10 % as the vote or more on 11 (up to 2.7 points more), 1.4 and 1.5 points
/// fewer on two; within 5 %, more on 10. Unlike the vote, it weighs how much faster a codelet
/// is, not only which one won.
pub const DEFAULT_PREDICTOR: Predictor = Predictor::Fit;

/// One problem of the history: every entry of one (operation, communicator size, bytes) merged.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub op: String,
    pub comm_size: u32,
    pub bytes: u64,
    /// Per codelet the median of the jobs' estimates (us per call), by codelet name; never
    /// empty.
    pub times: Vec<(String, f64)>,
    /// The strongest way the problem was measured (calibrate, then search, then a confirmed
    /// prediction).
    pub how: How,
    /// The index in `times` of the fastest codelet (ties: the first by name).
    best: usize,
    /// Every job's estimates of each codelet of `times`, sorted: what the medians are of.
    samples: Vec<Vec<f64>>,
    /// Per codelet of `times`, sorted: the realised production time over the estimate of every
    /// job where it won and production measured it (`Entry::realised_ratio`).
    ratios: Vec<Vec<f64>>,
    /// The decisions (entries' winners) of the jobs that searched or calibrated the problem,
    /// sorted (`decision`).
    decisions: Vec<String>,
}

impl Measured {
    /// Merges the estimates of one problem, `(codelet, us)` in any order, the realised ratios
    /// of its winners, `(codelet, ratio)`, and the jobs' decisions; None without a usable
    /// estimate (finite and positive). A ratio of a codelet without an estimate is left out.
    fn new(
        op: &str,
        comm_size: u32,
        bytes: u64,
        how: How,
        mut estimates: Vec<(&str, f64)>,
        mut ratios: Vec<(&str, f64)>,
        decisions: Vec<&str>,
    ) -> Option<Measured> {
        estimates.retain(|(_, us)| us.is_finite() && *us > 0.0);
        estimates.sort_by(|a, b| a.0.cmp(b.0).then(a.1.total_cmp(&b.1)));
        ratios.sort_by(|a, b| a.0.cmp(b.0).then(a.1.total_cmp(&b.1)));
        let mut times = Vec::new();
        let mut samples = Vec::new();
        let mut realised = Vec::new();
        for run in estimates.chunk_by(|a, b| a.0 == b.0) {
            let codelet = run[0].0;
            let sorted: Vec<f64> = run.iter().map(|e| e.1).collect();
            times.push((codelet.to_string(), median(&sorted)));
            samples.push(sorted);
            let of = |r: &&(&str, f64)| r.0 == codelet;
            realised.push(ratios.iter().filter(of).map(|r| r.1).collect());
        }
        let mut best = 0;
        for (i, (_, us)) in times.iter().enumerate() {
            if *us < times[best].1 {
                best = i;
            }
        }
        (!times.is_empty()).then(|| Measured {
            op: op.to_string(),
            comm_size,
            bytes,
            times,
            how,
            best,
            samples,
            ratios: realised,
            decisions: {
                let mut decisions: Vec<String> = decisions.into_iter().map(String::from).collect();
                decisions.sort_unstable();
                decisions
            },
        })
    }

    /// The codelet most of the problem's searching jobs decided on among those `applicable` and
    /// measured here (ties: the least time, then the first by name). A job's decision is not always
    /// the least estimate: a codelet replaces native only if clearly faster (by
    /// COMMTUNE_MIN_GAIN and its standard error), and production's checks correct the search.
    pub fn decided(&self, applicable: &dyn Fn(&str) -> bool) -> Option<&str> {
        let mut best: Option<(usize, f64, &str)> = None;
        for run in self.decisions.chunk_by(|a, b| a == b) {
            let codelet = run[0].as_str();
            let Some(us) = self.time(codelet).filter(|_| applicable(codelet)) else {
                continue;
            };
            let better = best.is_none_or(|(n, t, _)| run.len() > n || (run.len() == n && us < t));
            if better {
                best = Some((run.len(), us, codelet));
            }
        }
        best.map(|(_, _, codelet)| codelet)
    }

    /// The time of `codelet` (the median over jobs), if some job measured it.
    pub fn time(&self, codelet: &str) -> Option<f64> {
        self.times
            .binary_search_by(|(c, _)| c.as_str().cmp(codelet))
            .ok()
            .map(|i| self.times[i].1)
    }

    /// How much longer `codelet` took in production than its estimate (the median over the jobs
    /// where it won and production measured it), if any did.
    pub fn ratio(&self, codelet: &str) -> Option<f64> {
        let i = self
            .times
            .binary_search_by(|(c, _)| c.as_str().cmp(codelet))
            .ok()?;
        let ratios = &self.ratios[i];
        (!ratios.is_empty()).then(|| median(ratios))
    }

    /// The time `codelet` takes in production: its time scaled by its realised ratio where
    /// production measured it, else its time.
    pub fn realised(&self, codelet: &str) -> Option<f64> {
        Some(self.time(codelet)? * self.ratio(codelet).unwrap_or(1.0))
    }

    /// The fastest codelet (ties: the first by name) and its time.
    pub fn best(&self) -> (&str, f64) {
        let (codelet, us) = &self.times[self.best];
        (codelet, *us)
    }

    /// How much slower `codelet` is here than the best (0.1: 10 %), if it was measured.
    pub fn penalty(&self, codelet: &str) -> Option<f64> {
        Some(self.time(codelet)? / self.times[self.best].1 - 1.0)
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

    /// This problem with one more job's entry.
    fn with(&self, entry: &Entry) -> Measured {
        let each = |per_codelet: &'_ Vec<Vec<f64>>| -> Vec<(&'_ str, f64)> {
            self.times
                .iter()
                .zip(per_codelet)
                .flat_map(|((codelet, _), values)| values.iter().map(|&v| (codelet.as_str(), v)))
                .collect()
        };
        let (mut estimates, mut ratios) = (each(&self.samples), each(&self.ratios));
        estimates.extend(entry.estimates.iter().map(|e| (e.codelet.as_str(), e.us)));
        ratios.extend(realised_ratio(entry));
        let how = strongest(self.how, entry.how);
        let mut decisions: Vec<&str> = self.decisions.iter().map(String::as_str).collect();
        decisions.extend(decision(entry));
        Measured::new(
            &self.op,
            self.comm_size,
            self.bytes,
            how,
            estimates,
            ratios,
            decisions,
        )
        .expect("a measured problem keeps its estimates")
    }
}

/// The entry's winner if a search or a calibration chose it: a confirmed prediction repeats
/// what the store said, and letting it vote would outweigh a later search that found otherwise.
fn decision(entry: &Entry) -> Option<&str> {
    (entry.how != How::PredictionConfirmed).then_some(entry.winner.as_str())
}

/// The entry's winner with its realised ratio, if production measured it.
fn realised_ratio(entry: &Entry) -> Option<(&str, f64)> {
    Some((entry.winner.as_str(), entry.realised_ratio()?))
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

/// Whether `entry` is a decision a job asking for `timing` reached with another one, with what
/// a prediction from it needs (`Knowledge::with_other_timings`).
fn decided_otherwise(entry: &Entry, timing: &str) -> bool {
    entry.reopened_from.as_deref() == Some(timing)
        && entry.timing.is_some()
        && entry.realised_us.is_some()
        && entry.winner_estimate().is_some()
}

/// The entries merged into one problem per (operation, communicator size, bytes), sorted by
/// them; per codelet the median of the jobs' estimates. Entries without a usable estimate, and
/// ping-pong samples (no codelets to choose from), are left out.
pub fn merge(entries: &[Entry]) -> Vec<Measured> {
    let mut sorted: Vec<&Entry> = entries.iter().filter(|e| e.is_decision()).collect();
    sorted.sort_by(|a, b| key(a).cmp(&key(b)));
    sorted
        .chunk_by(|a, b| key(a) == key(b))
        .filter_map(|jobs| {
            let (op, comm_size, bytes) = key(jobs[0]);
            let how = jobs.iter().map(|e| e.how).fold(jobs[0].how, strongest);
            let estimates = jobs
                .iter()
                .flat_map(|e| e.estimates.iter().map(|e| (e.codelet.as_str(), e.us)))
                .collect();
            let ratios = jobs.iter().filter_map(|e| realised_ratio(e)).collect();
            let decisions = jobs.iter().filter_map(|e| decision(e)).collect();
            Measured::new(op, comm_size, bytes, how, estimates, ratios, decisions)
        })
        .collect()
}

fn key(entry: &Entry) -> (&str, u32, u64) {
    (entry.op.as_str(), entry.comm_size, entry.bytes)
}

/// `key`, owned: what `Knowledge` keeps a decision of another timing under.
fn elsewhere(entry: &Entry) -> (String, u32, u64) {
    let (op, comm_size, bytes) = key(entry);
    (op.to_string(), comm_size, bytes)
}

/// Whether an entry's times compare with those of a job of the MPI library `mpi` (version
/// string) on `platform` that times its searches with `timing` (as COMMTUNE_TIMING names it):
/// times measured another way differ by more than the codelets do (local timing charges a codelet
/// for the skew its predecessor left). An entry of unknown timing compares with none.
pub fn compatible(entry: &Entry, mpi: &str, platform: &Platform, timing: &str) -> bool {
    entry.mpi == mpi && entry.platform == *platform && entry.timing.as_deref() == Some(timing)
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
    /// How far the analysis of the reach looked: a problem added farther away cannot change it.
    horizon: f64,
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
            (operation.points[i].reach, operation.points[i].horizon) =
                operation.reach(i, pmax, None);
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
    /// the same distance as a refuting one do not count. Also the distance of the last neighbour
    /// looked at, the horizon (MAX_REACH when the walk ran out of neighbours).
    fn reach(&self, i: usize, pmax: f64, held_out: Option<usize>) -> (f64, f64) {
        let p = &self.points[i];
        let mut reach = 0.0;
        let mut level: Option<f64> = None;
        let mut horizon = MAX_REACH;
        let walk =
            Walk::new(self, p.x, p.y, MAX_REACH).filter(|&(_, j)| j != i && Some(j) != held_out);
        for (n, (d, j)) in walk.take(NEIGHBOURS).enumerate() {
            if n + 1 == NEIGHBOURS {
                horizon = d;
            }
            let Some(penalty) = self.points[j].measured.penalty(&p.winner) else {
                continue;
            };
            if let Some(l) = level
                && d > l
            {
                reach = l;
            }
            if penalty > pmax {
                return (reach, d);
            }
            level = Some(d);
        }
        (level.unwrap_or(reach), horizon)
    }
}

/// An operation's problems as a prediction sees them: all of them, or all but one held out
/// (leave-one-out), with the reaches that change without it.
struct View<'a> {
    operation: &'a Operation,
    held_out: Option<usize>,
    /// The reaches that differ from those of the whole operation, by index.
    changed: Vec<(usize, f64)>,
}

impl<'a> View<'a> {
    fn all(operation: &'a Operation) -> View<'a> {
        View {
            operation,
            held_out: None,
            changed: Vec::new(),
        }
    }

    /// Without problem `i`: only the problems whose analysis looked as far as `i` change.
    fn without(operation: &'a Operation, i: usize, pmax: f64) -> View<'a> {
        let p = &operation.points[i];
        let mut changed: Vec<(usize, f64)> = Walk::new(operation, p.x, p.y, MAX_REACH)
            .filter(|&(d, j)| j != i && d <= operation.points[j].horizon)
            .map(|(_, j)| (j, operation.reach(j, pmax, Some(i)).0))
            .collect();
        changed.sort_by_key(|&(j, _)| j);
        View {
            operation,
            held_out: Some(i),
            changed,
        }
    }

    fn reach(&self, j: usize) -> f64 {
        match self.changed.binary_search_by_key(&j, |&(j, _)| j) {
            Ok(k) => self.changed[k].1,
            Err(_) => self.operation.points[j].reach,
        }
    }

    /// Whether problem `j` is seen and measured `codelet`.
    fn measures(&self, j: usize, codelet: &str) -> bool {
        Some(j) != self.held_out && self.operation.points[j].measured.time(codelet).is_some()
    }

    fn time(&self, j: usize, codelet: &str) -> f64 {
        self.operation.points[j]
            .measured
            .time(codelet)
            .expect("measured")
    }

    /// The prediction for `problem` with `predictor`; `map` decides when nothing covers it.
    fn predict(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
        predictor: Predictor,
        map: &dyn Fn() -> Option<String>,
    ) -> Option<Predicted> {
        let op = self.operation;
        let (x, y) = (log2(problem.bytes), log2(u64::from(problem.comm_size)));
        let covering = match predictor {
            Predictor::Map => Vec::new(),
            _ => self.covering(x, y, applicable),
        };
        // The same problem measured decides alone: another run's measurement of it predicted a
        // later run's best better than a fit through its neighbours. The closest problem is then
        // what predicted, and the report says so.
        let predictor = match predictor {
            Predictor::Fit | Predictor::Vote if covering.iter().any(|&(d, _)| d == 0.0) => {
                Predictor::Closest
            }
            other => other,
        };
        let chosen = match predictor {
            _ if covering.is_empty() => None,
            Predictor::Closest => closest(op, &covering, applicable),
            Predictor::Vote => vote(op, &covering, applicable),
            Predictor::Fit => self
                .fastest_fitted(problem, applicable)
                .or_else(|| vote(op, &covering, applicable)),
            Predictor::Map => None,
        };
        if let Some((winner, from)) = chosen {
            let (estimate_us, read) = self
                .interpolated(problem.comm_size, problem.bytes, &winner)
                .or_else(|| {
                    let j = from.iter().copied().find(|&j| self.measures(j, &winner))?;
                    Some((self.time(j, &winner), vec![j]))
                })?;
            let (us, basis) = self.in_production(&winner, estimate_us, &[&read, &from]);
            let runner_up = self.runner_up(problem, applicable, &winner, &[&read, &from]);
            return Some(Predicted {
                winner,
                us,
                estimate_us,
                basis,
                predictor,
                from: op.sources(&from),
                timing: None,
                runner_up,
            });
        }
        let winner = map()?;
        let (estimate_us, from) = self
            .interpolated(problem.comm_size, problem.bytes, &winner)
            .or_else(|| {
                let j = self.nearest_measuring(x, y, &winner)?;
                Some((self.time(j, &winner), vec![j]))
            })?;
        let (us, basis) = self.in_production(&winner, estimate_us, &[&from]);
        let runner_up = self.runner_up(problem, applicable, &winner, &[&from]);
        Some(Predicted {
            winner,
            us,
            estimate_us,
            basis,
            predictor: Predictor::Map,
            from: op.sources(&from),
            timing: None,
            runner_up,
        })
    }

    /// The applicable codelet other than `winner` with the least time at `problem`: interpolated
    /// at its communicator size where it can be, else read from the first problem of `near`
    /// (groups of problems, nearest first) that measured it (ties: the first by name).
    fn runner_up(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
        winner: &str,
        near: &[&[usize]],
    ) -> Option<String> {
        let problems: Vec<usize> = near.iter().flat_map(|g| g.iter().copied()).collect();
        let mut names: Vec<&str> = problems
            .iter()
            .flat_map(|&j| self.operation.points[j].measured.times.iter())
            .map(|(name, _)| name.as_str())
            .filter(|name| *name != winner && applicable(name))
            .collect();
        names.sort_unstable();
        names.dedup();
        let time = |name: &str| {
            self.interpolated(problem.comm_size, problem.bytes, name)
                .map(|(us, _)| us)
                .or_else(|| {
                    let j = problems.iter().find(|&&j| self.measures(j, name))?;
                    Some(self.time(*j, name))
                })
        };
        let timed = names
            .into_iter()
            .filter_map(|name| Some((time(name)?, name)));
        timed
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, name)| name.to_string())
    }

    /// The production time of `codelet` predicted at `estimate_us` from the estimates: scaled
    /// by the geometric mean of the realised ratios of the first of `nearest` (groups of
    /// problems, nearest first: those the time was read from, then those the winner was chosen
    /// from) where some problem recorded one; the estimate itself where none did.
    ///
    /// A ratio, not the realised times themselves through the same interpolation: production's
    /// excess over a search's estimate (skew: production calls wait for no barrier) belongs to
    /// the platform and changes slowly with the message size, so one source's ratio carries to
    /// a time interpolated between two sources, of which often only one recorded a realised
    /// time (only a winner does); the estimates stay the measure that compares the codelets.
    fn in_production(&self, codelet: &str, estimate_us: f64, nearest: &[&[usize]]) -> (f64, Basis) {
        let ratios = nearest.iter().find_map(|group| {
            let ratios: Vec<f64> = group
                .iter()
                .filter_map(|&j| self.operation.points[j].measured.ratio(codelet))
                .collect();
            (!ratios.is_empty()).then_some(ratios)
        });
        match ratios {
            Some(ratios) => {
                let log_mean = ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64;
                (estimate_us * log_mean.exp(), Basis::Realised)
            }
            None => (estimate_us, Basis::Estimates),
        }
    }

    /// The problems whose reach covers (x, y) and whose winner is applicable, with their
    /// distance, by index.
    fn covering(&self, x: f64, y: f64, applicable: &dyn Fn(&str) -> bool) -> Vec<(f64, usize)> {
        let op = self.operation;
        let changed_max = self.changed.iter().map(|&(_, r)| r).fold(0.0, f64::max);
        let mut found = Vec::new();
        for group in &op.groups {
            let radius = group.max_reach.max(changed_max);
            let dy = COMM_WEIGHT * (group.y - y).abs();
            if dy > radius {
                continue;
            }
            let dx = (radius * radius - dy * dy).sqrt();
            let points = &op.points[group.start..group.end];
            let from = points.partition_point(|p| p.x < x - dx);
            let to = points.partition_point(|p| p.x <= x + dx);
            for (k, p) in points[from..to].iter().enumerate() {
                let j = group.start + from + k;
                let d = distance(x, y, p.x, p.y);
                if Some(j) != self.held_out && d <= self.reach(j) && applicable(&p.winner) {
                    found.push((d, j));
                }
            }
        }
        found
    }

    /// `codelet`'s time at (comm_size, bytes), log-log interpolated between the nearest sizes of
    /// the same communicator size that measured it on both sides (or the same size), with the
    /// problems it was read from; None when it was not measured on both sides.
    fn interpolated(&self, comm_size: u32, bytes: u64, codelet: &str) -> Option<(f64, Vec<usize>)> {
        let op = self.operation;
        let g = op
            .groups
            .binary_search_by(|g| g.comm_size.cmp(&comm_size))
            .ok()?;
        let group = &op.groups[g];
        let at = group.start
            + op.points[group.start..group.end].partition_point(|p| p.measured.bytes < bytes);
        let above = (at..group.end).find(|&j| self.measures(j, codelet))?;
        if op.points[above].measured.bytes == bytes {
            return Some((self.time(above, codelet), vec![above]));
        }
        let below = (group.start..at)
            .rev()
            .find(|&j| self.measures(j, codelet))?;
        let (x0, x1) = (op.points[below].x, op.points[above].x);
        let (t0, t1) = (self.time(below, codelet), self.time(above, codelet));
        let t = t0 * (t1 / t0).powf((log2(bytes) - x0) / (x1 - x0));
        Some((t, vec![below, above]))
    }

    /// The applicable codelet with the least fitted time at `problem` (ties: the first by name),
    /// with the problems of the fit; None without a measured size of its communicator size
    /// within `4·FIT_WIDTH` octaves (of which it reads the `FIT_SIDE` nearest on either side).
    /// Each codelet's log time is a straight line along log bytes fitted by least squares
    /// through the measured sizes, each weighted `exp(−½(dx/FIT_WIDTH)²)` by its distance `dx`
    /// in octaves (a constant where the sizes cannot place a line).
    fn fastest_fitted(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<(String, Vec<usize>)> {
        let op = self.operation;
        let g = op
            .groups
            .binary_search_by(|g| g.comm_size.cmp(&problem.comm_size))
            .ok()?;
        let group = &op.groups[g];
        let x = log2(problem.bytes);
        let at = group.start + op.points[group.start..group.end].partition_point(|p| p.x < x);
        let seen = |j: &usize| Some(*j) != self.held_out;
        let within = |j: &usize| (op.points[*j].x - x).abs() <= 4.0 * FIT_WIDTH;
        let below = (group.start..at).rev().filter(seen).take_while(within);
        let above = (at..group.end).filter(seen).take_while(within);
        let mut near: Vec<usize> = below.take(FIT_SIDE).chain(above.take(FIT_SIDE)).collect();
        near.sort_unstable();
        let weighted: Vec<(&Measured, f64, f64)> = near
            .iter()
            .map(|&j| {
                let p = &op.points[j];
                let dx = p.x - x;
                (&p.measured, dx, (-0.5 * (dx / FIT_WIDTH).powi(2)).exp())
            })
            .collect();
        let mut codelets: Vec<&str> = weighted
            .iter()
            .flat_map(|(m, _, _)| m.times.iter().map(|(c, _)| c.as_str()))
            .filter(|c| applicable(c))
            .collect();
        codelets.sort_unstable();
        codelets.dedup();
        let mut fastest: Option<(&str, f64)> = None;
        let mut samples = Vec::with_capacity(weighted.len());
        for codelet in codelets {
            samples.clear();
            samples.extend(
                weighted
                    .iter()
                    .filter_map(|&(m, dx, w)| Some((dx, m.time(codelet)?.ln(), w))),
            );
            let fitted = weighted_line_at_zero(&samples);
            if fastest.is_none_or(|(_, best)| fitted < best) {
                fastest = Some((codelet, fitted));
            }
        }
        let (codelet, _) = fastest?;
        Some((codelet.to_string(), near))
    }

    /// The nearest problem of the operation that measured `codelet`.
    fn nearest_measuring(&self, x: f64, y: f64, codelet: &str) -> Option<usize> {
        Walk::new(self.operation, x, y, f64::INFINITY)
            .map(|(_, j)| j)
            .find(|&j| self.measures(j, codelet))
    }
}

impl Operation {
    fn sources(&self, indices: &[usize]) -> Vec<Source> {
        indices
            .iter()
            .map(|&j| self.points[j].measured.source())
            .collect()
    }
}

fn point(measured: Measured) -> Point {
    let winner = measured.best().0.to_string();
    Point {
        x: measured.x(),
        y: measured.y(),
        winner,
        reach: 0.0,
        horizon: MAX_REACH,
        measured,
    }
}

/// What the history knows, analysed for prediction.
#[derive(Clone, Debug)]
pub struct Knowledge {
    pmax: f64,
    operations: BTreeMap<String, Operation>,
    map: Map,
    /// Per exact problem (operation, communicator size, bytes), the newest decision of another
    /// timing that production measured (`with_other_timings`).
    elsewhere: BTreeMap<(String, u32, u64), Entry>,
}

impl Knowledge {
    /// `entries`: already filtered to this job's MPI library, platform and timing (see `compatible`).
    pub fn new(entries: &[Entry], pmax: f64) -> Knowledge {
        Knowledge::from_measured(merge(entries), pmax)
    }

    /// From problems as `merge` gives them (sorted).
    fn from_measured(measured: Vec<Measured>, pmax: f64) -> Knowledge {
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
            elsewhere: BTreeMap::new(),
        }
    }

    /// Adds, from `entries` of this job's MPI library and platform, the decisions that jobs
    /// asking for this job's `timing` reached with another one (`Entry::reopened_from`), for
    /// their exact problems only. A search the self-check found misled runs again with the
    /// other timing (`commtune_tune::check`), and its decision is recorded with that timing,
    /// which the next job of the asked timing never compared with its own: it searched again
    /// where the first had been misled, and was misled again (the 1 Gbit/s rig's 64 KiB
    /// alltoall). Such a decision predicts its exact problem, where this timing measured
    /// nothing, at its realised time and with its timing, so that the safety net measures
    /// production as that job did. Its estimates never mix with this timing's (similar
    /// problems, the map), and a job that asked for another timing itself is not overruled.
    pub fn with_other_timings(mut self, entries: Vec<Entry>, timing: &str) -> Knowledge {
        for entry in entries {
            if !decided_otherwise(&entry, timing) {
                continue;
            }
            let older = |known: &Entry| known.time < entry.time;
            if self.elsewhere.get(&elsewhere(&entry)).is_none_or(older) {
                self.elsewhere.insert(elsewhere(&entry), entry);
            }
        }
        self
    }

    /// A decision this run reached with another timing than the job asked for (`timing`): a key
    /// that COMMTUNE_TIMING=auto searched with `local`, or one the self-check reopened. It
    /// predicts the run's later keys of its exact problem as a store's entry would
    /// (`with_other_timings`), and replaces what was known of that problem whatever the entries'
    /// times say: each rank stamps its own clock, and every rank must keep the same decision.
    pub fn add_other_timing(&mut self, entry: Entry, timing: &str) {
        if decided_otherwise(&entry, timing) {
            self.elsewhere.insert(elsewhere(&entry), entry);
        }
    }

    /// The decision of another timing on exactly `problem`, when this timing measured nothing
    /// there.
    fn predict_elsewhere(
        &self,
        problem: &Problem,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<Predicted> {
        let key = (problem.op.to_string(), problem.comm_size, problem.bytes);
        let entry = self.elsewhere.get(&key)?;
        let measured_here = self.operations.get(problem.op).is_some_and(|op| {
            op.points.iter().any(|p| {
                (p.measured.comm_size, p.measured.bytes) == (problem.comm_size, problem.bytes)
            })
        });
        if measured_here || !applicable(&entry.winner) {
            return None;
        }
        Some(Predicted {
            winner: entry.winner.clone(),
            us: entry.realised_us?,
            estimate_us: entry.winner_estimate()?.us,
            basis: Basis::Realised,
            predictor: Predictor::Closest,
            from: vec![Source {
                comm_size: entry.comm_size,
                bytes: entry.bytes,
                how: entry.how,
            }],
            timing: entry.timing.clone(),
            runner_up: entry
                .estimates
                .iter()
                .filter(|e| e.codelet != entry.winner && applicable(&e.codelet))
                .min_by(|a, b| a.us.total_cmp(&b.us))
                .map(|e| e.codelet.clone()),
        })
    }

    /// A decision taken in this run (cheap enough to call at every decision). It predicts through
    /// its reach; the decision map stays the history's (rebuilding it costs O(n log n)).
    pub fn add(&mut self, entry: Entry) {
        let op = self.operations.entry(entry.op.clone()).or_default();
        let at = op.points.partition_point(|p| {
            (p.measured.comm_size, p.measured.bytes) < (entry.comm_size, entry.bytes)
        });
        let existing = op.points.get(at).is_some_and(|p| {
            (p.measured.comm_size, p.measured.bytes) == (entry.comm_size, entry.bytes)
        });
        if existing {
            let measured = op.points[at].measured.with(&entry);
            op.points[at] = point(measured);
        } else {
            let estimates = entry
                .estimates
                .iter()
                .map(|e| (e.codelet.as_str(), e.us))
                .collect();
            let Some(measured) = Measured::new(
                &entry.op,
                entry.comm_size,
                entry.bytes,
                entry.how,
                estimates,
                realised_ratio(&entry).into_iter().collect(),
                decision(&entry).into_iter().collect(),
            ) else {
                return;
            };
            op.points.insert(at, point(measured));
            op.regroup();
        }
        // Only the problems whose analysis looked as far as the new one can change.
        let (x, y) = (op.points[at].x, op.points[at].y);
        let near: Vec<usize> = Walk::new(op, x, y, MAX_REACH)
            .filter(|&(d, j)| j == at || d <= op.points[j].horizon)
            .map(|(_, j)| j)
            .collect();
        for j in near {
            (op.points[j].reach, op.points[j].horizon) = op.reach(j, self.pmax, None);
        }
        op.update_max_reach();
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
        if let Some(predicted) = self.predict_elsewhere(problem, applicable) {
            return Some(predicted);
        }
        let op = self.operations.get(problem.op)?;
        let map = || {
            let decided = self
                .map
                .decide(problem.op, problem.comm_size, problem.bytes, applicable);
            decided.map(String::from)
        };
        View::all(op).predict(problem, applicable, predictor, &map)
    }

    /// The decision map the prediction falls back to.
    pub fn map(&self) -> &Map {
        &self.map
    }
}

/// How well the history predicts problems it has not seen: each problem predicted from all the
/// others of its operation (leave-one-out), among the codelets it measured (a calibration, or a
/// search that tried every applicable codelet, measured exactly the applicable ones).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Evaluation {
    pub problems: usize,
    /// Predicted at all, and of those by covering problems (the rest by the decision map).
    pub predicted: usize,
    pub covered: usize,
    /// Predicted winners within `pmax` of the problem's best.
    pub within: usize,
    /// Predicted times within `pmax` of the predicted winner's time in production (its
    /// measured time where production did not measure it): the safety net keeps those
    /// predictions.
    pub time_within: usize,
}

/// Leave-one-out over `measured` (`merge`'s problems, any operations) with `predictor` for
/// covered problems: each problem is predicted by the knowledge of the other problems of its
/// operation, analysed with `pmax`.
pub fn leave_one_out(measured: &[Measured], pmax: f64, predictor: Predictor) -> Evaluation {
    let mut evaluation = Evaluation {
        problems: measured.len(),
        ..Evaluation::default()
    };
    let mut by_op: BTreeMap<&str, Vec<Measured>> = BTreeMap::new();
    for m in measured {
        by_op.entry(&m.op).or_default().push(m.clone());
    }
    for (op, mut problems) in by_op {
        problems.sort_by_key(|m| (m.comm_size, m.bytes));
        let operation = Operation::new(problems, pmax);
        let all: Vec<&Measured> = operation.points.iter().map(|p| &p.measured).collect();
        let maps = map::LeaveOneOut::new(&all, pmax);
        for (i, held) in all.iter().enumerate() {
            let problem = Problem {
                op,
                comm_size: held.comm_size,
                bytes: held.bytes,
            };
            let applicable = |c: &str| held.time(c).is_some();
            let map = || maps.decide(i, &applicable);
            let view = View::without(&operation, i, pmax);
            let predicted = view.predict(&problem, &applicable, predictor, &map);
            evaluation.score(held, predicted, pmax);
        }
    }
    evaluation
}

/// How well the knowledge of earlier jobs predicts the problems a later job measured
/// (`later`, as `merge` gives them), among the codelets each measured.
pub fn against(
    knowledge: &Knowledge,
    later: &[Measured],
    pmax: f64,
    predictor: Predictor,
) -> Evaluation {
    let mut evaluation = Evaluation {
        problems: later.len(),
        ..Evaluation::default()
    };
    for held in later {
        let problem = Problem {
            op: &held.op,
            comm_size: held.comm_size,
            bytes: held.bytes,
        };
        let applicable = |c: &str| held.time(c).is_some();
        let predicted = knowledge.predict_with(&problem, &applicable, predictor);
        evaluation.score(held, predicted, pmax);
    }
    evaluation
}

impl Evaluation {
    /// Counts the prediction of `held` (among the codelets it measured).
    fn score(&mut self, held: &Measured, predicted: Option<Predicted>, pmax: f64) {
        let Some(p) = predicted else {
            return;
        };
        self.predicted += 1;
        self.covered += usize::from(p.predictor != Predictor::Map);
        let measured = held.realised(&p.winner).expect("applicable means measured");
        let penalty = held.penalty(&p.winner).expect("applicable means measured");
        self.within += usize::from(penalty <= pmax);
        self.time_within += usize::from((p.us / measured - 1.0).abs() <= pmax);
    }
}

/// The value at 0 of the line fitted by weighted least squares through `(x, y, weight)`; the
/// weighted mean of y where the x do not spread.
fn weighted_line_at_zero(samples: &[(f64, f64, f64)]) -> f64 {
    let total: f64 = samples.iter().map(|s| s.2).sum();
    let mean =
        |f: fn(&(f64, f64, f64)) -> f64| samples.iter().map(|s| s.2 * f(s)).sum::<f64>() / total;
    let (mx, my) = (mean(|s| s.0), mean(|s| s.1));
    let sxx: f64 = samples.iter().map(|s| s.2 * (s.0 - mx).powi(2)).sum();
    if sxx <= 1e-9 * total {
        return my;
    }
    let sxy: f64 = samples.iter().map(|s| s.2 * (s.0 - mx) * (s.1 - my)).sum();
    my - sxy / sxx * mx
}

/// The closest covering problem's winner (ties: the first problem); at distance 0, what its
/// jobs decided (`Measured::decided`), else its fastest codelet.
fn closest(
    op: &Operation,
    covering: &[(f64, usize)],
    applicable: &dyn Fn(&str) -> bool,
) -> Option<(String, Vec<usize>)> {
    let &(d, j) = covering
        .iter()
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?;
    let point = &op.points[j];
    let decided = (d == 0.0)
        .then(|| point.measured.decided(applicable))
        .flatten();
    Some((decided.unwrap_or(&point.winner).to_string(), vec![j]))
}

/// The winner with the most 1/distance weight among the covering problems (a problem at
/// distance 0 decides alone; ties: the first codelet by name), and the problems that chose it,
/// closest first.
fn vote(
    op: &Operation,
    covering: &[(f64, usize)],
    applicable: &dyn Fn(&str) -> bool,
) -> Option<(String, Vec<usize>)> {
    let mut by_distance = covering.to_vec();
    by_distance.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if by_distance.first()?.0 == 0.0 {
        return closest(op, &by_distance, applicable);
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
