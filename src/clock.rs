//! Cheap timestamps for the hot path.
//!
//! Two clock reads per call are most of the profiling cost: clock_gettime costs ~30 ns here, the
//! time-stamp counter ~8 ns. The TSC is used where the kernel itself trusts it as its clocksource
//! (then it is invariant and synchronised across cores); timestamps are in ticks, converted to
//! nanoseconds with the rate measured against CLOCK_MONOTONIC over the whole run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::Instant;

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// (ticks, monotonic ns) when the clock was started.
static ORIGIN: OnceLock<(u64, u64)> = OnceLock::new();

/// Chooses the counter; called once when MPI starts.
pub fn start() {
    let tsc = cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
    USE_TSC.store(tsc, Ordering::Relaxed);
    let _ = ORIGIN.set((now(), monotonic_ns()));
}

/// The current time in ticks.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Ordering::Relaxed) {
        // SAFETY: RDTSC has no preconditions and exists on every x86_64 processor.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// Nanoseconds per tick, measured from `start` until now.
pub fn ns_per_tick() -> f64 {
    if !USE_TSC.load(Ordering::Relaxed) {
        return 1.0;
    }
    let Some(&(ticks0, ns0)) = ORIGIN.get() else {
        return 1.0;
    };
    let (ticks, ns) = (
        now().saturating_sub(ticks0),
        monotonic_ns().saturating_sub(ns0),
    );
    if ticks == 0 || ns == 0 {
        1.0
    } else {
        ns as f64 / ticks as f64
    }
}

/// Nanoseconds of CLOCK_MONOTONIC (std's `Instant`, read through the vDSO) since the first call.
pub fn monotonic_ns() -> u64 {
    static FIRST: LazyLock<Instant> = LazyLock::new(Instant::now);
    FIRST.elapsed().as_nanos() as u64
}
