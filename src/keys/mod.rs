//! Keys (call site × operation × signature) and what is measured for each.
//!
//! The hot path is one lookup in a lock-free table from the call's raw identity (return address,
//! handles, counts) to its `Key`, and one pointer read to the key's entry. A miss consults the
//! process-wide registry, and the first time anywhere, describes the key. MPI reuses handle
//! values once the application frees their object, so a key is described again when one of the
//! handles its description read is freed (`freed`). Entries live until the process ends (the
//! report reads them at MPI_Finalize), so they are leaked and handed out as `&'static`.

mod estimate;
mod table;

pub use table::Table;

use self::estimate::Moments;

use std::any::Any;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};

use commtune_report::{KeyData, Op, Saving, SiteData, TuningData};
use dashmap::DashMap;
use hdrhistogram::Histogram;
use rustc_hash::FxBuildHasher;

use crate::mpi::{self, HandleBits, MPI_Comm, MPI_Datatype, MPI_Op};
use crate::say::say;
use crate::site::{self, Caller, SiteRef};
use crate::sync::{LeakedCell, lock};
use crate::{comms, runtime};

/// The raw identity of a call: who called, which operation, and the signature as handle bits
/// and counts (process-local values; `Entry` holds their cross-rank description).
#[derive(Clone, Copy, Debug)]
pub struct CallKey {
    pub caller: usize,
    pub op: Op,
    pub words: [u64; 5],
}

impl PartialEq for CallKey {
    /// Branch-free: the derived comparison becomes a memcmp call on the hot path.
    fn eq(&self, other: &Self) -> bool {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .fold(0, |acc, (a, b)| acc | (a ^ b));
        words | (self.caller ^ other.caller) as u64 == 0 && self.op == other.op
    }
}

impl Eq for CallKey {}

impl Hash for CallKey {
    /// One word: the key's fields folded with rotations (one hasher round instead of seven;
    /// a collision only costs a probe).
    fn hash<H: Hasher>(&self, state: &mut H) {
        let folded = self.words.iter().enumerate().fold(
            self.caller as u64 ^ ((self.op as u64) << 56),
            |h, (i, w)| h ^ w.rotate_left(11 * (i as u32 + 1)),
        );
        state.write_u64(folded);
    }
}

/// What the report says about a key, computed when the key is first seen (and again when a
/// handle it was described with is freed, see `Key`).
pub struct Description {
    /// Identifies the key across ranks together with the site (see `KeyData::merge_key`).
    pub merge_key: String,
    /// What the tuner's ranks agree on: what the MPI standard makes identical on every rank at
    /// the same instance of a communicator's collectives (operation, bytes, reduction, size),
    /// never the call site or datatype handles, which may differ from rank to rank; and every
    /// fact codelet requirements read (`codelets::Facts`), so that calls sharing a search and its
    /// winner also share which codelets may run them.
    pub agree: String,
    pub signature: String,
    pub bytes_per_call: u64,
    /// The handles of the call whose meaning the description (above all `agree`) reads: when
    /// the application frees one, MPI may give its handle value to an object of another size or
    /// kind, so the key is described again at its next call.
    pub handles: Vec<Handle>,
}

/// A handle the application may free, by its bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Handle {
    Comm(usize),
    Datatype(usize),
    Op(usize),
}

/// The handles among a call's communicator, datatypes and reduction operation that the
/// application can free (predefined ones never are; listing them would only grow their lists).
pub fn freeable(comm: MPI_Comm, datatypes: &[MPI_Datatype], op: Option<MPI_Op>) -> Vec<Handle> {
    let mut handles = Vec::new();
    if comm.bits() != mpi::comm_world().bits() && comm.bits() != mpi::comm_self().bits() {
        handles.push(Handle::Comm(comm.bits()));
    }
    for &datatype in datatypes {
        let handle = Handle::Datatype(datatype.bits());
        if !mpi::is_predefined(datatype) && !handles.contains(&handle) {
            handles.push(handle);
        }
    }
    if let Some(op) = op.filter(|&op| mpi::op_name(op) == "user") {
        handles.push(Handle::Op(op.bits()));
    }
    handles
}

/// Distinct signatures one site keeps apart in the report (each costs about 20 KiB); later ones
/// share one entry, so that memory stays bounded when a call's counts change every time (as in
/// particle codes). Only the report folds them: each call is still tuned by its own agreed
/// identity (see `Key`), so ranks that fold different calls (datatypes, and with them
/// signatures, may differ between ranks) still run the same codelets.
const MAX_SIGNATURES: usize = 1024;
/// Local variants of one signature and agreed identity (handles, displacements: what may differ
/// between ranks) that get their own entry; later ones share the first (the report only).
const MAX_VARIANTS: usize = 8;

/// The entries of one site and operation, by signature and agreed identity.
#[derive(Default)]
struct SiteKeys {
    signatures: Vec<(String, u64, &'static Entry, usize)>,
    other: Option<&'static Entry>,
}

static SITES: LazyLock<DashMap<(SiteRef, Op), SiteKeys, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// Every entry, for the report.
static ENTRIES: Mutex<Vec<&'static Entry>> = Mutex::new(Vec::new());

/// One raw call identity (`CallKey`): the entry its calls are measured in, and the agreed
/// identity and tuner they run under. Keys whose handles are freed are marked stale and
/// described again at their next call, so a handle value MPI hands out again for another object
/// never finds the old object's identity (its bytes, its operation's commutativity).
pub struct Key {
    call: CallKey,
    /// The entry of the latest description; null while the key is stale, so that the hot path
    /// reads one pointer for both.
    current: LeakedCell<Entry>,
    /// The entry of the latest description, stale or not.
    described: LeakedCell<Entry>,
    /// Set with `current` cleared when a handle is freed; a description that began before the
    /// mark is not trusted.
    stale: AtomicBool,
    /// The agreed identity: `(op, Description::agree)` hashed; what checkpoints compare, and the
    /// tuner of the key on its communicator.
    agree_hash: AtomicU64,
    /// What the tuner keeps with the key (its own type: this measurement store imports nothing
    /// above it). It checks the link against `agree_hash` at each call.
    pub tuner: OnceLock<&'static (dyn Any + Send + Sync)>,
}

impl Key {
    #[inline]
    pub fn agree_hash(&self) -> u64 {
        self.agree_hash.load(Ordering::Relaxed)
    }

    /// The key's entry, described again first if one of its handles was freed since.
    #[inline]
    fn entry(&'static self, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
        match self.current.get() {
            Some(entry) => entry,
            None => self.refresh(describe),
        }
    }

    /// Describes the key again after one of its handles was freed; a changed description moves
    /// it to its new entry and agreed identity (the tuner then finds its link stale: it links
    /// by agreed identity).
    #[cold]
    fn refresh(&'static self, describe: impl FnOnce(SiteRef) -> Description) -> &'static Entry {
        self.stale.store(false, Ordering::SeqCst);
        let mut description = describe(self.call.caller);
        let handles = std::mem::take(&mut description.handles);
        let agree_hash = agree_hash(self.call.op, &description.agree);
        let mut entry = self.described.get().expect("set when the key is made");
        if entry.description.merge_key != description.merge_key || agree_hash != self.agree_hash() {
            entry = site_entry(self.call, description, agree_hash);
            self.described.set(entry);
            self.agree_hash.store(agree_hash, Ordering::Relaxed);
        }
        depend(self, &handles, true);
        self.current.set(entry);
        // A handle freed while describing: describe again at the next call.
        if self.stale.load(Ordering::SeqCst) {
            self.current.clear();
        }
        entry
    }

    fn mark_stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
        self.current.clear();
    }
}

fn agree_hash(op: Op, agree: &str) -> u64 {
    FxBuildHasher.hash_one((op, agree))
}

/// Keys to mark stale when a handle is freed.
static DEPENDENTS: LazyLock<DashMap<Handle, Vec<&'static Key>, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// Remembers that `key` was described with `handles`, and watches them; `again`: the key may
/// already be listed (it is described again).
fn depend(key: &'static Key, handles: &[Handle], again: bool) {
    for &handle in handles {
        let first = {
            let mut keys = DEPENDENTS.entry(handle).or_default();
            if !(again && keys.iter().any(|k| std::ptr::eq(*k, key))) {
                keys.push(key);
            }
            keys.len() == 1
        };
        // Outside the map's lock: setting an attribute is an MPI call. Ops have no attributes:
        // the shim reports MPI_Op_free (`commtune_op_free`).
        if first {
            let _ = match handle {
                Handle::Comm(bits) => {
                    comms::of(MPI_Comm::from_bits(bits));
                    Ok(())
                }
                Handle::Datatype(bits) => {
                    mpi::watch_datatype(MPI_Datatype::from_bits(bits), freed_datatype)
                }
                Handle::Op(_) => Ok(()),
            };
        }
    }
}

/// `handle` was freed: its keys are described again at their next call.
pub fn freed(handle: Handle) {
    if let Some((_, keys)) = DEPENDENTS.remove(&handle) {
        keys.iter().for_each(|k| k.mark_stale());
    }
}

/// The application freed a communicator (`comms` hook).
pub fn comm_freed(bits: usize) {
    freed(Handle::Comm(bits));
}

fn freed_datatype(bits: usize) {
    freed(Handle::Datatype(bits));
}

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
/// against native's calls in the search (None: native kept, or too few timed calls).
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
        .filter(|&w| w != 0 && tuning.phase == "production")?;
    let production = calls[winner].saturating_sub(s.search[winner].n);
    let (saved, low, high) = estimate::saving(&s.search[0], &s.sample[winner], production)?;
    let us = |ticks: f64| ticks * ns_per_tick * 1e-3;
    let seconds = |ticks: f64| ticks * ns_per_tick * 1e-9;
    Some(Saving {
        replaced: names[0].to_string(),
        replaced_us: us(s.search[0].mean()?),
        winner_us: us(s.sample[winner].mean()?),
        calls: production,
        saved_s: seconds(saved),
        low_s: seconds(low),
        high_s: seconds(high),
    })
}

#[derive(Clone, Copy)]
enum Slot {
    Key(&'static Key),
    /// The immediate caller is a binding library: the site is found deeper in the stack.
    Binding,
}

/// The hot-path cache. Sized for many more keys than real applications have; keys beyond it
/// are still measured, through the registry.
static CACHE: LazyLock<Table<CallKey, Slot>> = LazyLock::new(|| Table::new(1 << 13));

/// Every key, authoritative: cache misses read it.
static REGISTRY: LazyLock<DashMap<CallKey, &'static Key, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

#[inline]
fn cached(key: &CallKey) -> Option<Slot> {
    CACHE.get(key).copied()
}

fn remember(key: CallKey, slot: Slot) {
    CACHE.insert(key, slot);
}

/// The key of the call identified by `key` (whose `caller` is the immediate return address),
/// and its entry. `describe` runs once per key in the process, with the resolved site, and
/// again after a handle the key was described with is freed.
#[inline]
pub fn find(
    key: CallKey,
    describe: impl FnOnce(SiteRef) -> Description,
) -> (&'static Key, &'static Entry) {
    match cached(&key) {
        Some(Slot::Key(k)) => (k, k.entry(describe)),
        Some(Slot::Binding) => application_key(key, describe),
        None => match site::classify(key.caller) {
            Caller::Application => {
                let found = registered(key, describe);
                remember(key, Slot::Key(found.0));
                found
            }
            Caller::Binding => {
                remember(key, Slot::Binding);
                application_key(key, describe)
            }
        },
    }
}

/// A call made through a binding library: walk to the application's frame, then look up again.
fn application_key(
    key: CallKey,
    describe: impl FnOnce(SiteRef) -> Description,
) -> (&'static Key, &'static Entry) {
    let key = CallKey {
        caller: site::application_site(key.caller),
        ..key
    };
    if let Some(Slot::Key(k)) = cached(&key) {
        return (k, k.entry(describe));
    }
    let found = registered(key, describe);
    remember(key, Slot::Key(found.0));
    found
}

fn registered(
    call: CallKey,
    describe: impl FnOnce(SiteRef) -> Description,
) -> (&'static Key, &'static Entry) {
    if let Some(k) = REGISTRY.get(&call).map(|k| *k) {
        return (k, k.entry(describe));
    }
    let mut description = describe(call.caller);
    let handles = std::mem::take(&mut description.handles);
    let agree_hash = agree_hash(call.op, &description.agree);
    let mut made = None;
    let k = *REGISTRY.entry(call).or_insert_with(|| {
        let entry = site_entry(call, description, agree_hash);
        made = Some(entry);
        Box::leak(Box::new(Key {
            call,
            current: LeakedCell::new(entry),
            described: LeakedCell::new(entry),
            stale: AtomicBool::new(false),
            agree_hash: AtomicU64::new(agree_hash),
            tuner: OnceLock::new(),
        }))
    });
    match made {
        Some(entry) => {
            depend(k, &handles, false);
            (k, entry)
        }
        // Another thread made it meanwhile (a stale mark since is seen at the next call).
        None => (k, k.described.get().expect("set when the key is made")),
    }
}

/// The entry of a call with `description` at `call`'s site: its own, or the first of its
/// signature and agreed identity past `MAX_VARIANTS`, or the site's folded entry past
/// `MAX_SIGNATURES`.
fn site_entry(call: CallKey, description: Description, agree_hash: u64) -> &'static Entry {
    let mut site = SITES.entry((call.caller, call.op)).or_default();
    let SiteKeys { signatures, other } = &mut *site;
    let full = signatures.len() >= MAX_SIGNATURES;
    match signatures
        .iter_mut()
        .find(|(merge_key, hash, _, _)| *merge_key == description.merge_key && *hash == agree_hash)
    {
        Some((_, _, first, variants)) if *variants >= MAX_VARIANTS => first,
        Some((_, _, _, variants)) => {
            *variants += 1;
            new_entry(call, description, false)
        }
        None if full => other.get_or_insert_with(|| {
            new_entry(
                call,
                Description {
                    merge_key: "other signatures".into(),
                    agree: "other signatures".into(),
                    signature: format!(
                        "signatures beyond the first {MAX_SIGNATURES} of this site (bytes not counted)"
                    ),
                    bytes_per_call: 0,
                    handles: Vec::new(),
                },
                true,
            )
        }),
        None => {
            let merge_key = description.merge_key.clone();
            let entry = new_entry(call, description, false);
            signatures.push((merge_key, agree_hash, entry, 1));
            entry
        }
    }
}

fn new_entry(key: CallKey, description: Description, folded: bool) -> &'static Entry {
    let site = site::describe(key.caller);
    if runtime::config().verbose >= 2 {
        say!(
            "commtune[{}]: new {} site {}+{:#x}: {}",
            runtime::process().map_or(-1, |p| i64::from(p.rank)),
            key.op.name(),
            site.object,
            site.address,
            description.signature
        );
    }
    let entry: &'static Entry = Box::leak(Box::new(Entry {
        op: key.op,
        site,
        agree_hash: agree_hash(key.op, &description.agree),
        description,
        folded,
        calls: Default::default(),
        stats: Mutex::new(Stats {
            min: u64::MAX,
            max: 0,
            histogram: new_histogram(),
            timed: Default::default(),
            search: Default::default(),
            sample: Default::default(),
            unchanged: [0; MAX_CODELETS],
            notes: Vec::new(),
            last_end: 0,
            period_ticks: 0,
            periods: 0,
        }),
    }));
    if folded {
        entry.note(format!(
            "signatures beyond the first {MAX_SIGNATURES} of this site are reported together; \
             each call is still tuned with the calls that match it on every rank"
        ));
    }
    lock(&ENTRIES).push(entry);
    entry
}

/// Every entry of this process, for the report.
pub fn entries() -> Vec<&'static Entry> {
    lock(&ENTRIES).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_fits_the_per_key_counters() {
        for op in [Op::Allreduce, Op::Alltoall, Op::Allgatherv, Op::Halo] {
            let names = crate::codelets::names(op);
            assert!(names.len() <= MAX_CODELETS, "{op:?}");
            assert_eq!(names[0], "native", "{op:?}: native comes first");
        }
    }
}
