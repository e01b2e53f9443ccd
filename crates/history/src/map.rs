//! The decision map: per operation, which codelet to run for a (communicator size, bytes) that
//! no measured problem covers. Pure: no MPI.
//!
//! A quadtree over (log2 communicator size, log2 bytes) as in Open MPI's tuned component
//! (Pješivac-Grbović et al.): the root is the bounding box of the operation's measured problems
//! (whole powers of two); a region becomes a leaf when one codelet is within `tolerance` of the
//! best at every problem in it, when it is narrow and holds few problems and one codelet costs
//! little over them (`LEAF_PROBLEMS`, `COMPROMISE`: there a split would follow single noisy
//! measurements), or at depth `MAX_DEPTH`, else it splits into four halves. Every node ranks
//! the codelets measured in it by their mean penalty (time / best − 1) over its problems, those
//! within `tolerance` everywhere first; a problem that did not measure a codelet counts it as
//! `UNMEASURED`, and no penalty counts more. A decision goes down to a leaf (past an empty
//! quarter to its sibling of the same message sizes, else of the same communicator sizes, else
//! the opposite one) and takes the first applicable codelet of the leaf's ranking, else of its
//! parent's, and so on up.

use std::collections::{BTreeMap, BTreeSet};

use crate::predict::Measured;

/// The deepest a leaf may be (the root is depth 0); six levels always sufficed for Open MPI's
/// measurements.
pub const MAX_DEPTH: u32 = 6;

/// A region no wider than `LEAF_OCTAVES` of message size that holds no more than
/// `LEAF_PROBLEMS` problems is a leaf even where no codelet fits all of them: split further, its
/// leaves would follow one or two measurements each, and one noisy measurement (a descheduled
/// run) would decide its neighbours wrong; its codelet is the one with the least penalty over
/// its problems. Wide regions still split, so that a crossover sampled once per octave is found,
/// and so do narrow ones where that codelet costs too much (`COMPROMISE`).
/// Chosen on one store family (Open MPI, 2 ranks on shared memory, three calibrations of 40
/// sizes × 3 operations; leave-one-out mean penalty, mean over the three stores): 2.4 % with
/// neither bound, 2.1 % at 4 problems, 1.8 % at 8 or 16 within 2.5 octaves, 2.0 % within 1.25,
/// 1.7 % at 16 within 5 octaves (worse on 3 of the 10 other stores); 8 within 2.5 keeps the finer
/// map of the best (before `COMPROMISE`).
pub const LEAF_PROBLEMS: usize = 8;

/// See `LEAF_PROBLEMS`.
pub const LEAF_OCTAVES: f64 = 2.5;

/// A narrow region of few problems splits all the same where its codelet of least penalty costs
/// more than this on average over them (a mean penalty; 0.15: 15 % slower than the best): noise
/// makes the best compromise lose a problem or two by a little, a crossover inside makes it lose
/// many by much. On the 1 Gbit/s rig, allreduce's `linear` wins up to 26 KiB and takes 2.2 times
/// native's time from 31 KiB; one leaf over both chose recursive doubling, 30 to 60 % off on
/// either side. It does not scale with the tolerance (COMMTUNE_PMAX), so that a small one keeps
/// the protection against noise. Leave-one-out mean penalty (`commtune map`, tolerance 10 %,
/// calibrations of 40 sizes × 3 operations with 32 samples; without the rule, then at 0.1, 0.15
/// and 0.2): the rig, two calibrations, 7.4/4.7/4.5/6.0 % and 7.1/4.9/4.8/6.1 %; Open MPI on
/// shared memory, 2 ranks, 6.2/6.4/6.2/6.2 % and 4.3/6.1/4.2/4.3 %; MPICH 1.3 % and 0.4 % at
/// every value.
pub const COMPROMISE: f64 = 0.15;

/// The penalty a problem that did not measure a codelet counts for it when a node ranks its
/// codelets: as if it had taken twice the best. Also the most a measured penalty counts, so that
/// one measurement of a descheduled run (hundreds of times the best, on a shared machine) does not
/// outweigh the rest of the region.
pub const UNMEASURED: f64 = 1.0;

/// One quadtree per operation.
#[derive(Clone, Debug, Default)]
pub struct Map {
    trees: BTreeMap<String, Tree>,
}

#[derive(Clone, Debug)]
struct Tree {
    area: Area,
    /// The codelets measured in the tree, by name; nodes rank their indices.
    codelets: Vec<String>,
    root: Node,
}

/// A problem as a tree sees it: its place and each codelet's penalty, by the tree's codelet
/// index (None: not measured).
struct Sample {
    x: f64,
    y: f64,
    penalties: Vec<Option<f64>>,
}

/// A region of (log2 bytes, log2 communicator size), lower bounds inclusive.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Area {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Area {
    /// The root of a tree: whole powers of two around the problems' coordinates.
    fn around(xs: &[f64], ys: &[f64]) -> Option<Area> {
        let bounds = |values: &[f64]| {
            let low = values.iter().copied().fold(f64::INFINITY, f64::min).floor();
            let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (low, (high.floor() + 1.0).max(low + 1.0))
        };
        if xs.is_empty() {
            return None;
        }
        let ((x0, x1), (y0, y1)) = (bounds(xs), bounds(ys));
        Some(Area { x0, x1, y0, y1 })
    }

    fn holds(&self, x: f64, y: f64) -> bool {
        (self.x0..self.x1).contains(&x) && (self.y0..self.y1).contains(&y)
    }

    fn mid(&self) -> (f64, f64) {
        ((self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0)
    }

    /// Which quarter (x, y) falls in: bit 0 the upper half of x, bit 1 that of y.
    fn quarter_of(&self, x: f64, y: f64) -> usize {
        let (xm, ym) = self.mid();
        usize::from(x >= xm) + 2 * usize::from(y >= ym)
    }

    fn quarter(&self, q: usize) -> Area {
        let (xm, ym) = self.mid();
        let (x0, x1) = if q & 1 == 0 {
            (self.x0, xm)
        } else {
            (xm, self.x1)
        };
        let (y0, y1) = if q & 2 == 0 {
            (self.y0, ym)
        } else {
            (ym, self.y1)
        };
        Area { x0, x1, y0, y1 }
    }
}

#[derive(Clone, Debug)]
struct Node {
    /// The codelets measured in the region (indices in `Tree::codelets`), best first.
    ranking: Vec<usize>,
    /// What the ranking was computed from.
    tally: Tally,
    /// The four quarters of a node that split; None for a quarter without problems.
    children: Option<Box<[Option<Node>; 4]>>,
}

/// How deep a tree's decisions are.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Depth {
    /// The deepest leaf that holds problems.
    pub max: u32,
    /// The mean depth of the leaves that hold problems.
    pub mean: f64,
    pub leaves: usize,
}

/// The leave-one-out penalty of a map: each problem decided by the map built without it.
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Penalty {
    pub problems: usize,
    /// Problems the map decided (all but those of an operation with a single problem).
    pub decided: usize,
    /// Mean, median (the upper one) and worst of (time of the decided codelet / best time − 1)
    /// over the decided problems.
    pub mean: f64,
    pub median: f64,
    pub worst: f64,
}

fn coordinates(comm_size: u32, bytes: u64) -> (f64, f64) {
    (
        (bytes.max(1) as f64).log2(),
        f64::from(comm_size.max(1)).log2(),
    )
}

impl Map {
    /// The maps of every operation of `measured`.
    pub fn new(measured: &[Measured], tolerance: f64) -> Map {
        let mut by_op: BTreeMap<&str, Vec<&Measured>> = BTreeMap::new();
        for m in measured {
            by_op.entry(m.op.as_str()).or_default().push(m);
        }
        let trees = by_op
            .into_iter()
            .filter_map(|(op, problems)| Some((op.to_string(), Tree::new(&problems, tolerance)?)))
            .collect();
        Map { trees }
    }

    /// The operations that have a map.
    pub fn operations(&self) -> impl Iterator<Item = &str> {
        self.trees.keys().map(String::as_str)
    }

    /// The codelet the map chooses among the applicable ones.
    pub fn decide(
        &self,
        op: &str,
        comm_size: u32,
        bytes: u64,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<&str> {
        self.trees.get(op)?.decide(comm_size, bytes, applicable)
    }

    pub fn depth(&self, op: &str) -> Option<Depth> {
        let tree = self.trees.get(op)?;
        let mut leaves = Vec::new();
        tree.root.leaf_depths(0, &mut leaves);
        let max = leaves.iter().copied().max().unwrap_or(0);
        let mean = leaves.iter().map(|&d| f64::from(d)).sum::<f64>() / leaves.len().max(1) as f64;
        Some(Depth {
            max,
            mean,
            leaves: leaves.len(),
        })
    }

    /// The map of `op` along the message size at one communicator size: (from, to) bytes, the
    /// first inclusive, and the codelet, with neighbouring ranges of one codelet joined.
    pub fn ranges(&self, op: &str, comm_size: u32) -> Vec<(u64, u64, String)> {
        let Some(tree) = self.trees.get(op) else {
            return Vec::new();
        };
        let (_, y) = coordinates(comm_size, 1);
        let mut spans: Vec<(f64, f64)> = Vec::new();
        tree.root.spans(tree.area, y, &mut spans);
        let mut ranges: Vec<(u64, u64, String)> = Vec::new();
        for (x0, x1) in spans {
            let codelet = tree.decide_at((x0 + x1) / 2.0, y, &|_| true).unwrap_or("");
            let (from, to) = (x0.exp2().round() as u64, x1.exp2().round() as u64);
            match ranges.last_mut() {
                Some(last) if last.2 == codelet => last.1 = to,
                _ => ranges.push((from, to, codelet.to_string())),
            }
        }
        ranges
    }
}

impl Tree {
    fn new(measured: &[&Measured], tolerance: f64) -> Option<Tree> {
        Tree::with_samples(measured, tolerance).map(|(tree, _)| tree)
    }

    /// The tree and its samples, in the order of `measured`.
    fn with_samples(measured: &[&Measured], tolerance: f64) -> Option<(Tree, Vec<Sample>)> {
        let codelets: Vec<String> = measured
            .iter()
            .flat_map(|m| m.times.iter().map(|(c, _)| c.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(String::from)
            .collect();
        let samples: Vec<Sample> = measured
            .iter()
            .map(|m| {
                let (x, y) = coordinates(m.comm_size, m.bytes);
                let penalties = codelets.iter().map(|c| m.penalty(c)).collect();
                Sample { x, y, penalties }
            })
            .collect();
        let xs: Vec<f64> = samples.iter().map(|s| s.x).collect();
        let ys: Vec<f64> = samples.iter().map(|s| s.y).collect();
        let area = Area::around(&xs, &ys)?;
        let all: Vec<&Sample> = samples.iter().collect();
        let root = Node::build(&all, area, 0, tolerance);
        let tree = Tree {
            area,
            codelets,
            root,
        };
        Some((tree, samples))
    }

    fn decide(
        &self,
        comm_size: u32,
        bytes: u64,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<&str> {
        let (x, y) = coordinates(comm_size, bytes);
        self.decide_at(x, y, applicable)
    }

    /// What the tree built without `samples[index]` (whose removal leaves the root as it is)
    /// decides for it: down its path, the nodes holding it ranked without it; a leaf that would
    /// split without it is built again from the others.
    fn decide_without(
        &self,
        index: usize,
        samples: &[Sample],
        tolerance: f64,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<&str> {
        let held = &samples[index];
        let mut rankings: Vec<Vec<usize>> = Vec::new();
        let (mut node, mut area, mut depth, mut holds) = (&self.root, self.area, 0, true);
        loop {
            let leaf = if holds {
                let tally = node.tally.without(held, tolerance);
                let (ranking, leaf) = tally.decision(&area, depth);
                rankings.push(ranking);
                leaf
            } else {
                rankings.push(node.ranking.clone());
                false
            };
            let Some(children) = node.children.as_ref().filter(|_| !leaf) else {
                if holds && !leaf {
                    // A leaf whose compromise costs too much without `held` (`Tally::decision`).
                    rankings.extend(split_without(samples, index, area, depth, tolerance));
                }
                break;
            };
            let q = area.quarter_of(held.x, held.y);
            // The quarter that held only `held` is empty without it.
            let (k, child) = [q, q ^ 2, q ^ 1, q ^ 3]
                .into_iter()
                .find_map(|k| {
                    let child = children[k].as_ref()?;
                    let emptied = holds && k == q && child.tally.problems == 1;
                    (!emptied).then_some((k, child))
                })
                .expect("a node that split holds problems besides `held`");
            holds &= k == q;
            (node, area, depth) = (child, area.quarter(k), depth + 1);
        }
        rankings.iter().rev().find_map(|ranking| {
            ranking
                .iter()
                .map(|&c| self.codelets[c].as_str())
                .find(|c| applicable(c))
        })
    }

    fn decide_at(&self, x: f64, y: f64, applicable: &dyn Fn(&str) -> bool) -> Option<&str> {
        let path = self.root.path(self.area, x, y);
        path.iter().rev().find_map(|node| {
            node.ranking
                .iter()
                .map(|&c| self.codelets[c].as_str())
                .find(|c| applicable(c))
        })
    }
}

impl Node {
    fn build(points: &[&Sample], area: Area, depth: u32, tolerance: f64) -> Node {
        let tally = Tally::of(points, tolerance);
        let (ranking, leaf) = tally.decision(&area, depth);
        if leaf {
            return Node {
                ranking,
                tally,
                children: None,
            };
        }
        let mut quarters: [Vec<&Sample>; 4] = Default::default();
        for &p in points {
            quarters[area.quarter_of(p.x, p.y)].push(p);
        }
        let mut children: [Option<Node>; 4] = Default::default();
        for (q, quarter) in quarters.iter().enumerate() {
            if !quarter.is_empty() {
                children[q] = Some(Node::build(quarter, area.quarter(q), depth + 1, tolerance));
            }
        }
        Node {
            ranking,
            tally,
            children: Some(Box::new(children)),
        }
    }

    /// The nodes from this one (of `area`) down to the leaf that decides for (x, y).
    fn path(&self, mut area: Area, x: f64, y: f64) -> Vec<&Node> {
        let mut path = vec![self];
        while let Some(children) = &path.last().expect("this node").children {
            let q = area.quarter_of(x, y);
            let (q, child) = [q, q ^ 2, q ^ 1, q ^ 3]
                .into_iter()
                .find_map(|q| Some((q, children[q].as_ref()?)))
                .expect("a node that split has a quarter with problems");
            path.push(child);
            area = area.quarter(q);
        }
        path
    }

    fn leaf_depths(&self, depth: u32, out: &mut Vec<u32>) {
        match &self.children {
            None => out.push(depth),
            Some(children) => {
                for child in children.iter().flatten() {
                    child.leaf_depths(depth + 1, out);
                }
            }
        }
    }

    /// The leaves along x that decide for the line at `y` (as `Tree::decide_at` goes down).
    fn spans(&self, area: Area, y: f64, out: &mut Vec<(f64, f64)>) {
        let Some(children) = &self.children else {
            out.push((area.x0, area.x1));
            return;
        };
        let row = 2 * usize::from(y >= area.mid().1);
        for q in [row, row + 1] {
            match (&children[q], &children[q ^ 2]) {
                (Some(child), _) => child.spans(area.quarter(q), y, out),
                (None, Some(sibling)) => sibling.spans(area.quarter(q ^ 2), y, out),
                (None, None) => {
                    let quarter = area.quarter(q);
                    out.push((quarter.x0, quarter.x1));
                }
            }
        }
    }
}

/// What a region's ranking is computed from, per codelet over the region's problems: the sum
/// of the penalties as ranked (in units of 10^-9, so that sums are exact and a problem can be
/// taken out again), how many problems measured it, and how many it fails (not measured, or
/// beyond the tolerance).
#[derive(Clone, Debug)]
struct Tally {
    problems: usize,
    sums: Vec<u64>,
    measured: Vec<usize>,
    failures: Vec<usize>,
}

impl Tally {
    fn of(points: &[&Sample], tolerance: f64) -> Tally {
        let codelets = points.first().map_or(0, |p| p.penalties.len());
        let mut tally = Tally {
            problems: 0,
            sums: vec![0; codelets],
            measured: vec![0; codelets],
            failures: vec![0; codelets],
        };
        for p in points {
            tally.problems += 1;
            for (c, penalty) in p.penalties.iter().enumerate() {
                let (sum, measured, fails) = Tally::counts(*penalty, tolerance);
                tally.sums[c] += sum;
                tally.measured[c] += measured;
                tally.failures[c] += fails;
            }
        }
        tally
    }

    /// One problem's part in a tally for one codelet.
    fn counts(penalty: Option<f64>, tolerance: f64) -> (u64, usize, usize) {
        let ranked = penalty.map_or(UNMEASURED, |p| p.min(UNMEASURED));
        let fails = penalty.is_none_or(|p| p > tolerance);
        (
            (ranked * 1e9).round() as u64,
            usize::from(penalty.is_some()),
            usize::from(fails),
        )
    }

    /// The tally without one of its problems.
    fn without(&self, held: &Sample, tolerance: f64) -> Tally {
        let mut tally = self.clone();
        tally.problems -= 1;
        for (c, penalty) in held.penalties.iter().enumerate() {
            let (sum, measured, fails) = Tally::counts(*penalty, tolerance);
            tally.sums[c] -= sum;
            tally.measured[c] -= measured;
            tally.failures[c] -= fails;
        }
        tally
    }

    /// The region's ranking, and whether the region is a leaf: its first codelet is within the
    /// tolerance everywhere, it is `MAX_DEPTH` deep, it holds a single problem, or it holds no
    /// more than `LEAF_PROBLEMS` within `LEAF_OCTAVES` of message size where its first
    /// codelet's mean penalty is at most `COMPROMISE`.
    fn decision(&self, area: &Area, depth: u32) -> (Vec<usize>, bool) {
        let mut ranking: Vec<usize> = (0..self.sums.len())
            .filter(|&c| self.measured[c] > 0)
            .collect();
        // Every codelet's mean is over the same problems: compare the sums.
        ranking.sort_by_key(|&c| (self.failures[c] > 0, self.sums[c], c));
        let fits = ranking.first().is_some_and(|&c| self.failures[c] == 0);
        // A narrow region settles for a compromise only where it costs little on average
        // (`COMPROMISE`).
        let limit = (COMPROMISE * 1e9).round() as u64 * self.problems as u64;
        let compromise = ranking.first().is_some_and(|&c| self.sums[c] <= limit);
        let sparse =
            compromise && self.problems <= LEAF_PROBLEMS && area.x1 - area.x0 <= LEAF_OCTAVES;
        let leaf = fits || depth == MAX_DEPTH || self.problems <= 1 || sparse;
        (ranking, leaf)
    }
}

/// The rankings below a leaf of `area` at `depth` that splits without `samples[index]`, down to
/// the leaf that decides for it: the leaf built again from the other samples it holds.
fn split_without(
    samples: &[Sample],
    index: usize,
    area: Area,
    depth: u32,
    tolerance: f64,
) -> Vec<Vec<usize>> {
    let others: Vec<&Sample> = samples
        .iter()
        .enumerate()
        .filter(|&(i, s)| i != index && area.holds(s.x, s.y))
        .map(|(_, s)| s)
        .collect();
    let rebuilt = Node::build(&others, area, depth, tolerance);
    let held = &samples[index];
    // Its first node is ranked as the leaf was just ranked without `held`.
    let path = rebuilt.path(area, held.x, held.y);
    path.into_iter()
        .skip(1)
        .map(|n| n.ranking.clone())
        .collect()
}

/// Decisions of the maps of one operation's problems, each without one of them, from one tree
/// of them all: a tree without a problem differs only along that problem's path, and below a
/// leaf of it that splits without the problem (unless its root changes, when it is built anew).
pub(crate) struct LeaveOneOut<'a> {
    measured: &'a [&'a Measured],
    tolerance: f64,
    tree: Option<Tree>,
    samples: Vec<Sample>,
    /// The problems' coordinates, sorted: the root without one of them.
    xs: Vec<f64>,
    ys: Vec<f64>,
}

impl<'a> LeaveOneOut<'a> {
    pub(crate) fn new(measured: &'a [&'a Measured], tolerance: f64) -> LeaveOneOut<'a> {
        let (tree, samples) = Tree::with_samples(measured, tolerance).unzip();
        let samples = samples.unwrap_or_default();
        let sorted = |axis: fn(&Sample) -> f64| {
            let mut values: Vec<f64> = samples.iter().map(axis).collect();
            values.sort_by(f64::total_cmp);
            values
        };
        let (xs, ys) = (sorted(|s| s.x), sorted(|s| s.y));
        LeaveOneOut {
            measured,
            tolerance,
            tree,
            samples,
            xs,
            ys,
        }
    }

    /// What the map without problem `i` decides for it.
    pub(crate) fn decide(&self, i: usize, applicable: &dyn Fn(&str) -> bool) -> Option<String> {
        let tree = self.tree.as_ref()?;
        let held = &self.samples[i];
        // The root without the problem: the extreme values of the others.
        let others = |sorted: &[f64], v: f64| -> Vec<f64> {
            let first = if sorted[0] == v { 1 } else { 0 };
            let last = if sorted[sorted.len() - 1] == v {
                sorted.len() - 2
            } else {
                sorted.len() - 1
            };
            vec![sorted[first], sorted[last]]
        };
        if self.samples.len() < 2 {
            return None;
        }
        let area = Area::around(&others(&self.xs, held.x), &others(&self.ys, held.y));
        if area != Some(tree.area) {
            let rest: Vec<&Measured> = self.measured[..i]
                .iter()
                .chain(&self.measured[i + 1..])
                .copied()
                .collect();
            let rebuilt = Tree::new(&rest, self.tolerance)?;
            return rebuilt
                .decide_at(held.x, held.y, applicable)
                .map(String::from);
        }
        tree.decide_without(i, &self.samples, self.tolerance, applicable)
            .map(String::from)
    }
}

/// The leave-one-out penalty of the map of one operation's problems: each problem decided by
/// the map built from the others, among the codelets it measured (a calibration, or a search
/// that tried every applicable codelet, measured exactly the applicable ones).
pub fn leave_one_out(measured: &[&Measured], tolerance: f64) -> Penalty {
    let mut penalties = Vec::with_capacity(measured.len());
    let maps = LeaveOneOut::new(measured, tolerance);
    for (i, held) in measured.iter().enumerate() {
        let applicable = |c: &str| held.time(c).is_some();
        if let Some(decided) = maps.decide(i, &applicable) {
            penalties.push(held.penalty(&decided).expect("applicable means measured"));
        }
    }
    penalties.sort_by(f64::total_cmp);
    let decided = penalties.len();
    Penalty {
        problems: measured.len(),
        decided,
        mean: penalties.iter().sum::<f64>() / decided.max(1) as f64,
        median: if decided == 0 {
            0.0
        } else {
            penalties[decided / 2]
        },
        worst: penalties.last().copied().unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::merge;
    use crate::testing::{Lcg, crossover, entry, powers};

    fn any(_: &str) -> bool {
        true
    }

    #[test]
    fn the_crossover_splits_the_map_and_inapplicable_codelets_fall_through() {
        let measured = merge(&powers().map(|b| crossover(4, b)).collect::<Vec<_>>());
        let map = Map::new(&measured, 0.05);
        assert_eq!(map.decide("allreduce", 4, 1000, &any), Some("small"));
        assert_eq!(map.decide("allreduce", 4, 1 << 20, &any), Some("large"));
        // Outside the measured box: the nearest region.
        assert_eq!(map.decide("allreduce", 64, 1 << 30, &any), Some("large"));
        assert_eq!(
            map.decide("allreduce", 4, 1000, &|c| c != "small"),
            Some("large")
        );
        assert_eq!(map.decide("allreduce", 4, 1000, &|_| false), None);
        assert_eq!(map.decide("alltoall", 4, 1000, &any), None);
        let ranges = map.ranges("allreduce", 4);
        assert_eq!(ranges.len(), 2, "{ranges:?}");
        assert_eq!((ranges[0].0, ranges[0].2.as_str()), (8, "small"));
        assert!((32768..65536).contains(&ranges[1].0), "{ranges:?}");
        assert_eq!((ranges[1].1, ranges[1].2.as_str()), (1 << 23, "large"));
        let depth = map.depth("allreduce").unwrap();
        assert!(
            depth.max <= MAX_DEPTH && depth.mean <= f64::from(depth.max),
            "{depth:?}"
        );
        assert!(depth.leaves >= 2, "{depth:?}");
    }

    #[test]
    fn a_single_problem_is_a_leaf_and_an_empty_store_no_map() {
        let measured = merge(&[entry("alltoall", 2, 64, &[("a", 1.0), ("b", 2.0)])]);
        let map = Map::new(&measured, 0.1);
        let depth = map.depth("alltoall").unwrap();
        assert_eq!((depth.max, depth.leaves), (0, 1));
        assert_eq!(map.decide("alltoall", 1024, 1 << 20, &any), Some("a"));
        assert_eq!(Map::new(&[], 0.1).operations().count(), 0);
        // Leave-one-out of one problem decides nothing.
        let one: Vec<&Measured> = measured.iter().collect();
        assert_eq!(leave_one_out(&one, 0.1).decided, 0);
    }

    #[test]
    fn leave_one_out_penalty_counts_the_decided_codelet_at_the_held_out_problem() {
        let measured = merge(&powers().map(|b| crossover(4, b)).collect::<Vec<_>>());
        let all: Vec<&Measured> = measured.iter().collect();
        let penalty = leave_one_out(&all, 0.05);
        assert_eq!((penalty.problems, penalty.decided), (20, 20));
        // Only the problems next to the crossover can be decided wrong, by at most small's 20 %
        // at 64 KiB.
        assert!(penalty.worst <= 0.21, "{penalty:?}");
        assert!(penalty.mean <= 0.021, "{penalty:?}");
    }

    #[test]
    fn noise_deepens_the_tree_no_further_than_max_depth() {
        let mut noise = Lcg(1);
        let entries: Vec<_> = (0..400)
            .map(|i| {
                let bytes = 8 + (noise.next() * 4e6) as u64;
                let times = [("a", 1.0 + noise.next()), ("b", 1.0 + noise.next())];
                entry("allgatherv", 2 + i % 7, bytes, &times)
            })
            .collect();
        let map = Map::new(&merge(&entries), 0.01);
        assert_eq!(map.depth("allgatherv").unwrap().max, MAX_DEPTH);
    }

    #[test]
    fn a_narrow_region_of_few_problems_keeps_the_codelet_of_least_penalty() {
        // Quarter octaves from 1 KiB: `fast` wins five problems by 2 %, but is 60 % slower at
        // three others; `safe` is 30 % slower at one. Neither fits everywhere.
        let fast = [1.0, 1.6, 1.0, 1.6, 1.0, 1.6, 1.0, 1.0, 1.0];
        let safe = [1.02, 1.0, 1.02, 1.0, 1.02, 1.0, 1.02, 1.3, 1.02];
        let problems = |n: usize| {
            let entries: Vec<_> = (0..n)
                .map(|i| {
                    let bytes = (10.0 + i as f64 / 4.0).exp2().round() as u64;
                    entry(
                        "alltoall",
                        2,
                        bytes,
                        &[("fast", fast[i]), ("safe", safe[i])],
                    )
                })
                .collect();
            merge(&entries)
        };
        // Eight problems within two octaves: one leaf, and its codelet is `safe` (penalties
        // 0.08 + 0.3) rather than the winner of most problems (`fast`, 3 × 0.6).
        let eight = problems(8);
        let map = Map::new(&eight, 0.1);
        assert_eq!(map.depth("alltoall").unwrap().max, 0);
        for m in &eight {
            assert_eq!(map.decide("alltoall", 2, m.bytes, &any), Some("safe"));
        }
        // Nine are too many to settle for a codelet that fails somewhere: the region splits.
        let map = Map::new(&problems(9), 0.1);
        assert!(map.depth("alltoall").unwrap().max >= 1);
    }

    #[test]
    fn a_narrow_region_with_a_crossover_inside_splits() {
        // Six problems within 1.25 octaves from 16 KiB: `small` wins the first three, `large`
        // the last three, each taking twice the other's time on the wrong side.
        let entries: Vec<_> = (0..6)
            .map(|i| {
                let bytes = (14.0 + i as f64 / 4.0).exp2().round() as u64;
                let (small, large) = if i < 3 { (1.0, 2.0) } else { (2.0, 1.0) };
                entry("allreduce", 4, bytes, &[("small", small), ("large", large)])
            })
            .collect();
        let measured = merge(&entries);
        let map = Map::new(&measured, 0.1);
        assert!(map.depth("allreduce").unwrap().max >= 1);
        for (i, m) in measured.iter().enumerate() {
            let winner = if i < 3 { "small" } else { "large" };
            assert_eq!(
                map.decide("allreduce", 4, m.bytes, &any),
                Some(winner),
                "{i}"
            );
        }
        // Held out, only the two problems next to the crossover can be decided wrong.
        let all: Vec<&Measured> = measured.iter().collect();
        let penalty = leave_one_out(&all, 0.1);
        assert!(penalty.mean <= 2.0 / 6.0, "{penalty:?}");
    }
}

#[cfg(test)]
mod leave_one_out_tests {
    use super::*;
    use crate::predict::merge;
    use crate::testing::{Lcg, entry};

    #[test]
    fn each_map_without_a_problem_decides_as_one_built_without_it() {
        let mut noise = Lcg(4);
        let codelets = ["a", "b", "c", "d"];
        let entries: Vec<_> = (0..300)
            .map(|_| {
                let comm_size = [2, 3, 4, 8, 16][(noise.next() * 5.0) as usize];
                let bytes = 2f64.powf(3.0 + 19.0 * noise.next()) as u64;
                let mut times: Vec<(&str, f64)> = Vec::new();
                for c in codelets {
                    if noise.next() > 0.15 {
                        times.push((c, 1.0 + noise.next()));
                    }
                }
                entry("alltoall", comm_size, bytes, &times)
            })
            .collect();
        // Alone at their edge of the box: without them the root shrinks.
        let lone = [
            entry("alltoall", 64, 1 << 30, &[("a", 2.0), ("b", 1.0)]),
            entry("alltoall", 2, 1, &[("c", 1.0), ("d", 2.0)]),
        ];
        let measured = merge(&[&entries[..], &lone[..]].concat());
        let all: Vec<&Measured> = measured.iter().collect();
        for tolerance in [0.02, 0.1, 0.3] {
            let maps = LeaveOneOut::new(&all, tolerance);
            for (i, held) in all.iter().enumerate() {
                let applicable = |c: &str| held.time(c).is_some() && c != "d";
                let rest: Vec<&Measured> = all[..i].iter().chain(&all[i + 1..]).copied().collect();
                let rebuilt = Tree::new(&rest, tolerance).and_then(|t| {
                    t.decide(held.comm_size, held.bytes, &applicable)
                        .map(String::from)
                });
                assert_eq!(
                    maps.decide(i, &applicable),
                    rebuilt,
                    "{tolerance} without {i}"
                );
            }
        }
    }
}
