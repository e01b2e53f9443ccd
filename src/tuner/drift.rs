//! Drift checks of keys in production: the window before each check against the first after
//! the decision, reduced over ranks; a search reopens after strikes in a row.

use commtune_tune::timeline::Mark;

use super::search::{search_step, start_search, trace};
use super::state::{CommTunerState, Phase, Production, TunerState};
use super::{SlowCall, Step, consensus};
use crate::codelets::Operation;
use crate::runtime;

/// Drift windows in a row beyond the threshold before a search reopens.
const DRIFT_STRIKES: u32 = 2;
/// Searches a key may reopen at most: drift cannot make the tuner thrash.
const MAX_REOPEN: u32 = 3;

/// A drift check of a key in production (every rank is at the same call of it). Returns the
/// search step when the search reopens.
pub(super) fn drift_check<C: Operation>(
    at: &SlowCall<C>,
    comm: &mut CommTunerState,
    key: &mut TunerState,
) -> Option<Step> {
    let settings = runtime::config().tuning;
    let Phase::Production(p) = &mut key.phase else {
        return None;
    };
    at.tuner.check_drift_at(at.k + settings.drift_interval);
    let ratio = drift_ratio(p);
    let mean = consensus::drift(&comm.private?, ratio).ok()?;
    if mean > 1.0 + settings.drift_threshold {
        p.strikes += 1;
    } else {
        p.strikes = 0;
    }
    trace(at.entry, || {
        format!("drift check: mean ratio {mean:.2}, strikes {}", p.strikes)
    });
    let reopen = p.strikes >= DRIFT_STRIKES && key.reopened < MAX_REOPEN;
    key.timeline.push(Mark::Drift {
        call: at.k,
        ratio: mean,
        reopened: reopen,
    });
    if !reopen {
        return None;
    }
    key.reopened += 1;
    start_search(at, comm, key).then(|| search_step(at, comm, key))
}

/// The window's median over the baseline (the first window's median).
fn drift_ratio(p: &mut Production) -> f64 {
    let mut window = std::mem::take(&mut p.window);
    if window.is_empty() {
        return 1.0;
    }
    window.sort_unstable();
    let median = window[window.len() / 2] as f64;
    match p.baseline {
        Some(base) if base > 0.0 => median / base,
        _ => {
            p.baseline = Some(median);
            1.0
        }
    }
}
