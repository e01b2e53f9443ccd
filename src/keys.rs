//! Keys (call site × operation × signature) and what is measured for each.
//!
//! The hot path is one lookup in a thread-local map from the call's raw identity (return address,
//! handles, counts) to the key's entry. A miss consults the process-wide registry, and the first
//! time anywhere, describes the key for the report. Entries live until the process ends (the
//! report reads them at MPI_Finalize), so they are leaked and handed out as `&'static`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use commtune_report::{KeyData, Op, SiteData};
use dashmap::DashMap;
use hdrhistogram::Histogram;
use rustc_hash::FxBuildHasher;

use crate::site::{self, Caller, SiteRef};

/// The raw identity of a call: who called, which operation, and the signature as handle bits
/// and counts (process-local values; `Entry` holds their cross-rank description).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CallKey {
    pub caller: usize,
    pub op: Op,
    pub words: [u64; 5],
}

/// What the report says about a key, computed once when the key is first seen.
pub struct Description {
    /// Identifies the key across ranks together with the site (see `KeyData::merge_key`).
    pub merge_key: String,
    pub signature: String,
    pub bytes_per_call: u64,
}

pub struct Entry {
    pub op: Op,
    pub site: SiteData,
    pub description: Description,
    stats: Mutex<Stats>,
}

struct Stats {
    calls: u64,
    total_ns: u64,
    min_ns: u64,
    max_ns: u64,
    histogram: Histogram<u32>,
    codelets: Vec<(&'static str, u64)>,
}

/// Durations from 1 ns to one hour at 2 significant digits (about 10 KiB per key).
fn new_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("constant bounds are valid")
}

impl Entry {
    /// Adds one call that took `ns` and ran `codelet`.
    pub fn record(&self, ns: u64, codelet: &'static str) {
        let Ok(mut s) = self.stats.lock() else { return };
        s.calls += 1;
        s.total_ns += ns;
        s.min_ns = s.min_ns.min(ns);
        s.max_ns = s.max_ns.max(ns);
        s.histogram.saturating_record(ns.max(1));
        match s.codelets.iter_mut().find(|(name, _)| *name == codelet) {
            Some((_, n)) => *n += 1,
            None => s.codelets.push((codelet, 1)),
        }
    }

    pub fn data(&self) -> KeyData {
        let s = self
            .stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        KeyData {
            op: self.op,
            site: self.site.clone(),
            merge_key: self.description.merge_key.clone(),
            signature: self.description.signature.clone(),
            calls: s.calls,
            bytes: s.calls * self.description.bytes_per_call,
            total_ns: s.total_ns,
            min_ns: if s.calls == 0 { 0 } else { s.min_ns },
            max_ns: s.max_ns,
            histogram: s
                .histogram
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value() as u64))
                .collect(),
            codelets: s
                .codelets
                .iter()
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
        }
    }
}

#[derive(Clone, Copy)]
enum Slot {
    Key(&'static Entry),
    /// The immediate caller is a binding library: the site is found deeper in the stack.
    Binding,
}

thread_local! {
    static CACHE: RefCell<HashMap<CallKey, Slot, FxBuildHasher>> = RefCell::default();
}

static REGISTRY: LazyLock<DashMap<CallKey, &'static Entry, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

fn cached(key: &CallKey) -> Option<Slot> {
    CACHE.with_borrow(|cache| cache.get(key).copied())
}

fn remember(key: CallKey, slot: Slot) {
    CACHE.with_borrow_mut(|cache| cache.insert(key, slot));
}

/// The entry of the call identified by `key` (whose `caller` is the immediate return address).
/// `describe` runs once per key in the process, with the resolved site.
pub fn entry(key: CallKey, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
    match cached(&key) {
        Some(Slot::Key(entry)) => entry,
        Some(Slot::Binding) => application_entry(key, describe),
        None => match site::classify(key.caller) {
            Caller::Application => {
                let entry = registered(key, describe);
                remember(key, Slot::Key(entry));
                entry
            }
            Caller::Binding => {
                remember(key, Slot::Binding);
                application_entry(key, describe)
            }
        },
    }
}

/// A call made through a binding library: walk to the application's frame, then look up again.
fn application_entry(
    key: CallKey,
    describe: impl FnOnce(SiteRef) -> Description,
) -> &'static Entry {
    let key = CallKey {
        caller: site::application_site(key.caller),
        ..key
    };
    if let Some(Slot::Key(entry)) = cached(&key) {
        return entry;
    }
    let entry = registered(key, describe);
    remember(key, Slot::Key(entry));
    entry
}

fn registered(key: CallKey, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
    *REGISTRY.entry(key).or_insert_with(|| {
        Box::leak(Box::new(Entry {
            op: key.op,
            site: site::describe(key.caller),
            description: describe(key.caller),
            stats: Mutex::new(Stats {
                calls: 0,
                total_ns: 0,
                min_ns: u64::MAX,
                max_ns: 0,
                histogram: new_histogram(),
                codelets: Vec::new(),
            }),
        }))
    })
}

/// Every key seen by this process, for the report.
pub fn all() -> Vec<KeyData> {
    REGISTRY
        .iter()
        .map(|e| e.value().data())
        .filter(|k| k.calls > 0)
        .collect()
}
