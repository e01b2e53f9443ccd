//! Replays a tuned run from traces (COMMTUNE_TRACE) under any settings, without MPI: the evidence
//! for the tuner's defaults, and a test of the tuner's decisions that runs anywhere.
//!
//! **The model** (`Model::build`), per key, from the traces of one or more runs (each rank's
//! file of a run; instances matched across ranks by the key's instance number). Every instance
//! keeps, per rank, its *period* (this rank's entry of the instance to its entry of the next:
//! what the application feels, the work between calls included), its *duration* (the call alone,
//! what `local` timing measures) and the wait in its barrier, if it had one. Per codelet:
//! - *steady* instances: the codelet ran at least `SETTLE` times in a row before, no barrier;
//! - *switches*: the first `SETTLE` instances after another codelet ran, with that codelet;
//! - *barriered* instances, after a barrier (traces of barrier or period timing), and the first
//!   instances after a switch that had one (barrier timing with blocks of one).
//!
//! Per key: what a small reduction costs (a checkpoint or a round's agreement: the period of an
//! instance whose successor held one, beyond the codelet's steady median), a barrier's latency,
//! and the machine's *disturbances* (`DISTURBED`, `STALL`), pooled. Each run is classified
//! apart and scaled to one level (`levels`) before its instances join the pools.
//!
//! **The replay** (`replay`) runs N calls of the key, with the library's checkpoints (each a
//! reduction, spaced by `checkpoints::Spacing`): native until the first checkpoint after
//! COMMTUNE_WARMUP calls whose search pays for itself, then the search, driven by the library's own
//! `Sampler`, `Plan` and `Prediction::assess_race` with one sampler per rank and the estimates
//! reduced to their maximum over ranks (`tuner::consensus`), then the winner, with the self-check
//! 18 calls after the decision (a winner that missed its prediction or won a close race puts the
//! runner-up on trial for 18 calls, or the best codelet that paces where its window had a tail, and
//! a close race its third after it; a wrong decision reopens the search once with the other timing,
//! then keeps the runner-up that beat it, as it does at once a paced codelet that beat a winner
//! with a tail). Each instance is drawn from the model by what it is: after a switch, one of the
//! codelet's switches (after the same predecessor when the traces have one); after a barrier, a
//! barriered instance; else the next steady instance, continuing from a random place after each
//! switch so that a stretch keeps the trace's bursts. Every rank gets the same traced instance
//! (ranks' noise stays correlated as it was), and a disturbance is added at the traced rate. Ranks
//! run on their own clocks, but no collective or barrier ends before the last rank entered it. The
//! run's time is the latest rank's clock at the end; the oracle runs the codelet with the least
//! mean period (slowest rank, disturbances included) for all N calls.
//!
//! **What it gets wrong.** Instances are exchangeable within their kind: a state that lasts (a
//! network shaper's bucket, a machine that gets busier) is averaged over, and runs recorded
//! minutes apart that saw different machines are mixed, scaled to one level only where their
//! codelets agree on it (`levels`). A switch costs its first `SETTLE` instances, no more. A
//! barrier the traces have no instance for (a codelet whose barriered instances all held a
//! reduction) is replaced by the ranks leaving together and the fastest rank's call. Disturbances hit any codelet at one rate per instance, whatever its length.
//! Drift checks after the self-check and the other keys of a communicator are not replayed. A
//! checkpoint is acted on at its call and costs a blocking reduction, as the traces of
//! tests/data measured it; the library starts it there, acts on it `checkpoints::FINISH_AFTER`
//! calls later, and pays less (modelled, the delay moved the replays' median regrets both ways,
//! by up to 0.05 on the keys whose decisions split).

use std::collections::BTreeMap;

use crate::budget;
use crate::check::{self, AfterTrial, Judgement, Prediction, Verdict};
use crate::checkpoints::{self, Found, Spacing};
use crate::policy::{Agreed, Candidate, Next, Plan, Search};
use crate::sampling::{self, Sampler, Turn};
use crate::settings::{Settings, Timing};
use crate::stats::{Filter, STALL};
use crate::trace::{Kind, Record, Trace};
use crate::trial::{Ended, Trial, Window};

/// Steady instances a codelet needs in two runs of a key for its medians to tell the runs'
/// levels apart (`levels`).
pub const LEVEL_INSTANCES: usize = 5;

/// How far apart the codelets' ratios of two runs' levels may be for the runs to be scaled
/// (`levels`): in tests/data's 8-byte allreduce on the rig, native and `linear` put the barrier
/// run at 0.66 and 0.83 of the brute run's level (1.26 apart) and the barrier-of-one run at 0.68
/// and 0.72, each codelet clearly slower in both.
pub const LEVEL_AGREEMENT: f64 = 1.3;

/// Instances after a switch that the switch affects, each drawn in its place: the first pays
/// for what the predecessor left in the queues (up to 1.9 times a steady instance in
/// tests/data), the second is off by up to 16 % either way (a slow first instance lined the ranks
/// up), the third is within 10 % of the steady median.
pub const SETTLE: usize = 2;

/// An instance longer than this many times its codelet's median steady period (and not a stall)
/// was disturbed by the machine rather than slowed by its codelet: a preemption of a rank, the
/// first calls of the program, a page fault. Left in its codelet's pool, such an instance would
/// be charged to whichever codelet happened to run then (a few of them among 40 instances
/// decide which codelet has the least mean), so disturbances are pooled per key instead, and
/// the replay adds one to any instance with the rate the traces had them. The network's own
/// effects in tests/data stay within about 3.5 times the median (ring at 1 MiB on the rig).
/// Instances after a switch are the switch's cost whatever their size: only stalls leave them.
pub const DISTURBED: f64 = 4.0;

/// A codelet whose instances beyond `DISTURBED` are more frequent than the other codelets' could
/// make them by chance (a one-sided binomial test at this level) has tails of its own: they stay
/// in its pool, as part of what it costs. On the 1 Gbit/s rig, native's and the linear codelets'
/// 64 KiB alltoalls post every send at once, the shaper drops what overflows and TCP retransmits:
/// one call in four to six takes 5 to 15 times the median, while paced codelets (pairwise_excl)
/// have none in 64. Pooled, those tails would be charged to every codelet alike.
pub const OWN_TAILS: f64 = 1e-3;

/// The probability of at least `k` successes in `n` draws of probability `p` (0 < p < 1).
fn binomial_tail(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    // ln of each term C(n, i) p^i (1-p)^(n-i), i = k..=n, built from the one before.
    let ln_ratio = (p / (1.0 - p)).ln();
    let ln_choose: f64 = (0..k).map(|i| ((n - i) as f64 / (i + 1) as f64).ln()).sum();
    let mut ln_term = ln_choose + k as f64 * p.ln() + (n - k) as f64 * (1.0 - p).ln();
    let mut sum = 0.0;
    for i in k..=n {
        sum += ln_term.exp();
        ln_term += ((n - i) as f64 / (i + 1) as f64).ln() + ln_ratio;
    }
    sum.min(1.0)
}

/// Which of `counts` (each codelet's disturbed and total instances) have tails of their own
/// (`OWN_TAILS`): the most improbable one at a time, each against the rate of the codelets not
/// yet marked (with one disturbed and one calm instance added, so that a rate of zero does not
/// make one long call a tail).
fn own_tails(counts: &[(usize, usize)]) -> Vec<bool> {
    let mut own = vec![false; counts.len()];
    loop {
        let improbable = (0..counts.len())
            .filter(|&c| !own[c])
            .map(|c| {
                let (d, n) = (0..counts.len())
                    .filter(|&o| o != c && !own[o])
                    .fold((1, 2), |(d, n), o| (d + counts[o].0, n + counts[o].1));
                let (disturbed, instances) = counts[c];
                (c, binomial_tail(instances, disturbed, d as f64 / n as f64))
            })
            .filter(|&(_, p)| p < OWN_TAILS)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match improbable {
            Some((c, _)) => own[c] = true,
            None => return own,
        }
    }
}

/// One traced instance, per rank, in nanoseconds: the wait in its barrier (zero without one),
/// the call, and its period (from its entry to the entry of the next instance).
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub wait: Vec<u64>,
    pub duration: Vec<u64>,
    pub period: Vec<u64>,
}

impl Instance {
    fn scale(&mut self, factor: f64) {
        let times = self.wait.iter_mut().chain(&mut self.duration);
        for t in times.chain(&mut self.period) {
            *t = scaled(*t, factor);
        }
    }

    fn slowest_period(&self) -> f64 {
        self.period.iter().copied().max().unwrap_or(0) as f64
    }
}

/// One codelet of a key's model.
#[derive(Clone, Debug)]
pub struct CodeletModel {
    pub name: String,
    pub candidate: Candidate,
    /// Instances at least `SETTLE` after a switch, without a barrier, in trace order.
    pub steady: Vec<Instance>,
    /// The first `SETTLE` instances after each switch (fewer when the stretch ended or the next
    /// had a barrier), with the registry index of the codelet before.
    pub switches: Vec<(usize, Vec<Instance>)>,
    /// Instances after a barrier, not first after a switch (traces of barrier or period timing).
    pub barriered: Vec<Instance>,
    /// First instances after a switch that had a barrier (traces of barrier timing with blocks
    /// of one), with the codelet before.
    pub barriered_switches: Vec<(usize, Instance)>,
}

impl CodeletModel {
    /// Mean steady period of each rank.
    pub fn mean_period(&self) -> Vec<f64> {
        let ranks = self.steady.first().map_or(0, |i| i.period.len());
        (0..ranks)
            .map(|r| {
                let sum: u64 = self.steady.iter().map(|i| i.period[r]).sum();
                sum as f64 / self.steady.len() as f64
            })
            .collect()
    }

    /// The application's steady cost per call: the slowest rank's mean period.
    pub fn cost(&self) -> f64 {
        self.mean_period().into_iter().fold(0.0, f64::max)
    }

    /// Each rank's median steady period.
    pub fn rank_medians(&self) -> Vec<f64> {
        let ranks = self.steady.first().map_or(0, |i| i.period.len());
        (0..ranks)
            .map(|r| {
                median(
                    &self
                        .steady
                        .iter()
                        .map(|i| i.period[r] as f64)
                        .collect::<Vec<_>>(),
                )
            })
            .collect()
    }

    /// The slowest rank's median steady period.
    pub fn steady_median(&self) -> f64 {
        median(
            &self
                .steady
                .iter()
                .map(Instance::slowest_period)
                .collect::<Vec<_>>(),
        )
    }

    /// The median over switches of the `nth` instance after them (0: the first), its period
    /// (slowest rank) over the steady median: what it costs in steady calls. None without one.
    pub fn after_switch(&self, nth: usize) -> Option<f64> {
        let periods: Vec<f64> = self
            .switches
            .iter()
            .filter_map(|(_, run)| Some(run.get(nth)?.slowest_period()))
            .collect();
        (!periods.is_empty()).then(|| median(&periods) / self.steady_median())
    }
}

fn scaled(ns: u64, factor: f64) -> u64 {
    (ns as f64 * factor).round() as u64
}

/// The factor that brings each run of a key to the level of the run with the most steady
/// instances (the reference): the median, over the codelets with `LEVEL_INSTANCES` steady
/// instances in both, of the reference's steady median over the run's, where there are two such
/// codelets at least and all agree on it within `LEVEL_AGREEMENT` (a load shows on every codelet
/// alike; one codelet's level is as likely its own state, such as a shaper's bucket); else 1.
/// Runs recorded minutes apart see different loads, and each run has steady instances of few
/// codelets besides the one it settled on: pooled unscaled, a codelet that ran steadily only in
/// a busy run looked slower than one that ran only in a quiet run. In tests/data's 8-byte
/// allreduce on the rig, native's and `linear`'s medians were 1.2 to 1.5 times the brute run's
/// in the two barrier runs, and the other codelets ran steadily only in the brute run: pooled
/// unscaled, `linear` cost 64.6 us per call against 57.4 in the brute run alone, and
/// `recursive_doubling` (57.8) looked the best codelet; scaled, `linear` is (56.8), and replays
/// of the library's defaults at 400 calls came to 1.089 of it instead of 1.197 of
/// `recursive_doubling` (2000 calls: 1.021 instead of 1.136). No other key there moved by more
/// than 0.002: its runs were at one level, or their codelets did not agree on one.
fn levels(parts: &[&Model]) -> Vec<f64> {
    let steady = |m: &Model| m.codelets.iter().map(|c| c.steady.len()).sum::<usize>();
    let Some(reference) = parts.iter().max_by_key(|m| steady(m)) else {
        return Vec::new();
    };
    parts
        .iter()
        .map(|part| {
            let ratios: Vec<f64> = reference
                .codelets
                .iter()
                .zip(&part.codelets)
                .filter(|(r, p)| {
                    r.steady.len() >= LEVEL_INSTANCES && p.steady.len() >= LEVEL_INSTANCES
                })
                .map(|(r, p)| r.steady_median() / p.steady_median())
                .filter(|ratio| ratio.is_finite() && *ratio > 0.0)
                .collect();
            let (least, most) = ratios
                .iter()
                .fold((f64::INFINITY, 0.0_f64), |(l, m), r| (l.min(*r), m.max(*r)));
            if ratios.len() >= 2 && most <= least * LEVEL_AGREEMENT {
                median(&ratios)
            } else {
                1.0
            }
        })
        .collect()
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What the traces say about one key.
#[derive(Clone, Debug)]
pub struct Model {
    pub key: u64,
    pub op: String,
    pub bytes: u64,
    pub ranks: usize,
    /// The traced codelets with steady instances, in registry order (native first).
    pub codelets: Vec<CodeletModel>,
    /// A small reduction on each rank, ns.
    pub consensus: Vec<u64>,
    /// A barrier's own latency (the last rank's wait in it), ns: for barriers the traces have no
    /// barriered instance of the codelet for.
    pub barrier: u64,
    /// Runs the model was built from.
    pub runs: usize,
    /// Codelets the traces name but that never ran steadily (left out).
    pub missing: Vec<String>,
    /// Instances left out as stalls (`STALL`).
    pub stalls: usize,
    /// Disturbances (`DISTURBED`): each one's time beyond its codelet's median, per rank; and
    /// the share of instances that had one.
    pub disturbances: Vec<Vec<u64>>,
    pub disturbed: f64,
    /// Codelets whose long instances are their own (`OWN_TAILS`), kept in their pools.
    pub tailed: Vec<String>,
}

/// One run's instances of one key: per rank, by instance number.
struct KeyRun<'t> {
    ranks: Vec<BTreeMap<u64, &'t Record>>,
}

/// What the classification of one key's instances leaves for the second pass: instances
/// followed by a reduction (codelet, periods), and barriers' latencies (ns).
#[derive(Default)]
struct Pending {
    events: Vec<(usize, Vec<u64>)>,
    barriers: Vec<u64>,
    reduced: Vec<Reduced>,
}

impl Pending {
    /// Multiplies every time of one run's pending instances by `factor`.
    fn scale(&mut self, factor: f64) {
        for (_, periods) in &mut self.events {
            for p in periods {
                *p = scaled(*p, factor);
            }
        }
        for latency in &mut self.barriers {
            *latency = scaled(*latency, factor);
        }
        for reduced in &mut self.reduced {
            reduced.instance.scale(factor);
        }
    }
}

/// A first instance after a switch whose successor held a reduction (the last codelet of a
/// round with blocks of one): kept once the reduction's cost is known, without it.
struct Reduced {
    codelet: usize,
    prev: usize,
    instance: Instance,
}

impl Model {
    /// The models of every key in `runs` (each run: the trace files of its ranks, any order).
    /// Each run's instances of a key are classified apart, scaled to one level (`levels`) and
    /// then pooled.
    pub fn build(runs: &[Vec<Trace>]) -> Result<Vec<Model>, String> {
        // Per key, in the order keys first appear: each run's part and what it left pending.
        let mut parts: Vec<Vec<(Model, Pending)>> = Vec::new();
        for (number, run) in runs.iter().enumerate() {
            let ranks = run.first().map_or(0, |t| t.ranks as usize);
            let mut seen: Vec<bool> = vec![false; ranks];
            for t in run {
                let slot = seen
                    .get_mut(t.rank as usize)
                    .filter(|_| t.ranks as usize == ranks);
                match slot {
                    Some(s) if !*s => *s = true,
                    _ => return Err(format!("run {}: rank files do not match", number + 1)),
                }
            }
            if seen.iter().any(|s| !s) {
                return Err(format!("run {}: a rank's file is missing", number + 1));
            }
            let mut run: Vec<&Trace> = run.iter().collect();
            run.sort_by_key(|t| t.rank);
            let mut keys: Vec<u64> = run[0].records.iter().map(|r| r.key).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                let key_run = KeyRun {
                    ranks: run
                        .iter()
                        .map(|t| {
                            t.records
                                .iter()
                                .filter(|r| r.key == key)
                                .map(|r| (r.k, r))
                                .collect()
                        })
                        .collect(),
                };
                let first = key_run.ranks[0]
                    .values()
                    .next()
                    .expect("the key has records");
                let codelets = run[0].codelets_of(&first.op).ok_or_else(|| {
                    format!("run {}: no codelets listed for {}", number + 1, first.op)
                })?;
                let mut part = Model::empty(key, first, ranks, codelets);
                let mut pending = Pending::default();
                part.add(&key_run, &mut pending);
                match parts.iter_mut().find(|p| p[0].0.key == key) {
                    Some(p) if p[0].0.ranks != ranks => {
                        return Err(format!("key {key:016x}: runs with different rank counts"));
                    }
                    // Pooled codelet by codelet: the lists must be one.
                    Some(p) if !p[0].0.same_codelets(&part) => {
                        return Err(format!(
                            "key {key:016x}: runs list different codelets for {}",
                            first.op
                        ));
                    }
                    Some(p) => p.push((part, pending)),
                    None => parts.push(vec![(part, pending)]),
                }
            }
        }
        let mut models: Vec<Model> = parts.into_iter().map(Model::pool).collect();
        models.retain(|m| !m.codelets.is_empty());
        Ok(models)
    }

    /// One key's model from its runs' parts: each scaled to the level of the run with the most
    /// steady instances (`levels`), then pooled in run order.
    fn pool(parts: Vec<(Model, Pending)>) -> Model {
        let scales = levels(&parts.iter().map(|(m, _)| m).collect::<Vec<_>>());
        let mut parts = parts.into_iter().zip(scales);
        let ((mut model, mut pending), scale) = parts.next().expect("a key has a run");
        model.scale(scale);
        pending.scale(scale);
        model.runs = 1;
        for ((mut part, mut more), scale) in parts {
            part.scale(scale);
            more.scale(scale);
            for (into, from) in model.codelets.iter_mut().zip(part.codelets) {
                into.steady.extend(from.steady);
                into.switches.extend(from.switches);
                into.barriered.extend(from.barriered);
                into.barriered_switches.extend(from.barriered_switches);
            }
            pending.events.extend(more.events);
            pending.barriers.extend(more.barriers);
            pending.reduced.extend(more.reduced);
            model.runs += 1;
        }
        model.finish(&pending);
        model
    }

    /// Whether `other` lists the same codelets, in the same order.
    fn same_codelets(&self, other: &Model) -> bool {
        let listed = |m: &Model| -> Vec<(String, Candidate)> {
            let codelets = m.codelets.iter();
            codelets.map(|c| (c.name.clone(), c.candidate)).collect()
        };
        listed(self) == listed(other)
    }

    /// Multiplies every time of the part by `factor`.
    fn scale(&mut self, factor: f64) {
        for c in &mut self.codelets {
            let instances = c.steady.iter_mut().chain(&mut c.barriered);
            let switches = c.switches.iter_mut().flat_map(|(_, run)| run);
            let barriered = c.barriered_switches.iter_mut().map(|(_, i)| i);
            for i in instances.chain(switches).chain(barriered) {
                i.scale(factor);
            }
        }
    }

    fn empty(key: u64, first: &Record, ranks: usize, codelets: &[crate::trace::Codelet]) -> Model {
        Model {
            key,
            op: first.op.clone(),
            bytes: first.bytes,
            ranks,
            codelets: codelets
                .iter()
                .enumerate()
                .map(|(index, c)| CodeletModel {
                    name: c.name.clone(),
                    candidate: Candidate {
                        index,
                        partners: c.partners,
                        collectives: c.collectives,
                    },
                    steady: Vec::new(),
                    switches: Vec::new(),
                    barriered: Vec::new(),
                    barriered_switches: Vec::new(),
                })
                .collect(),
            consensus: vec![0; ranks],
            barrier: 0,
            runs: 0,
            missing: Vec::new(),
            stalls: 0,
            disturbances: Vec::new(),
            disturbed: 0.0,
            tailed: Vec::new(),
        }
    }

    /// Classifies one run's instances (see the module's documentation).
    fn add(&mut self, run: &KeyRun, pending: &mut Pending) {
        let on_all = |k: u64| -> Option<Vec<&Record>> {
            run.ranks.iter().map(|r| r.get(&k).copied()).collect()
        };
        // The position of the instance in its codelet's stretch (1: first after a switch), and
        // the switch being collected.
        let mut position = 0;
        let mut previous: Option<(u64, usize)> = None;
        let mut open: Option<(usize, usize, Vec<Instance>)> = None;
        for &k in run.ranks[0].keys() {
            let Some(here) = on_all(k) else {
                previous = None;
                continue;
            };
            let c = here[0].codelet;
            let prev = previous.filter(|(at, _)| *at + 1 == k).map(|(_, c)| c);
            previous = Some((k, c));
            position = match prev {
                Some(p) if p == c => position + 1,
                _ => 1,
            };
            let Some(next) = on_all(k + 1) else {
                continue;
            };
            if here.iter().any(|r| r.codelet != c) || c >= self.codelets.len() {
                continue;
            }
            let wait: Vec<u64> = here.iter().map(|r| r.call_start - r.start).collect();
            let instance = Instance {
                period: here
                    .iter()
                    .zip(&next)
                    .map(|(h, n)| n.start.saturating_sub(h.start))
                    .collect(),
                duration: here
                    .iter()
                    .map(|r| r.end.saturating_sub(r.call_start))
                    .collect(),
                wait,
            };
            let (n, kind, next_kind) = (next[0].codelet, here[0].kind, next[0].kind);
            // The next instance's slow path held a reduction: a checkpoint (the search starts),
            // a round's agreement (the schedule starts again from its lowest codelet), or the
            // decision. Its time is in this instance's period.
            let reduction = (next_kind == Kind::Search && (kind != Kind::Search || n < c))
                || (kind == Kind::Search && next_kind != Kind::Search);
            if position == 1 {
                if let Some((c, p, run)) = open.take() {
                    self.codelets[c].switches.push((p, run));
                }
                // The key's first instance follows nothing: no switch to collect.
                open = prev.map(|p| (c, p, Vec::new()));
            }
            let barrier = instance.wait.iter().any(|w| *w > 0);
            if barrier {
                let latency = instance.wait.iter().copied().min().unwrap_or(0);
                pending.barriers.push(latency);
            }
            match (barrier, reduction) {
                (true, false) if position >= 2 => self.codelets[c].barriered.push(instance),
                (true, false) => {
                    if let Some(p) = prev {
                        self.codelets[c].barriered_switches.push((p, instance));
                    }
                }
                (true, true) if position == 1 => {
                    if let Some(prev) = prev {
                        pending.reduced.push(Reduced {
                            codelet: c,
                            prev,
                            instance,
                        });
                    }
                }
                (false, true) if position > SETTLE => pending.events.push((c, instance.period)),
                (false, false) if position > SETTLE => self.codelets[c].steady.push(instance),
                (false, false) if position >= 1 => {
                    if let Some((_, _, run)) = open
                        .as_mut()
                        .filter(|(o, _, r)| *o == c && r.len() + 1 == position)
                    {
                        run.push(instance);
                    }
                }
                _ => {}
            }
        }
        if let Some((c, p, run)) = open.take() {
            self.codelets[c].switches.push((p, run));
        }
        for codelet in &mut self.codelets {
            codelet.switches.retain(|(_, run)| !run.is_empty());
        }
    }

    fn finish(&mut self, pending: &Pending) {
        let counts: Vec<(usize, usize)> = self
            .codelets
            .iter()
            .map(|c| {
                let slowest = c.steady_median();
                let pool = || c.steady.iter().chain(&c.barriered);
                let ratios = pool().map(|i| i.slowest_period() / slowest);
                let disturbed = ratios.filter(|r| (DISTURBED..=STALL).contains(r)).count();
                (disturbed, pool().count())
            })
            .collect();
        let own = own_tails(&counts);
        let mut instances = 0;
        for (c, own) in self.codelets.iter_mut().zip(own) {
            if own {
                self.tailed.push(c.name.clone());
            }
            let (slowest, medians) = (c.steady_median(), c.rank_medians());
            let mut sort = |i: &Instance| -> bool {
                // The machine's rate: among the codelets whose long instances are its.
                instances += usize::from(!own);
                let ratio = i.slowest_period() / slowest;
                if ratio > STALL {
                    self.stalls += 1;
                } else if ratio > DISTURBED && !own {
                    let excess = i.period.iter().zip(&medians);
                    let excess = excess.map(|(p, m)| (*p as f64 - m).max(0.0) as u64);
                    self.disturbances.push(excess.collect());
                } else {
                    return true;
                }
                false
            };
            c.steady.retain(&mut sort);
            c.barriered.retain(&mut sort);
            // What follows a switch is the switch's cost, however large: only stalls go.
            let limit = STALL * slowest;
            let before = c.switches.len() + c.barriered_switches.len();
            c.barriered_switches
                .retain(|(_, i)| i.slowest_period() <= limit);
            c.switches
                .retain(|(_, run)| run.iter().all(|i| i.slowest_period() <= limit));
            self.stalls += before - c.switches.len() - c.barriered_switches.len();
        }
        self.disturbed = self.disturbances.len() as f64 / instances.max(1) as f64;
        let medians: Vec<Vec<f64>> = self
            .codelets
            .iter()
            .map(|c| {
                (0..self.ranks)
                    .map(|r| {
                        let periods: Vec<f64> =
                            c.steady.iter().map(|i| i.period[r] as f64).collect();
                        median(&periods)
                    })
                    .collect()
            })
            .collect();
        let mine: Vec<&(usize, Vec<u64>)> = pending
            .events
            .iter()
            .filter(|(c, _)| !self.codelets[*c].steady.is_empty())
            .collect();
        self.consensus = (0..self.ranks)
            .map(|r| {
                let excess: Vec<f64> = mine
                    .iter()
                    .map(|(c, period)| (period[r] as f64 - medians[*c][r]).max(0.0))
                    .collect();
                median(&excess).round() as u64
            })
            .collect();
        for reduced in &pending.reduced {
            let (codelet, prev) = (reduced.codelet, reduced.prev);
            let mut instance = reduced.instance.clone();
            for (r, period) in instance.period.iter_mut().enumerate() {
                let floor = instance.wait[r] + instance.duration[r];
                *period = period.saturating_sub(self.consensus[r]).max(floor);
            }
            let c = &mut self.codelets[codelet];
            if instance.slowest_period() <= STALL * c.steady_median() {
                c.barriered_switches.push((prev, instance));
            } else {
                self.stalls += 1;
            }
        }
        let latencies: Vec<f64> = pending.barriers.iter().map(|w| *w as f64).collect();
        self.barrier = if latencies.is_empty() {
            // A barrier is one small collective, as the reduction is.
            self.consensus.iter().copied().max().unwrap_or(0)
        } else {
            median(&latencies).round() as u64
        };
        self.missing = self
            .codelets
            .iter()
            .filter(|c| c.steady.is_empty())
            .map(|c| c.name.clone())
            .collect();
        self.codelets.retain(|c| !c.steady.is_empty());
        if self.codelets.first().is_none_or(|c| c.candidate.index != 0) {
            // Without native's steady state there is no baseline to decide against.
            self.codelets.clear();
        }
    }

    fn position(&self, index: usize) -> usize {
        self.codelets
            .iter()
            .position(|c| c.candidate.index == index)
            .expect("the replay runs only modelled codelets")
    }

    /// What codelet `c` costs the application per call when it runs alone: the slowest rank's
    /// mean steady period, with the disturbances at their rate.
    pub fn cost(&self, c: &CodeletModel) -> f64 {
        let n = self.disturbances.len().max(1) as f64;
        c.mean_period()
            .iter()
            .enumerate()
            .map(|(r, mean)| {
                let excess: u64 = self.disturbances.iter().map(|d| d[r]).sum();
                let excess = if self.disturbances.is_empty() {
                    0.0
                } else {
                    excess as f64 / n
                };
                mean + self.disturbed * excess
            })
            .fold(0.0, f64::max)
    }

    /// The codelet with the least cost alone, and its cost per call.
    pub fn best(&self) -> (usize, f64) {
        self.codelets
            .iter()
            .map(|c| (c.candidate.index, self.cost(c)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0))
    }

    pub fn name(&self, index: usize) -> &str {
        &self.codelets[self.position(index)].name
    }
}

/// What a replay gives.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The codelet production ran last (registry index).
    pub decision: usize,
    /// Instances run as part of a search, all searches together.
    pub searched: u64,
    pub searches: u32,
    /// The run's time (slowest rank), and the oracle's: the best codelet alone for every call.
    pub total_ns: f64,
    pub oracle: usize,
    pub oracle_ns: f64,
    /// total / oracle.
    pub regret: f64,
    /// The last decision's agreed estimate (None when no search decided it: the self-check's
    /// fallback to native).
    pub predicted_ns: Option<f64>,
    /// The decided codelet's time per production call as the application felt it (slowest rank's
    /// mean period), after its last decision.
    pub realised_ns: f64,
    /// The first self-check's verdict, when one was made.
    pub check: Option<Verdict>,
    /// What the first search decided, before any self-check (None when none decided).
    pub searched_winner: Option<usize>,
}

/// The replay's ranks, clocks and draws.
struct Sim<'m> {
    model: &'m Model,
    clock: Vec<u64>,
    /// Each rank's timed time of the key (the budget's denominator).
    ticks: Vec<u64>,
    /// Next steady and barriered instance of each modelled codelet.
    cursor: Vec<usize>,
    barriered: Vec<usize>,
    /// The codelet of the last instance, its position in its stretch, and the switch drawn at
    /// the stretch's start (codelet position, switch).
    prev: Option<usize>,
    position: usize,
    switch: Option<(usize, usize)>,
    rng: u64,
}

/// One instance as each rank saw it: (entry, call start, end).
type Times = Vec<(u64, u64, u64)>;

impl<'m> Sim<'m> {
    fn new(model: &'m Model, seed: u64) -> Sim<'m> {
        let n = model.codelets.len();
        let mut sim = Sim {
            model,
            clock: vec![0; model.ranks],
            ticks: vec![0; model.ranks],
            cursor: vec![0; n],
            barriered: vec![0; n],
            prev: None,
            position: 0,
            switch: None,
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        };
        for at in 0..n {
            sim.cursor[at] = sim.random(model.codelets[at].steady.len());
            sim.barriered[at] = sim.random(model.codelets[at].barriered.len());
        }
        sim
    }

    /// Uniform in 0..n (xorshift64*).
    fn random(&mut self, n: usize) -> usize {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) % n.max(1) as u64) as usize
    }

    /// A random one of `after` (instances with the codelet before them), one after `prev` when
    /// there are such.
    fn pick<T>(&mut self, after: &[(usize, T)], prev: usize) -> usize {
        let matching = after.iter().filter(|(p, _)| *p == prev).count();
        if matching == 0 {
            return self.random(after.len());
        }
        let nth = self.random(matching);
        after
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| *p == prev)
            .nth(nth)
            .map_or(0, |(i, _)| i)
    }

    /// One small reduction on every rank.
    fn consensus(&mut self) {
        for (c, cost) in self.clock.iter_mut().zip(&self.model.consensus) {
            *c += cost;
        }
    }

    /// The next instance of codelet `index` (after a barrier when `barrier`): whether it comes
    /// with its traced barrier.
    fn draw(&mut self, index: usize, barrier: bool) -> (Instance, bool) {
        let at = self.model.position(index);
        self.position = match self.prev {
            Some(prev) if prev == index => self.position + 1,
            // The key's first call: nothing ran before it.
            None => SETTLE + 1,
            Some(_) => 1,
        };
        let codelet = &self.model.codelets[at];
        if self.position == 1 {
            let prev = self.prev.unwrap_or(0);
            self.prev = Some(index);
            // The stretch continues from a random place of the steady instances.
            self.cursor[at] = self.random(codelet.steady.len());
            self.barriered[at] = self.random(codelet.barriered.len());
            if barrier && !codelet.barriered_switches.is_empty() {
                self.switch = None;
                let pick = self.pick(&codelet.barriered_switches, prev);
                return (codelet.barriered_switches[pick].1.clone(), true);
            }
            self.switch =
                (!codelet.switches.is_empty()).then(|| (at, self.pick(&codelet.switches, prev)));
        }
        self.prev = Some(index);
        if barrier && self.position >= 2 && !codelet.barriered.is_empty() {
            let instance = codelet.barriered[self.barriered[at]].clone();
            self.barriered[at] = (self.barriered[at] + 1) % codelet.barriered.len();
            return (instance, true);
        }
        let switched = self
            .switch
            .filter(|(a, _)| *a == at)
            .and_then(|(_, i)| codelet.switches[i].1.get(self.position - 1));
        if let Some(instance) = switched {
            return (instance.clone(), false);
        }
        let instance = codelet.steady[self.cursor[at]].clone();
        self.cursor[at] = (self.cursor[at] + 1) % codelet.steady.len();
        (instance, false)
    }

    /// Runs one instance of codelet `index` (after a barrier when `barrier`); `timed`: it counts
    /// in the budget's denominator.
    fn run(&mut self, index: usize, barrier: bool, timed: bool) -> Times {
        let (mut instance, traced) = self.draw(index, barrier);
        let disturbances = &self.model.disturbances;
        let chance = (self.model.disturbed * 1e6) as usize;
        if !disturbances.is_empty() && self.random(1_000_000) < chance {
            let excess = &disturbances[self.random(disturbances.len())];
            for (r, extra) in excess.iter().enumerate() {
                instance.duration[r] += extra;
                instance.period[r] += extra;
            }
        }
        let entry = self.clock.clone();
        // The ranks' clocks run apart as their periods are drawn, but a collective cannot end
        // on any rank before the last one entered it, nor a barrier: that keeps them together
        // as the real ranks were.
        let last = entry.iter().copied().max().unwrap_or(0);
        let latency = instance.wait.iter().copied().min().unwrap_or(0);
        // A barrier the traces have no instance for: every rank leaves it when the last one
        // arrived, after its latency, and the call then costs what the fastest rank's cost (the
        // rank that waited least in the call is the one that arrived last).
        let fastest = instance.duration.iter().copied().min().unwrap_or(0);
        let mut times = Vec::with_capacity(self.model.ranks);
        for (r, &entered) in entry.iter().enumerate() {
            let (wait, duration, period) =
                (instance.wait[r], instance.duration[r], instance.period[r]);
            // After the call: the rest of the period (the application's work, the next entry).
            let after = period.saturating_sub(wait + duration);
            let (call_start, end, next) = match (barrier, traced) {
                (true, false) => {
                    let start = last + self.model.barrier;
                    (start, start + fastest, start + fastest + after)
                }
                (true, true) => {
                    let start = last + latency;
                    (start, start + duration, start + duration + after)
                }
                (false, _) => {
                    let end = (entered + duration).max(last);
                    (entered, end, (entered + period).max(end))
                }
            };
            self.clock[r] = next;
            if timed {
                self.ticks[r] += end - entered;
            }
            times.push((entered, call_start, end));
        }
        times
    }
}

/// Production after a decision.
struct Production {
    winner: usize,
    predicted: Option<Prediction>,
    /// The self-check's call, and the first call of its window.
    check_at: Option<u64>,
    window_from: u64,
    /// Per rank: the window's first call start and its durations.
    window: Vec<(Option<u64>, Vec<u64>)>,
    /// Per rank: production periods since the decision, and their count.
    periods: Vec<u64>,
    calls: u64,
    /// The codelet on trial (a window of production calls after the winner missed or won a
    /// close race), between the winner's windows.
    trial: Option<Trial<Window>>,
}

impl Production {
    /// The codelet production runs.
    fn running(&self) -> usize {
        self.trial.map_or(self.winner, |t| t.running(self.winner))
    }

    /// A window after call `k` ends at another self-check (the trial's).
    fn check_again(&mut self, settings: &Settings, k: u64) {
        let check = check::first_check(settings.drift_interval);
        self.check_at = Some(k + check);
        self.window_from = k + check - check::window(settings.drift_interval);
        self.window.iter_mut().for_each(|w| *w = (None, Vec::new()));
    }
}

enum Phase {
    Warmup,
    Search(Vec<Sampler>),
    Production(Box<Production>),
}

fn production(
    model: &Model,
    settings: &Settings,
    k: u64,
    winner: usize,
    predicted: Option<Prediction>,
) -> Box<Production> {
    // The self-check: the first drift check, a whole window after the decision
    // (src/tuner/search.rs `first_check`, state.rs `check_drift_at`).
    let check = check::first_check(settings.drift_interval);
    let window = check::window(settings.drift_interval);
    Box::new(Production {
        winner,
        predicted,
        check_at: predicted.map(|_| k + check),
        window_from: k + check - window,
        window: vec![(None, Vec::new()); model.ranks],
        periods: vec![0; model.ranks],
        calls: 0,
        trial: None,
    })
}

/// Replays `calls` calls of `model`'s key under `settings`; `seed` fixes the draws.
pub fn replay(model: &Model, settings: &Settings, calls: u64, seed: u64) -> Outcome {
    let mut sim = Sim::new(model, seed);
    let candidates: Vec<Candidate> = model.codelets.iter().map(|c| c.candidate).collect();
    let new_search = |timing: Timing| -> Phase {
        Phase::Search(
            (0..model.ranks)
                .map(|_| {
                    let plan =
                        Plan::collective(settings.search, candidates.clone(), settings.samples);
                    Sampler::new(plan, timing, settings.block as usize)
                })
                .collect(),
        )
    };
    // Do no harm as src/tuner/search.rs `checkpoint`: the key is its communicator's only one.
    // Its own collectives weigh as the library's timed barrier does against native's mean call
    // (src/tuner/search.rs `search_cost`): a small collective's latency, which the traces
    // measure as a barrier's (`consensus` is the whole slow path around a reduction).
    let native = model.cost(&model.codelets[0]);
    let collective_over_call = model.barrier as f64 / native;
    // The timing of the key's search (COMMTUNE_TIMING=auto picks it from the same ratio).
    let mut timing = settings.search_timing(collective_over_call);
    let (instances, collectives) = sampling::rounds_cost(
        candidates.len(),
        timing,
        settings.block as usize,
        budget::ROUNDS_WEIGHED.min(settings.samples),
    );
    let cost = budget::search_cost(instances, collectives, collective_over_call);
    // A checkpoint is a reduction on the slow path; the spacing weighs it as the library does.
    let checkpoint_over_call = model.consensus.iter().copied().max().unwrap_or(0) as f64 / native;
    // Each rank weighs the gain by its own native calls' tail; a search starts where every
    // rank finds it worth it, so at the least gain.
    let mut tails = vec![budget::Tail::default(); model.ranks];
    let gain =
        |tails: &[budget::Tail]| tails.iter().map(|t| t.gain()).fold(f64::INFINITY, f64::min);
    // Checkpoints as the library's: call k is the communicator's instance k - 1.
    let mut spacing = Spacing::default();
    let mut next_checkpoint = Spacing::FIRST;
    let mut phase = Phase::Warmup;
    let (mut searched, mut searches, mut wrong) = (0, 0, 0);
    let (mut check, mut searched_winner) = (None, None);
    for k in 1..=calls {
        let entry = sim.clock.clone();
        if let Phase::Production(p) = &mut phase
            && p.check_at == Some(k)
        {
            let predicted = p.predicted.expect("a check needs a prediction");
            let window = window(p, predicted.timing, &entry);
            sim.consensus();
            p.check_at = None;
            // As src/tuner/drift.rs `drift_check`.
            let verdict = match p.trial.take() {
                Some(trial) => match trial.ended(window, settings.min_gain) {
                    Ended::WinnerNext(trial) => {
                        p.trial = Some(trial);
                        p.check_again(settings, k);
                        None
                    }
                    Ended::Judged(around) => {
                        match predicted.after_trial(&around, settings.min_gain, wrong) {
                            AfterTrial::Trial(codelet, next) => {
                                p.predicted = Some(next);
                                p.trial = Some(Trial::new(codelet, around.latest()));
                                p.check_again(settings, k);
                                None
                            }
                            AfterTrial::Verdict(verdict) => Some(verdict),
                        }
                    }
                },
                None => {
                    let predicted = predicted.facing(&window, settings.min_gain);
                    match predicted.assess_race(window.realised, settings.min_gain) {
                        Judgement::Trial(runner_up) => {
                            p.predicted = Some(predicted);
                            p.trial = Some(Trial::new(runner_up, window));
                            p.check_again(settings, k);
                            None
                        }
                        Judgement::Verdict(verdict) => Some(verdict),
                    }
                }
            };
            if let Some(verdict) = verdict {
                check.get_or_insert(verdict);
            }
            match verdict.unwrap_or(Verdict::Kept) {
                Verdict::Kept => {}
                Verdict::Reopen(t) => {
                    wrong += 1;
                    timing = t;
                    searches += 1;
                    phase = new_search(timing);
                }
                Verdict::RunnerUp(runner_up) => {
                    wrong += 1;
                    phase = Phase::Production(production(model, settings, k, runner_up, None));
                }
            }
        }
        if !matches!(phase, Phase::Search(_)) && k > next_checkpoint {
            sim.consensus();
            if !matches!(phase, Phase::Warmup) || k >= settings.warmup {
                spacing.weigh(checkpoint_over_call);
            }
            let found = match phase {
                Phase::Warmup
                    if k >= settings.warmup
                        && budget::ready(settings.budget, k, 0, k - 1, cost, gain(&tails))
                            .is_ok() =>
                {
                    searches += 1;
                    phase = new_search(timing);
                    Found::Busy
                }
                Phase::Warmup if k >= settings.warmup => {
                    Found::NotWorthUntil(checkpoints::worth_at(k, 0, k - 1, cost, gain(&tails)))
                }
                _ => Found::Idle,
            };
            next_checkpoint = spacing.next(k - 1, found);
        }
        let (codelet, barrier, search) = match &mut phase {
            Phase::Warmup => (0, false, false),
            Phase::Production(p) => (p.running(), false, false),
            Phase::Search(samplers) => match search_step(&mut sim, samplers, settings, &entry, k) {
                Ok((codelet, barrier)) => {
                    searched += 1;
                    (codelet, barrier, true)
                }
                Err((winner, predicted)) => {
                    searched_winner.get_or_insert(winner);
                    phase = Phase::Production(production(model, settings, k, winner, predicted));
                    // The library checks its communicator again at the next instance.
                    next_checkpoint = k;
                    (winner, false, false)
                }
            },
        };
        let timed = match &phase {
            Phase::Production(p) => k % check::SAMPLE_EVERY == 1 || k >= p.window_from,
            _ => true,
        };
        let times = sim.run(codelet, barrier, timed);
        match &mut phase {
            Phase::Search(samplers) if search => {
                for (s, &(start, call_start, end)) in samplers.iter_mut().zip(&times) {
                    s.ran(call_start, end, end - start);
                }
            }
            Phase::Production(p) => {
                for (r, &(entry, call_start, end)) in times.iter().enumerate() {
                    if p.check_at.is_some() && k >= p.window_from {
                        p.window[r].0.get_or_insert(call_start);
                        p.window[r].1.push(end - call_start);
                    }
                    if p.running() == p.winner {
                        p.periods[r] += sim.clock[r] - entry;
                    }
                }
                p.calls += u64::from(p.running() == p.winner);
            }
            Phase::Warmup => {
                for (tail, &(entry, _, end)) in tails.iter_mut().zip(&times) {
                    tail.push(end - entry);
                }
            }
            _ => {}
        }
    }
    let total_ns = sim.clock.iter().copied().max().unwrap_or(0) as f64;
    let (oracle, cost) = model.best();
    let oracle_ns = cost * calls as f64;
    let (decision, predicted_ns, realised_ns) = match &phase {
        Phase::Production(p) => (
            p.winner,
            p.predicted.map(|x| x.winner),
            p.periods.iter().copied().max().unwrap_or(0) as f64 / p.calls.max(1) as f64,
        ),
        _ => (0, None, 0.0),
    };
    Outcome {
        decision,
        searched,
        searches,
        total_ns,
        oracle,
        oracle_ns,
        regret: total_ns / oracle_ns,
        predicted_ns,
        realised_ns,
        check,
        searched_winner,
    }
}

/// One call of a search (as src/tuner/search.rs `search_step`, every rank's sampler alike):
/// Ok(codelet, barrier) to run, or Err(winner, prediction) when the search decided.
#[allow(clippy::type_complexity)]
fn search_step(
    sim: &mut Sim,
    samplers: &mut [Sampler],
    settings: &Settings,
    entry: &[u64],
    k: u64,
) -> Result<(usize, bool), (usize, Option<Prediction>)> {
    for (s, &now) in samplers.iter_mut().zip(entry) {
        s.close(now);
    }
    loop {
        let turns: Vec<Turn> = samplers.iter_mut().map(Sampler::turn).collect();
        if let Turn::Run {
            codelet, barrier, ..
        } = turns[0]
        {
            return Ok((codelet, barrier));
        }
        let mut agreed: Vec<Agreed> = Vec::new();
        for s in samplers.iter() {
            for (i, e) in s.estimates(settings.filter).into_iter().enumerate() {
                match agreed.get_mut(i) {
                    Some(a) => {
                        a.location = a.location.max(e.location);
                        a.error = a.error.max(e.error);
                    }
                    None => agreed.push(e),
                }
            }
        }
        // The budget's denominator as src/tuner/search.rs: the time so far and the calls to come.
        let to_come = budget::remaining_calls(k, 0, k - 1);
        let wasted = samplers
            .iter()
            .zip(&sim.ticks)
            .map(|(s, &t)| {
                let best = s
                    .estimates(settings.filter)
                    .iter()
                    .map(|a| a.location)
                    .fold(f64::INFINITY, f64::min);
                s.wasted_share(t as f64 + (to_come * best).max(0.0))
            })
            .fold(0.0, f64::max);
        sim.consensus();
        let mut next = Next::Round;
        for s in samplers.iter_mut() {
            next = s.after_round(&agreed, wasted > settings.budget, settings.min_gain);
        }
        if let Next::Decide(winner) = next {
            return Err((winner, samplers[0].prediction(winner)));
        }
    }
}

/// The self-check's window (or a trial's) as the library agrees it (src/tuner/drift.rs,
/// consensus.rs `window`): the time per call of the slowest rank and of the least, timed as the
/// search timed, the calls' least share of the window over ranks, and the largest rank's median
/// call.
fn window(p: &Production, timing: Timing, now: &[u64]) -> Window {
    let ranks = p.window.iter().zip(now).map(|((start, durations), &now)| {
        let realised = check::realised(timing, *start, durations, now);
        Window {
            realised,
            least: realised,
            call_share: check::call_share(*start, durations, now),
            median: check::median_call(durations).unwrap_or(0.0),
        }
    });
    let none = Window {
        realised: 0.0,
        least: f64::INFINITY,
        call_share: 1.0,
        median: 0.0,
    };
    ranks.fold(none, |w, rank| Window {
        realised: w.realised.max(rank.realised),
        least: w.least.min(rank.least),
        call_share: w.call_share.min(rank.call_share),
        median: w.median.max(rank.median),
    })
}

/// Groups trace files into runs by name: `PREFIX.RANK.tsv` files with one prefix are one run's.
pub fn group_runs(files: Vec<(String, Trace)>) -> Vec<Vec<Trace>> {
    let mut runs: Vec<(String, Vec<Trace>)> = Vec::new();
    for (name, trace) in files {
        let stem = name.strip_suffix(".tsv").unwrap_or(&name);
        let prefix = match stem.rsplit_once('.') {
            Some((prefix, rank)) if rank.parse::<u32>().is_ok() => prefix,
            _ => stem,
        };
        match runs.iter_mut().find(|(p, _)| p == prefix) {
            Some((_, run)) => run.push(trace),
            None => runs.push((prefix.to_string(), vec![trace])),
        }
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

/// Replays under `settings` with seeds 1..=replicas.
pub fn replays(model: &Model, settings: &Settings, calls: u64, replicas: u64) -> Vec<Outcome> {
    (1..=replicas.max(1))
        .map(|seed| replay(model, settings, calls, seed))
        .collect()
}

/// The knobs a grid varies, as COMMTUNE_* names them.
pub fn search_name(search: Search) -> &'static str {
    match search {
        Search::Brute => "brute",
        Search::Attributes => "attributes",
        Search::Racing => "racing",
    }
}

pub fn filter_name(filter: Filter) -> &'static str {
    match filter {
        Filter::MinFactor { .. } => "minfactor",
        Filter::Iqr => "iqr",
        Filter::Robust { .. } => "robust",
    }
}

pub const SEARCHES: [Search; 3] = [Search::Brute, Search::Attributes, Search::Racing];

/// The estimators with the library's default parameters.
pub const FILTERS: [Filter; 3] = [
    Filter::MinFactor {
        b: 3.0,
        max_outliers: 0.2,
    },
    Filter::Iqr,
    Filter::Robust { nu: 5.0 },
];
pub const BLOCKS: [u32; 3] = [1, 2, 4];
pub const SAMPLES: [u32; 3] = [2, 4, 8];

/// Every combination of the given values (`timings`: COMMTUNE_TIMING's values, `TIMINGS`;
/// others are left out), the other knobs at their defaults.
pub fn grid(
    searches: &[Search],
    timings: &[&str],
    filters: &[Filter],
    blocks: &[u32],
    samples: &[u32],
) -> Vec<Settings> {
    let timed: Vec<Settings> = timings
        .iter()
        .filter_map(|name| Settings::default().with_timing(name))
        .collect();
    let mut all = Vec::new();
    for &search in searches {
        for &timed in &timed {
            for &filter in filters {
                for &block in blocks {
                    for &samples in samples {
                        all.push(Settings {
                            search,
                            filter,
                            block,
                            samples,
                            ..timed
                        });
                    }
                }
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::Partners;
    use crate::settings::TIMINGS;

    /// The codelets of the synthetic traces, as a trace's header lists them.
    const CODELETS: &str = "native:tree:1\tlinear:all:0\tring:pair:0";

    /// A synthetic two-rank trace of one key: `calls` instances of `schedule(k)`, each costing
    /// `cost(codelet, after_switch)` on both ranks (period and duration alike, rank 1 a little
    /// slower), written in the library's format.
    fn trace(
        calls: u64,
        schedule: impl Fn(u64) -> usize,
        cost: impl Fn(usize, bool, u64) -> u64,
    ) -> Vec<Trace> {
        traced(CODELETS, calls, schedule, cost, |_| 0)
    }

    /// `trace` of the operation's `codelets`, call `k` after a barrier that waited `wait(k)`.
    fn traced(
        codelets: &str,
        calls: u64,
        schedule: impl Fn(u64) -> usize,
        cost: impl Fn(usize, bool, u64) -> u64,
        wait: impl Fn(u64) -> u64,
    ) -> Vec<Trace> {
        (0..2)
            .map(|rank| {
                let mut text = format!(
                    "# commtune trace 1\n# rank {rank} of 2\n# codelets\tallreduce\t{codelets}\n\
                     key\top\tbytes\tk\tcodelet\tname\tstart_ns\tcall_start_ns\tend_ns\tkind\n"
                );
                let mut clock = 0;
                let mut prev = None;
                for k in 1..=calls {
                    let c = schedule(k);
                    let switched = prev.is_some_and(|p| p != c);
                    prev = Some(c);
                    let call_start = clock + wait(k);
                    let end = call_start + cost(c, switched, k) + rank;
                    text += &format!(
                        "00000000000000aa\tallreduce\t1024\t{k}\t{c}\tx\t{clock}\t{call_start}\t{end}\tsearch\n",
                    );
                    clock = end + 10;
                }
                crate::trace::parse(&text).unwrap()
            })
            .collect()
    }

    /// Blocks of 20 instances of each codelet in turn, 5 rounds.
    fn blocks(k: u64) -> usize {
        ((k - 1) / 20 % 3) as usize
    }

    fn noise(k: u64) -> u64 {
        (k * 7919) % 13
    }

    fn defaults() -> Settings {
        Settings::default()
    }

    #[test]
    fn the_model_separates_steady_and_switch_instances() {
        let runs = [trace(300, blocks, |c, switched, k| {
            [1000, 3000, 500][c] * if switched { 4 } else { 1 } + noise(k)
        })];
        let models = Model::build(&runs).unwrap();
        assert_eq!(models.len(), 1);
        let m = &models[0];
        assert_eq!((m.ranks, m.bytes, m.op.as_str()), (2, 1024, "allreduce"));
        let ring = &m.codelets[2];
        assert_eq!(ring.candidate.partners, Partners::Pair);
        assert!((ring.cost() - 517.0).abs() < 10.0, "{}", ring.cost());
        let ratio = ring.after_switch(0).unwrap();
        assert!((3.5..4.5).contains(&ratio), "{ratio}");
        assert_eq!(m.best().0, 2);
    }

    #[test]
    fn runs_are_scaled_to_one_level_where_their_codelets_agree_on_it() {
        let quiet = || trace(300, blocks, |c, _, k| [1000, 3000, 500][c] + noise(k));
        let alone = &Model::build(&[quiet()]).unwrap()[0];
        // A busier run, shorter, of native and linear only: both 1.5 times slower.
        let busy = |k| ((k - 1) / 20 % 2) as usize;
        let busier = trace(200, busy, |c, _, k| [1500, 4500, 750][c] + noise(k));
        let m = &Model::build(&[quiet(), busier]).unwrap()[0];
        assert_eq!(m.runs, 2);
        for c in 0..3 {
            let (pooled, level) = (m.cost(&m.codelets[c]), alone.cost(&alone.codelets[c]));
            assert!((pooled / level - 1.0).abs() < 0.01, "{c}: {pooled} {level}");
        }
        // Where only linear ran in both, one codelet cannot tell a load from its own state;
        // nor can two that disagree (native 1.5 times slower, linear 2).
        let linear_only = trace(200, |_| 1, |c, _, k| [1500, 4500, 750][c] + noise(k));
        let disagreeing = trace(200, busy, |c, _, k| [1500, 6000, 750][c] + noise(k));
        for other in [linear_only, disagreeing] {
            let m = &Model::build(&[quiet(), other]).unwrap()[0];
            let linear = m.cost(&m.codelets[1]);
            assert!(linear > 3000.0 * 1.2, "pooled unscaled: {linear}");
        }
    }

    #[test]
    fn a_scaled_run_brings_its_barriers_and_reductions_to_the_level() {
        // Each codelet once, 100 calls each: no barrier, and no return to a lower codelet (the
        // library's schedule starts a round there, after a reduction).
        let quiet = trace(
            300,
            |k| ((k - 1) / 100) as usize,
            |c, _, k| [1000, 3000, 500][c] + noise(k),
        );
        // 1.5 times busier: a barrier of 150 ns before every tenth call, and a reduction of 1500
        // ns before each return to native.
        let busy = |k: u64| ((k - 1) / 20 % 2) as usize;
        let reduction = |k: u64| if busy(k + 1) < busy(k) { 1500 } else { 0 };
        let busier = traced(
            CODELETS,
            200,
            busy,
            |c, _, k| [1500, 4500][c] + reduction(k) + noise(k),
            |k| if k % 10 == 5 { 150 } else { 0 },
        );
        let m = &Model::build(&[quiet, busier]).unwrap()[0];
        assert!(m.barrier.abs_diff(100) <= 2, "{}", m.barrier);
        for &r in &m.consensus {
            assert!(r.abs_diff(1000) <= 20, "{:?}", m.consensus);
        }
    }

    #[test]
    fn runs_must_list_the_same_codelets() {
        let three = trace(300, blocks, |c, _, k| [1000, 3000, 500][c] + noise(k));
        let four = traced(
            &format!("{CODELETS}\tbinomial:tree:0"),
            200,
            |k| ((k - 1) / 20 % 4) as usize,
            |c, _, k| [1000, 3000, 500, 700][c] + noise(k),
            |_| 0,
        );
        let error = Model::build(&[three, four]).unwrap_err();
        assert!(error.contains("runs list different codelets"), "{error}");
    }

    #[test]
    fn a_clear_winner_is_found_with_little_regret() {
        let runs = [trace(300, blocks, |c, _, k| {
            [1000, 3000, 500][c] + noise(k)
        })];
        let m = &Model::build(&runs).unwrap()[0];
        let o = replay(m, &defaults(), 2000, 1);
        assert_eq!(o.decision, 2);
        assert_eq!(o.oracle, 2);
        assert!(o.regret > 1.0 && o.regret < 1.15, "{o:?}");
        assert_eq!(o.check, Some(Verdict::Kept));
        assert_eq!(o, replay(m, &defaults(), 2000, 1), "deterministic");
    }

    #[test]
    fn a_switch_cost_misleads_one_instance_samples_but_not_blocks() {
        // Ring is fast once running, but its first instance after another codelet pays for the
        // other's traffic (ten times its steady cost): samples of one instance see only that.
        let runs = [trace(600, blocks, |c, switched, k| {
            (if switched { 6000 } else { [1000, 3000, 500][c] }) + noise(k)
        })];
        let m = &Model::build(&runs).unwrap()[0];
        let local = |block| Settings {
            search: Search::Brute,
            timing: Timing::Local,
            block,
            ..defaults()
        };
        let one = replay(m, &local(1), 2000, 3);
        let four = replay(m, &local(4), 2000, 3);
        assert_eq!(four.decision, 2, "{four:?}");
        assert!(four.regret < one.regret, "{one:?} {four:?}");
        // With one instance per sample every codelet's sample is a switch: all look alike and
        // native stays (nothing beats it by the minimum gain).
        assert_eq!(one.decision, 0, "{one:?}");
    }

    #[test]
    fn the_grid_has_every_combination() {
        let g = grid(&SEARCHES, &TIMINGS, &FILTERS, &BLOCKS, &SAMPLES);
        assert_eq!(g.len(), 324);
        assert!(g.contains(&Settings::default()));
    }
}
