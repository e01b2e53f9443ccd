//! Small sharing helpers every layer uses.

use crossbeam_utils::atomic::AtomicCell;
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// A value read once per process on a thread of its own (a history store), started at MPI_Init
/// and waited for at its first use; read at the first use itself when MPI_Init was not seen
/// (programs whose MPI_Init the library does not see, such as Fortran mpi_f08 under MPICH).
pub struct BackgroundRead<T>(Mutex<Read<T>>);

enum Read<T> {
    NotStarted,
    /// Nothing to read (no store, not tuning), or the reader could not run.
    None,
    Reading(JoinHandle<T>),
    Done(T),
}

impl<T: Send + 'static> BackgroundRead<T> {
    pub const fn new() -> Self {
        BackgroundRead(Mutex::new(Read::NotStarted))
    }

    /// Starts `read` (None: nothing to read) on a thread named `name`, and waits for it up to
    /// `patience`, sleeping (the reader may need this core).
    pub fn start(
        &self,
        name: &str,
        patience: Duration,
        read: Option<impl FnOnce() -> T + Send + 'static>,
    ) {
        let mut state = lock(&self.0);
        *state = Read::None;
        let Some(read) = read else {
            return;
        };
        if let Ok(reader) = std::thread::Builder::new().name(name.into()).spawn(read) {
            let started = Instant::now();
            while !reader.is_finished() && started.elapsed() < patience {
                std::thread::sleep(Duration::from_micros(50));
            }
            *state = Read::Reading(reader);
        }
    }

    /// Runs `with` on the value once read (waiting for the reader: local, it cannot deadlock),
    /// reading it here with `read_now` if `start` never ran; None when there is nothing.
    pub fn with<R>(
        &self,
        read_now: impl FnOnce() -> Option<T>,
        with: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        let mut state = lock(&self.0);
        if matches!(*state, Read::NotStarted) {
            *state = read_now().map_or(Read::None, Read::Done);
        }
        // A reader that failed leaves nothing (panics abort: it cannot happen).
        if matches!(*state, Read::Reading(_))
            && let Read::Reading(reader) = std::mem::replace(&mut *state, Read::None)
            && let Ok(value) = reader.join()
        {
            *state = Read::Done(value);
        }
        match &mut *state {
            Read::Done(value) => Some(with(value)),
            _ => None,
        }
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
