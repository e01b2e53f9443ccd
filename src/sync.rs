//! Small sharing helpers every layer uses.

use crossbeam_utils::atomic::AtomicCell;
use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also after a thread panicked holding it (panics abort the process in release
/// builds; the state is still what the panicking thread left, which is all any reader needs).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A reference to a value that lives until the process ends, replaceable without a lock (one
/// atomic load to read).
pub struct LeakedCell<T: 'static>(AtomicCell<Option<&'static T>>);

impl<T: 'static> Default for LeakedCell<T> {
    fn default() -> Self {
        LeakedCell(AtomicCell::new(None))
    }
}

impl<T: Sync + 'static> LeakedCell<T> {
    pub fn new(value: &'static T) -> Self {
        LeakedCell(AtomicCell::new(Some(value)))
    }

    #[inline]
    pub fn get(&self) -> Option<&'static T> {
        self.0.load()
    }

    pub fn set(&self, value: &'static T) {
        self.0.store(Some(value));
    }

    pub fn clear(&self) {
        self.0.store(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_cell_is_lock_free() {
        assert!(AtomicCell::<Option<&'static u64>>::is_lock_free());
        let cell = LeakedCell::default();
        assert_eq!(cell.get(), None);
        cell.set(&7u64);
        assert_eq!(cell.get(), Some(&7));
        cell.clear();
        assert_eq!(cell.get(), None);
    }
}
