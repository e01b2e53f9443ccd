//! Finding a call's key: the lock-free cache, the process-wide registry behind it, and the
//! entries of each site (bounded: signatures beyond `MAX_SIGNATURES` fold into one).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{LazyLock, Mutex, OnceLock};

use commtune_report::Op;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use super::entry::Entry;
use super::{CallKey, Description, Key, Table, agree_hash, depend};
use crate::runtime;
use crate::say::say;
use crate::site::{self, Caller, SiteRef};
use crate::sync::{LeakedCell, lock};

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

/// Builds the lookup structures (at MPI_Init), so that the first intercepted call does not: the
/// cache alone is a few dozen pages to fault in.
pub(super) fn prepare() {
    LazyLock::force(&CACHE);
    LazyLock::force(&REGISTRY);
    LazyLock::force(&SITES);
}

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
pub(super) fn site_entry(
    call: CallKey,
    description: Description,
    agree_hash: u64,
) -> &'static Entry {
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
                    facts: String::new(),
                    bytes_per_call: 0,
                    class: None,
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
    let agree_hash = agree_hash(key.op, &description.agree);
    let entry: &'static Entry = Box::leak(Box::new(Entry::new(
        key.op,
        site,
        description,
        agree_hash,
        folded,
    )));
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
