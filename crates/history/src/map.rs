//! The decision map: per operation, which codelet to run for a (communicator size, bytes) that
//! no measured problem covers. Pure: no MPI.
//!
//! A quadtree over (log2 communicator size, log2 bytes) as in Open MPI's tuned component
//! (Pješivac-Grbović et al.): the root is the bounding box of the operation's measured problems
//! (whole powers of two); a region becomes a leaf when one codelet is within `tolerance` of the
//! best at every problem in it, or at depth `MAX_DEPTH`, else it splits into four halves. Every
//! node ranks the codelets measured in it by their mean penalty (time / best − 1) over its
//! problems, those within `tolerance` everywhere first; a problem that did not measure a codelet
//! counts it as `UNMEASURED`, and no penalty counts more. A decision goes down to a leaf (past an
//! empty quarter to its sibling of the same message sizes, else of the same communicator sizes,
//! else the opposite one) and takes the first applicable codelet of the leaf's ranking, else of
//! its parent's, and so on up.

use std::collections::{BTreeMap, BTreeSet};

use crate::predict::Measured;

/// The deepest a leaf may be (the root is depth 0); six levels always sufficed for Open MPI's
/// measurements.
pub const MAX_DEPTH: u32 = 6;

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
#[derive(Clone, Copy, Debug)]
struct Area {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Area {
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
        let bounds = |axis: fn(&Sample) -> f64| {
            let low = samples
                .iter()
                .map(axis)
                .fold(f64::INFINITY, f64::min)
                .floor();
            let high = samples.iter().map(axis).fold(f64::NEG_INFINITY, f64::max);
            (low, (high.floor() + 1.0).max(low + 1.0))
        };
        if samples.is_empty() {
            return None;
        }
        let ((x0, x1), (y0, y1)) = (bounds(|s| s.x), bounds(|s| s.y));
        let area = Area { x0, x1, y0, y1 };
        let all: Vec<&Sample> = samples.iter().collect();
        let root = Node::build(&all, area, 0, tolerance);
        Some(Tree {
            area,
            codelets,
            root,
        })
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

    fn decide_at(&self, x: f64, y: f64, applicable: &dyn Fn(&str) -> bool) -> Option<&str> {
        let mut path = vec![&self.root];
        let mut area = self.area;
        while let Some(children) = &path.last().expect("root").children {
            let q = area.quarter_of(x, y);
            let (q, child) = [q, q ^ 2, q ^ 1, q ^ 3]
                .into_iter()
                .find_map(|q| Some((q, children[q].as_ref()?)))
                .expect("a node that split has a quarter with problems");
            path.push(child);
            area = area.quarter(q);
        }
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
        let (ranking, fits) = rank(points, tolerance);
        if fits || depth == MAX_DEPTH || points.len() <= 1 {
            return Node {
                ranking,
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
            children: Some(Box::new(children)),
        }
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

/// The codelets measured in a region, best first, and whether the first is within `tolerance`
/// of the best at every problem of the region.
fn rank(points: &[&Sample], tolerance: f64) -> (Vec<usize>, bool) {
    let codelets = points.first().map_or(0, |p| p.penalties.len());
    let mut scored: Vec<(bool, f64, usize)> = (0..codelets)
        .filter(|&c| points.iter().any(|p| p.penalties[c].is_some()))
        .map(|c| {
            let (mut sum, mut fits) = (0.0, true);
            for p in points {
                let penalty = p.penalties[c];
                fits &= penalty.is_some_and(|pen| pen <= tolerance);
                sum += penalty.map_or(UNMEASURED, |pen| pen.min(UNMEASURED));
            }
            (!fits, sum / points.len() as f64, c)
        })
        .collect();
    // Codelet indices follow the names: ties go to the first name.
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    let fits = scored.first().is_some_and(|s| !s.0);
    (scored.into_iter().map(|s| s.2).collect(), fits)
}

/// What the map of `problems` (one operation's) decides: for a leave-one-out, which builds one
/// map per problem held out.
pub(crate) fn decide_once(
    problems: &[&Measured],
    tolerance: f64,
    comm_size: u32,
    bytes: u64,
    applicable: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let tree = Tree::new(problems, tolerance)?;
    tree.decide(comm_size, bytes, applicable).map(String::from)
}

/// The leave-one-out penalty of the map of one operation's problems: each problem decided by
/// the map built from the others, among the codelets it measured (a calibration, or a search
/// that tried every applicable codelet, measured exactly the applicable ones).
pub fn leave_one_out(measured: &[&Measured], tolerance: f64) -> Penalty {
    let mut penalties = Vec::with_capacity(measured.len());
    let mut others: Vec<&Measured> = Vec::with_capacity(measured.len());
    for (i, held) in measured.iter().enumerate() {
        others.clear();
        others.extend(measured[..i].iter().chain(&measured[i + 1..]));
        let applicable = |c: &str| held.time(c).is_some();
        if let Some(decided) =
            decide_once(&others, tolerance, held.comm_size, held.bytes, &applicable)
        {
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
}
