//! What is measured for each key: calls per codelet, time distributions, the samples that
//! estimate untimed calls, notes; and their conversion to the report's `KeyData`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use commtune_report::{Baseline, KeyData, Op, Saving, SiteData, TuningData};
use commtune_tune::check;
use hdrhistogram::Histogram;

use super::Description;
use super::estimate::{self, Moments};
use crate::codelets::NATIVE;

pub struct Entry {
    pub op: Op,
    pub site: SiteData,
    pub description: Description,
    /// Identifies the key across ranks (operation, `Description::agree`): what checkpoints
    /// compare. Keys of several sites may share it, and with it their tuner.
    pub agree_hash: u64,
    /// The entry of a site's signatures beyond `MAX_SIGNATURES`: its calls have many agreed
    /// identities, so it shows no tuning of its own.
    folded: bool,
    /// Calls per codelet (registry index), counted without a lock.
    calls: [AtomicU64; MAX_CODELETS],
    stats: Mutex<Stats>,
}

/// Codelets per operation at most (alltoall has eight).
pub const MAX_CODELETS: usize = 8;

/// Native's production calls a saving needs to be measured against them rather than against
/// native's search calls (a drift window's worth of the self-check's trial, half of it).
const PRODUCTION_BASELINE: u64 = 8;

/// What a timed call was, for the report.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Measured {
    /// A call of a search (tuning).
    Search,
    /// One of the production calls timed to stand for the untimed ones (one in eight for
    /// collectives, every episode for halo keys).
    Sample,
    /// Anything else: warm-up, profiling, drift windows.
    Other,
}

/// Timed calls, durations in clock ticks (see `clock`), per codelet (registry index).
/// Production calls of tuned keys are only counted, except one in eight that is timed: the
/// untimed calls' time is estimated from those (`estimate`).
struct Stats {
    min: u64,
    max: u64,
    histogram: Histogram<u32>,
    /// Every timed call; those of searches; the production sample.
    timed: [Moments; MAX_CODELETS],
    search: [Moments; MAX_CODELETS],
    sample: [Moments; MAX_CODELETS],
    /// Native's timed calls outside searches, after its first (the key's, which sets up
    /// connections): what the application felt of native (before the search, in trials).
    native_production: Moments,
    /// Halo episodes a codelet was to run but left as they were (counted as native).
    unchanged: [u64; MAX_CODELETS],
    notes: Vec<String>,
    /// Clock ticks at the key's latest end, and the intervals between consecutive ends (halo
    /// episodes: the application's iteration, the `period` view).
    last_end: u64,
    period_ticks: u64,
    periods: u64,
}

/// Durations up to hours of clock ticks at 2 significant digits (about 12 KiB per key).
fn new_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, 1 << 45, 2).expect("constant bounds are valid")
}

impl Entry {
    pub(super) fn new(
        op: Op,
        site: SiteData,
        description: Description,
        agree_hash: u64,
        folded: bool,
    ) -> Entry {
        Entry {
            op,
            site,
            description,
            agree_hash,
            folded,
            calls: Default::default(),
            stats: Mutex::new(Stats {
                min: u64::MAX,
                max: 0,
                histogram: new_histogram(),
                timed: Default::default(),
                search: Default::default(),
                sample: Default::default(),
                native_production: Moments::default(),
                unchanged: [0; MAX_CODELETS],
                notes: Vec::new(),
                last_end: 0,
                period_ticks: 0,
                periods: 0,
            }),
        }
    }

    /// Adds one call that took `ticks` and ran codelet `codelet` (registry index).
    pub fn record(&self, ticks: u64, codelet: usize, measured: Measured) {
        let Ok(mut s) = self.stats.lock() else { return };
        self.add(&mut s, ticks, codelet, measured);
    }

    /// As `record`, for a key whose instance ended at clock `now`: one more period since the
    /// previous end (halo episodes).
    pub fn record_ending(&self, ticks: u64, codelet: usize, measured: Measured, now: u64) {
        let Ok(mut s) = self.stats.lock() else { return };
        self.add(&mut s, ticks, codelet, measured);
        if s.last_end != 0 {
            s.period_ticks += now.saturating_sub(s.last_end);
            s.periods += 1;
        }
        s.last_end = now;
    }

    fn add(&self, s: &mut Stats, ticks: u64, codelet: usize, measured: Measured) {
        // Under the lock, or from the one thread of a collective's key: no locked increment.
        self.count(codelet);
        s.min = s.min.min(ticks);
        s.max = s.max.max(ticks);
        s.histogram.saturating_record(ticks.max(1));
        s.timed[codelet].add(ticks);
        match measured {
            Measured::Search => s.search[codelet].add(ticks),
            Measured::Sample => s.sample[codelet].add(ticks),
            Measured::Other => {}
        }
        if codelet == NATIVE
            && measured != Measured::Search
            && self.calls[NATIVE].load(Ordering::Relaxed) > 1
        {
            s.native_production.add(ticks);
        }
    }

    /// A halo episode that `codelet` was to run left every message as it was.
    pub fn unchanged(&self, codelet: usize) {
        let Ok(mut s) = self.stats.lock() else { return };
        s.unchanged[codelet] += 1;
    }

    /// Adds one call of codelet `codelet` without timing it. Only for a key that one thread at
    /// a time can reach: a collective's key (an application may call a communicator's
    /// collectives from one thread at a time only), or any key under its stats lock. Spares the
    /// hot path a locked read-modify-write.
    pub fn count(&self, codelet: usize) {
        let calls = &self.calls[codelet];
        calls.store(calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Calls of this key so far.
    pub fn calls(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The entry's identity in side tables (it lives until the process ends).
    pub fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether this is a site's entry of its signatures beyond `MAX_SIGNATURES`: its calls have
    /// many agreed identities, so it shows no tuning of its own.
    pub fn is_folded(&self) -> bool {
        self.folded
    }

    /// Adds a remark for the report (once per distinct text).
    pub fn note(&self, text: String) {
        let Ok(mut s) = self.stats.lock() else { return };
        if !s.notes.contains(&text) {
            s.notes.push(text);
        }
    }

    /// The key's data for the report, with durations converted to nanoseconds: `names` are the
    /// operation's codelets, `tuning` what its tuner says of it (if tuned).
    pub fn data(
        &self,
        ns_per_tick: f64,
        names: &[&str],
        mut tuning: Option<TuningData>,
    ) -> KeyData {
        let s = self
            .stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ns = |ticks: f64| (ticks * ns_per_tick).round() as u64;
        let calls: Vec<u64> = self
            .calls
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let all: u64 = calls.iter().sum();
        let timed: u64 = s.timed.iter().map(|m| m.n).sum();
        let measured: f64 = s.timed.iter().map(Moments::sum).sum();
        let mean = (timed > 0).then(|| measured / timed as f64);
        // Each codelet's untimed calls from its production sample (or, lacking one, its other
        // timed calls, or the key's): half-widths add up, an upper bound whatever the
        // correlation between codelets.
        let (estimated, error) = (0..MAX_CODELETS)
            .map(|c| {
                let untimed = calls[c].saturating_sub(s.timed[c].n);
                estimate::extrapolate(untimed, &s.sample[c], s.timed[c].mean().or(mean))
            })
            .fold((0.0, 0.0), |(e, h), (ec, hc)| (e + ec, h + hc));
        if let Some(t) = &mut tuning {
            t.saving = saving(t, names, &calls, &s, ns_per_tick);
        }
        KeyData {
            op: self.op,
            site: self.site.clone(),
            merge_key: self.description.merge_key.clone(),
            signature: self.description.signature.clone(),
            calls: all,
            bytes: all * self.description.bytes_per_call,
            timed,
            measured_ns: ns(measured),
            estimated_ns: ns(estimated),
            estimate_error_ns: ns(error),
            min_ns: if timed == 0 { 0 } else { ns(s.min as f64) },
            max_ns: ns(s.max as f64),
            histogram: s
                .histogram
                .iter_recorded()
                .map(|v| (ns(v.value_iterated_to() as f64), v.count_at_value() as u64))
                .collect(),
            codelets: names
                .iter()
                .zip(&calls)
                .filter(|(_, n)| **n > 0)
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
            unchanged: names
                .iter()
                .zip(&s.unchanged)
                .filter(|(_, n)| **n > 0)
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
            notes: s.notes.clone(),
            period_ns: (s.periods > 0).then(|| ns(s.period_ticks as f64 / s.periods as f64)),
            tuning,
        }
    }
}

/// What the winner of a key in production saved on this rank, as measured: its production calls
/// against native's production calls where enough were timed (before the search, in a trial),
/// else against native's calls in the search. None: native kept, too few timed calls, or
/// measured against the search, a winner that missed its prediction unless it still measurably
/// saved (what its production calls pay beyond its samples, native's would pay too, so a
/// saving understates and a cost overstates; LD_PRELOAD.md "The report").
fn saving(
    tuning: &TuningData,
    names: &[&str],
    calls: &[u64],
    s: &Stats,
    ns_per_tick: f64,
) -> Option<Saving> {
    let winner = names
        .iter()
        .position(|n| Some(*n) == tuning.winner.as_deref())
        .filter(|&w| w != NATIVE && tuning.phase == "production")?;
    let production = calls[winner].saturating_sub(s.search[winner].n);
    let (replaced, replaced_in) = if s.native_production.n >= PRODUCTION_BASELINE {
        (&s.native_production, Baseline::Production)
    } else {
        (&s.search[NATIVE], Baseline::Search)
    };
    let (saved, low, high) = estimate::saving(replaced, &s.sample[winner], production)?;
    if replaced_in == Baseline::Search
        && low <= 0.0
        && tuning.check.as_ref().is_some_and(check::missed)
    {
        return None;
    }
    let us = |ticks: f64| ticks * ns_per_tick * 1e-3;
    let seconds = |ticks: f64| ticks * ns_per_tick * 1e-9;
    Some(Saving {
        replaced: names[NATIVE].to_string(),
        replaced_us: us(replaced.mean()?),
        replaced_in,
        winner_us: us(s.sample[winner].mean()?),
        calls: production,
        saved_s: seconds(saved),
        low_s: seconds(low),
        high_s: seconds(high),
    })
}
