//! The decision map: per operation, which codelet to run for a (communicator size, bytes) that
//! no measured problem covers. Pure: no MPI.
//!
//! A quadtree over (log2 communicator size, log2 bytes) as in Open MPI's tuned component
//! (Pješivac-Grbović et al.): the root is the bounding box of the operation's measured problems
//! (whole powers of two); a region becomes a leaf when one codelet is within `tolerance` of the
//! best at every problem in it, or at depth `MAX_DEPTH`, else it splits into four halves. Every
//! node ranks the codelets measured in it by their mean penalty (time / best − 1) over its
//! problems, those within `tolerance` everywhere first; a problem that did not measure a codelet
//! counts it as `UNMEASURED`. A decision is the first applicable codelet of the deepest node on
//! the way down that holds problems (an empty quarter answers with its parent's ranking).

use std::collections::{BTreeMap, BTreeSet};

use crate::predict::Measured;

/// The deepest a leaf may be (the root is depth 0); six levels always sufficed for Open MPI's
/// measurements.
pub const MAX_DEPTH: u32 = 6;

/// The penalty a problem that did not measure a codelet counts for it when a node ranks its
/// codelets: as if it had taken twice the best.
pub const UNMEASURED: f64 = 1.0;

/// One quadtree per operation.
#[derive(Clone, Debug, Default)]
pub struct Map {
    trees: BTreeMap<String, Tree>,
}

#[derive(Clone, Debug)]
struct Tree {
    area: Area,
    root: Node,
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
    /// The codelets measured in the region, best first.
    ranking: Vec<String>,
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
    /// Mean and worst of (time of the decided codelet / best time − 1) over the decided problems.
    pub mean: f64,
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
        let mut map = Map::default();
        for (op, problems) in by_op {
            map.rebuild(op, &problems, tolerance);
        }
        map
    }

    /// Replaces the map of `op` with one built from `measured` (its problems).
    pub fn rebuild(&mut self, op: &str, measured: &[&Measured], tolerance: f64) {
        match Tree::new(measured, tolerance) {
            Some(tree) => self.trees.insert(op.to_string(), tree),
            None => self.trees.remove(op),
        };
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
        let y = y.clamp(tree.area.y0, tree.area.y1);
        let mut spans: Vec<(f64, f64, &str)> = Vec::new();
        tree.root.spans(tree.area, y, &mut spans);
        let mut ranges: Vec<(u64, u64, String)> = Vec::new();
        for (x0, x1, codelet) in spans {
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
        let points: Vec<(f64, f64, &Measured)> = measured
            .iter()
            .map(|m| {
                let (x, y) = coordinates(m.comm_size, m.bytes);
                (x, y, *m)
            })
            .collect();
        let bounds = |axis: fn(&(f64, f64, &Measured)) -> f64| {
            let low = points
                .iter()
                .map(axis)
                .fold(f64::INFINITY, f64::min)
                .floor();
            let high = points.iter().map(axis).fold(f64::NEG_INFINITY, f64::max);
            (low, (high.floor() + 1.0).max(low + 1.0))
        };
        if points.is_empty() {
            return None;
        }
        let ((x0, x1), (y0, y1)) = (bounds(|p| p.0), bounds(|p| p.1));
        let area = Area { x0, x1, y0, y1 };
        let root = Node::build(&points, area, 0, tolerance);
        Some(Tree { area, root })
    }

    fn decide(
        &self,
        comm_size: u32,
        bytes: u64,
        applicable: &dyn Fn(&str) -> bool,
    ) -> Option<&str> {
        let (x, y) = coordinates(comm_size, bytes);
        let (x, y) = (
            x.clamp(self.area.x0, self.area.x1),
            y.clamp(self.area.y0, self.area.y1),
        );
        let mut path = vec![&self.root];
        let mut area = self.area;
        while let Some(children) = &path.last().expect("root").children {
            let q = area.quarter_of(x, y);
            let Some(child) = &children[q] else { break };
            path.push(child);
            area = area.quarter(q);
        }
        path.iter()
            .rev()
            .find_map(|node| node.ranking.iter().find(|c| applicable(c)))
            .map(String::as_str)
    }
}

impl Node {
    fn build(points: &[(f64, f64, &Measured)], area: Area, depth: u32, tolerance: f64) -> Node {
        let (ranking, fits) = rank(points, tolerance);
        if fits || depth == MAX_DEPTH || points.len() <= 1 {
            return Node {
                ranking,
                children: None,
            };
        }
        let mut quarters: [Vec<(f64, f64, &Measured)>; 4] = Default::default();
        for &p in points {
            quarters[area.quarter_of(p.0, p.1)].push(p);
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

    /// The regions along x that the line at `y` crosses, with their first codelet.
    fn spans<'a>(&'a self, area: Area, y: f64, out: &mut Vec<(f64, f64, &'a str)>) {
        let first = self.ranking.first().map_or("", String::as_str);
        let Some(children) = &self.children else {
            out.push((area.x0, area.x1, first));
            return;
        };
        let row = 2 * usize::from(y >= area.mid().1);
        for q in [row, row + 1] {
            let quarter = area.quarter(q);
            match &children[q] {
                Some(child) => child.spans(quarter, y, out),
                None => out.push((quarter.x0, quarter.x1, first)),
            }
        }
    }
}

/// The codelets measured in a region, best first, and whether the first is within `tolerance`
/// of the best at every problem of the region.
fn rank(points: &[(f64, f64, &Measured)], tolerance: f64) -> (Vec<String>, bool) {
    let codelets: BTreeSet<&str> = points
        .iter()
        .flat_map(|p| p.2.times.iter().map(|(c, _)| c.as_str()))
        .collect();
    let mut scored: Vec<(bool, f64, &str)> = codelets
        .into_iter()
        .map(|c| {
            let (mut sum, mut fits) = (0.0, true);
            for p in points {
                let penalty = p.2.penalty(c);
                fits &= penalty.is_some_and(|pen| pen <= tolerance);
                sum += penalty.unwrap_or(UNMEASURED);
            }
            (!fits, sum / points.len() as f64, c)
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(b.2)));
    let fits = scored.first().is_some_and(|s| !s.0);
    (scored.into_iter().map(|s| s.2.to_string()).collect(), fits)
}

/// The leave-one-out penalty of the map of one operation's problems: each problem decided by
/// the map built from the others, among the codelets it measured (a calibration, or a search
/// that tried every applicable codelet, measured exactly the applicable ones).
pub fn leave_one_out(measured: &[&Measured], tolerance: f64) -> Penalty {
    let mut penalty = Penalty {
        problems: measured.len(),
        ..Penalty::default()
    };
    let mut others: Vec<&Measured> = Vec::with_capacity(measured.len());
    for (i, held) in measured.iter().enumerate() {
        others.clear();
        others.extend(measured[..i].iter().chain(&measured[i + 1..]));
        let Some(tree) = Tree::new(&others, tolerance) else {
            continue;
        };
        let applicable = |c: &str| held.time(c).is_some();
        let Some(decided) = tree.decide(held.comm_size, held.bytes, &applicable) else {
            continue;
        };
        let p = held.penalty(decided).expect("applicable means measured");
        penalty.decided += 1;
        penalty.mean += p;
        penalty.worst = penalty.worst.max(p);
    }
    if penalty.decided > 0 {
        penalty.mean /= penalty.decided as f64;
    }
    penalty
}
