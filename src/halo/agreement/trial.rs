//! The trial of an agreed episode: which instances run the collective, their samples, a rank
//! that breaks the agreement, and the decision from the slowest rank's estimates.

use std::cell::Cell;
use std::sync::Arc;

use commtune_tune::stats;

use super::proposal::{collective_number, next_instance};
use super::{Episodes, Phase, USES, may_agree, state};
use crate::codelets::halo::neighbor::{Expected, Schedule};
use crate::keys::Entry;
use crate::mpi::{self, Comm, HandleBits, PointToPoint};
use crate::{clock, runtime};

/// The schedule the next instance of `entry` runs, if the ranks agreed to run it as a collective.
pub fn schedule_for(entry: &'static Entry) -> Option<Arc<Schedule>> {
    if !may_agree() {
        return None;
    }
    let u = USES.get(&entry.id())?;
    let instance = u.instances + 1;
    let collective = if instance < u.from {
        false
    } else if instance < u.decided_from {
        ((instance - u.from) / 2).is_multiple_of(2)
    } else {
        u.phase == Phase::Chosen
    };
    (collective && !u.broken && !u.freed).then(|| u.schedule.clone())
}

/// The schedule of an agreed episode whose next instance runs the collective and whose first
/// message is `call`, for an episode whose first post predicted no agreed one. A first post
/// predicts the key that last began with it, on this rank alone: where two episodes begin alike
/// here but not on a peer, this rank would take the agreed one for the other and post natively
/// while the peer runs the collective. Held as the agreed one's, the episode shows which it is by
/// its posts (`neighbor::post`, `neighbor::flush`).
pub fn schedule_beginning_with(call: &PointToPoint) -> Option<Arc<Schedule>> {
    if USES.is_empty() {
        return None;
    }
    // Not a freed communicator's: MPI may give its handle to a new one, whose episodes then
    // begin with the same messages.
    let entry = USES
        .iter()
        .find(|u| !u.freed && !u.broken && u.schedule.begins_with(call))
        .map(|u| u.entry)?;
    schedule_for(entry)
}

/// Whether an episode whose messages so far are `messages` (posting order) is still being posted:
/// they begin an agreed episode's and are fewer. A rank may complete a message of an instance
/// before posting the rest (MPI_Request_free of a send, which completes it for the application;
/// or, in an instance that runs natively, a completion call) while its peers post the instance
/// whole: closed there, it would be an instance that they count and this rank does not, and the
/// next one would run the collective on one side only. `goes_on` then tells at the next post.
pub fn still_posting(messages: impl Iterator<Item = Expected> + Clone) -> bool {
    agreed_begins_with(messages, |matched, all| matched < all)
}

/// Whether `messages` (an episode still being posted, and its next post) go on with an agreed
/// episode's: else the episode closes before that post, which begins another.
pub fn goes_on(messages: impl Iterator<Item = Expected> + Clone) -> bool {
    agreed_begins_with(messages, |_, _| true)
}

/// Whether the real ones of `messages` are the first of an agreed episode's (at least one), with
/// `how_many` true of how many they are and how many it has.
fn agreed_begins_with(
    messages: impl Iterator<Item = Expected> + Clone,
    how_many: impl Fn(usize, usize) -> bool,
) -> bool {
    if USES.is_empty() {
        return false;
    }
    let real = messages.filter(|m| m.peer != mpi::proc_null());
    USES.iter().any(|u| {
        !u.freed
            && u.schedule
                .begun_by(real.clone())
                .is_some_and(|(matched, all)| how_many(matched, all))
    })
}

thread_local! {
    /// The agreed episode (its key's id) and the number of its instance that the episode closing
    /// on this thread is, for `sample`.
    static CLOSING: Cell<Option<(usize, u64)>> = const { Cell::new(None) };
}

/// An episode closed on this thread, whose messages were `list` on the communicator handle
/// `bits` (None: none but to MPI_PROC_NULL): if they are an agreed episode's, the episode is its
/// next instance, whichever call completed it.
pub(super) fn instance_closed(messages: Option<(usize, u64)>) {
    let closing = messages
        .filter(|_| !USES.is_empty())
        .and_then(|(bits, list)| {
            let mut u = USES.iter_mut().find(|u| {
                u.list == list && !u.freed && u.schedule.comm().is_some_and(|c| c.bits() == bits)
            })?;
            u.instances += 1;
            Some((u.entry.id(), u.instances))
        });
    CLOSING.set(closing);
}

/// A sample of the episode that just closed on this thread, which ran the collective or not: one
/// of the trial's if it was an instance of an agreed episode under trial.
pub fn sample(collective: bool, ticks: u64) {
    if !may_agree() {
        return;
    }
    let Some((id, instance)) = CLOSING.get() else {
        return;
    };
    if let Some(mut u) = USES.get_mut(&id)
        && (u.from..u.decided_from).contains(&instance)
    {
        let samples = if collective {
            &mut u.samples
        } else {
            &mut u.own_samples
        };
        samples.push(ticks as f64);
    }
}

/// This rank could not run an agreed instance of `entry`.
pub fn broken(entry: &Entry, why: &str) {
    if let Some(mut u) = USES.get_mut(&entry.id())
        && !u.broken
    {
        u.broken = true;
        entry.note(format!(
            "halo codelet neighbor: this rank broke the agreement at instance {} ({why}); its \
             messages went natively, and peers waiting in the collective may hang",
            u.instances + 1
        ));
    }
}

/// Ends the trial of `entry` once every rank has its samples: the slowest rank's estimates
/// decide, the same everywhere.
pub(super) fn evaluate(
    bits: usize,
    entry: &'static Entry,
    private: &Comm,
    episodes: Episodes,
) -> mpi::datatype::MpiResult {
    let config = runtime::config();
    // Every rank agreed to this trial, so each has its record; a missing one counts as broken
    // rather than leaving the reduction below to the others.
    let estimate = |samples: &[f64]| {
        stats::estimate(config.tuning.filter, samples).map_or(0.0, |e| e.location)
    };
    let (fewest, neighbor, own, broken, closed) =
        USES.get(&entry.id()).map_or((0, 0.0, 0.0, true, 0), |u| {
            let fewest = u.samples.len().min(u.own_samples.len());
            (
                fewest,
                estimate(&u.samples),
                estimate(&u.own_samples),
                u.broken,
                u.instances,
            )
        });
    let mut values = [
        -(fewest as f64),
        neighbor,
        own,
        f64::from(u8::from(broken)),
        next_instance(closed, episodes) as f64,
    ];
    private.allreduce_max_f64(&mut values)?;
    let enough = -values[0] >= f64::from(config.halo_tuning.samples);
    if !enough && values[3] == 0.0 {
        return Ok(());
    }
    let kept = values[3] == 0.0 && values[1] < values[2] * (1.0 - config.tuning.min_gain);
    if let Some(mut u) = USES.get_mut(&entry.id()) {
        u.phase = if kept { Phase::Chosen } else { Phase::Rejected };
        u.decided_from = values[4] as u64;
    }
    let us = clock::ns_per_tick() / 1e3;
    entry.note(format!(
        "halo codelet neighbor {} at collective call {}: {:.1} us against {:.1} us for the \
         ranks' own codelets in the alternate instances (the slowest rank's estimates){}",
        if kept { "kept" } else { "dropped" },
        collective_number(bits),
        values[1] * us,
        values[2] * us,
        if values[3] != 0.0 {
            "; a rank broke the agreement"
        } else {
            ""
        }
    ));
    if let Some(mut c) = state(bits) {
        c.trial = None;
        c.settled = true;
    }
    Ok(())
}

/// Whether `entry` runs the collective for good (the report names it the winner).
pub fn chosen(entry: &Entry) -> bool {
    USES.get(&entry.id())
        .is_some_and(|u| u.phase == Phase::Chosen && !u.broken)
}
