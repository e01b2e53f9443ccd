//! An insert-only hash table whose lookups take no lock and touch no thread-local storage:
//! the hot path of every intercepted call is one `get`.
//!
//! Values are leaked on insertion (keys live as long as the process) and slots are written once,
//! so a reader that sees a slot filled sees it forever. A full table refuses inserts; callers
//! keep a slower authoritative map beside it.

use std::hash::{BuildHasher, Hash};
use std::sync::OnceLock;

use rustc_hash::FxBuildHasher;

pub struct Table<K: 'static, V: 'static> {
    slots: Box<[OnceLock<&'static (K, V)>]>,
}

/// Linear probing gives up after this many slots: lookups stay short even when nearly full.
const MAX_PROBES: usize = 32;

impl<K: Hash + Eq + Sync, V: Sync> Table<K, V> {
    /// A table of `capacity` slots (a power of two).
    pub fn new(capacity: usize) -> Self {
        assert!(capacity.is_power_of_two());
        Table {
            slots: (0..capacity).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The slots `key` may occupy, in probe order.
    fn probe(&self, key: &K) -> impl Iterator<Item = &OnceLock<&'static (K, V)>> {
        let mask = self.slots.len() - 1;
        let start = FxBuildHasher.hash_one(key) as usize;
        (0..MAX_PROBES.min(self.slots.len())).map(move |i| &self.slots[(start + i) & mask])
    }

    #[inline]
    pub fn get(&self, key: &K) -> Option<&'static V> {
        let mask = self.slots.len() - 1;
        let start = FxBuildHasher.hash_one(key) as usize;
        for i in 0..MAX_PROBES.min(self.slots.len()) {
            let (k, v) = self.slots[(start + i) & mask].get()?;
            if k == key {
                return Some(v);
            }
        }
        None
    }

    /// Inserts `value` unless `key` is present; returns the value stored for `key`, or None when
    /// its probe sequence is full (then nothing is allocated).
    pub fn insert(&self, key: K, value: V) -> Option<&'static V> {
        if let Some(v) = self.get(&key) {
            return Some(v);
        }
        if self.probe(&key).all(|slot| slot.get().is_some()) {
            return None;
        }
        let entry: &'static (K, V) = Box::leak(Box::new((key, value)));
        let mut mine = Some(entry);
        for slot in self.probe(&entry.0) {
            let stored = *slot.get_or_init(|| mine.take().expect("initialised at most once"));
            // Either our entry went in, or this slot already holds the key (the first one wins).
            if mine.is_none() || stored.0 == entry.0 {
                return Some(&stored.1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_finds_what_insert_stored() {
        let t: Table<u64, &str> = Table::new(8);
        assert_eq!(t.get(&1), None);
        assert_eq!(t.insert(1, "one"), Some(&"one"));
        assert_eq!(t.insert(1, "uno"), Some(&"one"), "first value wins");
        assert_eq!(t.insert(9, "nine"), Some(&"nine"), "collides with 1 mod 8");
        assert_eq!(t.get(&1), Some(&"one"));
        assert_eq!(t.get(&9), Some(&"nine"));
        assert_eq!(t.get(&2), None);
    }

    #[test]
    fn full_table_refuses() {
        let t: Table<u64, u64> = Table::new(4);
        for k in 0..4 {
            assert_eq!(t.insert(k, k * 10), Some(&(k * 10)));
        }
        assert_eq!(t.insert(99, 1), None);
        assert_eq!(t.get(&99), None);
        assert_eq!(t.get(&3), Some(&30));
    }

    #[test]
    fn concurrent_inserts_agree() {
        let t: &'static Table<u64, u64> = Box::leak(Box::new(Table::new(1024)));
        let threads: Vec<_> = (0..4)
            .map(|n| {
                std::thread::spawn(move || {
                    (0..500)
                        .map(|k| *t.insert(k, n).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<u64>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
        for k in 0..500 {
            let first = results[0][k];
            assert!(results.iter().all(|r| r[k] == first), "one value per key");
            assert_eq!(t.get(&(k as u64)), Some(&first));
        }
    }
}
