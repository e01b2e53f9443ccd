//! An agreement point: every rank proposes its candidate; if all propose the same episode at
//! the same instance, they exchange message lists, pair them and build the graph.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Arc;

use commtune_tune::edges::{self, Message};

use super::{
    AgreedEpisode, Episodes, LISTS_TAG, MAX_LISTS, PEERS_DIFFER, Phase, STEADY, USES, forced,
    set_outcome, settle, state,
};
use crate::codelets::halo::neighbor::{Expected, Schedule};
use crate::mpi::{self, Comm, PointToPointKind, Spread};
use crate::runtime;

/// The first instance no rank has begun: reduced from this rank's `closed` instances of an
/// episode and whether it has an episode open (which may be one more).
pub(super) fn next_instance(closed: u64, episodes: Episodes) -> i64 {
    closed as i64 + i64::from((episodes.open)()) + 1
}

/// Every rank proposes its candidate; if all propose the same episode at the same instance, the
/// graph is built and the episode switches.
pub(super) fn propose(bits: usize, private: &Comm, episodes: Episodes) -> mpi::datatype::MpiResult {
    // Another thread may close or begin an instance of the episode between this rank's count
    // and the agreement's start (`next_instance`), which would then count instances unlike its
    // peers and hang them: a rank whose threads may be inside MPI at once proposes nothing.
    let threads = runtime::process().is_some_and(|p| p.threads_at_once);
    let (entry, identity, messages, list, closed, uncounted) = {
        let c = state(bits);
        let steady = c.as_ref().and_then(|c| {
            let k = c.candidates.get(&c.latest?)?;
            (k.steady >= STEADY && (forced() || (episodes.settled)(k.entry))).then_some(k)
        });
        // With its instances counted (not beyond MAX_LISTS).
        let counted = steady.and_then(|k| Some((k, *c.as_ref()?.instances.get(&k.list)?)));
        match counted.filter(|_| !threads) {
            Some((k, closed)) => (
                Some(k.entry),
                k.identity,
                k.messages.clone(),
                k.list,
                closed,
                false,
            ),
            None => (None, 0, Vec::new(), 0, 0, steady.is_some() && !threads),
        }
    };
    let ready = i64::from(entry.is_some());
    let identity = (identity >> 2) as i64;
    let next = entry.map_or(0, |_| next_instance(closed, episodes));
    let [identity, closed_everywhere, ready, next, uncounted, threads] = private.min_max_i64([
        identity,
        closed as i64,
        ready,
        next,
        i64::from(uncounted),
        i64::from(threads),
    ])?;
    // The first instance no rank has begun.
    let next = next.max;
    let agreed = ready.min == 1 && identity.same_everywhere();
    let Some(entry) = entry.filter(|_| agreed && closed_everywhere.same_everywhere()) else {
        let why = why_not_agreed(ready, uncounted, threads, agreed);
        set_outcome(
            bits,
            format!("at collective call {}: {why}", collective_number(bits)),
        );
        return Ok(());
    };
    match build(private, &messages)? {
        Ok(schedule) => {
            let phase = if forced() {
                Phase::Chosen
            } else {
                Phase::Trial
            };
            USES.insert(
                entry.id(),
                AgreedEpisode {
                    entry,
                    schedule: Arc::new(schedule),
                    list,
                    instances: closed,
                    from: next as u64,
                    decided_from: if phase == Phase::Trial {
                        u64::MAX
                    } else {
                        next as u64
                    },
                    phase,
                    samples: Vec::new(),
                    own_samples: Vec::new(),
                    broken: false,
                    freed: false,
                },
            );
            entry.note(format!(
                "halo codelet neighbor: all {} ranks agreed at collective call {} on the \
                 communicator to run it from instance {}",
                private.size,
                collective_number(bits),
                next
            ));
            if let Some(mut c) = state(bits) {
                c.outcome = None;
                match phase {
                    Phase::Trial => c.trial = Some(entry),
                    _ => c.settled = true,
                }
            }
        }
        Err(why) => {
            entry.note(format!("halo codelet neighbor does not apply: {why}"));
            settle(bits, &why);
        }
    }
    Ok(())
}

pub(super) fn collective_number(bits: usize) -> u64 {
    state(bits).map_or(0, |c| c.collectives)
}

/// Pairs every rank's sends with its peers' receives and builds the graph; Err(why) on every
/// rank when any rank's messages do not pair.
fn build(
    private: &Comm,
    messages: &[Expected],
) -> mpi::datatype::MpiResult<Result<Schedule, String>> {
    let size = private.size as usize;
    let mut sends_to = vec![0i64; size];
    let mut receives_from = vec![0i64; size];
    for m in messages {
        let peer = usize::try_from(m.peer).unwrap_or(size).min(size - 1);
        match m.kind {
            PointToPointKind::Send => sends_to[peer] += 1,
            PointToPointKind::Recv => receives_from[peer] += 1,
        }
    }
    let sent_here = private.alltoall_i64(&sends_to)?;
    let counted = if sent_here == receives_from {
        Ok(())
    } else {
        Err(
            "the number of messages a peer sends this rank differs from the number it receives"
                .to_string(),
        )
    };
    if let Err(why) = all_ok(private, counted, PEERS_DIFFER)? {
        return Ok(Err(why));
    }
    let mut lists: HashMap<c_int, Vec<i64>> = HashMap::new();
    for m in messages.iter().filter(|m| m.kind == PointToPointKind::Send) {
        lists
            .entry(m.peer)
            .or_default()
            .extend([i64::from(m.tag), m.bytes]);
    }
    let sends: Vec<(c_int, Vec<i64>)> = lists.into_iter().collect();
    let recvs: Vec<(c_int, usize)> = (0..size)
        .filter(|&r| sent_here[r] > 0)
        .map(|r| (r as c_int, 2 * sent_here[r] as usize))
        .collect();
    let received = private.exchange_i64(&sends, &recvs, LISTS_TAG)?;
    let incoming: HashMap<i32, Vec<(i32, i64)>> = recvs
        .iter()
        .zip(received)
        .map(|(&(from, _), list)| {
            (
                from,
                list.chunks_exact(2).map(|p| (p[0] as i32, p[1])).collect(),
            )
        })
        .collect();
    let mine: Vec<Message> = messages
        .iter()
        .map(|m| Message {
            send: m.kind == PointToPointKind::Send,
            peer: m.peer,
            tag: m.tag,
            bytes: m.bytes,
        })
        .collect();
    let paired = edges::pair(&mine, &incoming);
    let edges = match all_ok(private, paired, PEERS_DIFFER)? {
        Ok(edges) => edges,
        Err(why) => return Ok(Err(why)),
    };
    let made = private
        .dist_graph(&edges.sources, &edges.destinations)
        .map_err(|code| format!("MPI error {code} making the graph"));
    let graph = match all_ok(private, made, "another rank could not make the graph")? {
        Ok(graph) => graph,
        Err(why) => return Ok(Err(why)),
    };
    let sends = edges.destinations.len();
    Ok(Ok(Schedule::new(
        messages.to_vec(),
        edges.blocks,
        sends,
        graph,
    )))
}

/// Whether every rank's `local` is Ok: this rank's value, or why not (its own reason, or
/// `elsewhere` when only another rank failed).
fn all_ok<T>(
    private: &Comm,
    local: Result<T, String>,
    elsewhere: &str,
) -> mpi::datatype::MpiResult<Result<T, String>> {
    let mut failed = [i64::from(local.is_err())];
    private.allreduce_max_i64(&mut failed)?;
    Ok(match local {
        Ok(_) if failed[0] != 0 => Err(elsewhere.into()),
        other => other,
    })
}

/// Why an agreement point agreed on nothing, from the reduced proposals: whether each rank had
/// an episode `ready`, had one whose message list it did not count (`uncounted`), and whether
/// every ready rank proposed the same episode (`same_episode`).
fn why_not_agreed(ready: Spread, uncounted: Spread, threads: Spread, same_episode: bool) -> String {
    if threads.max == 1 {
        return "a rank runs with MPI_THREAD_MULTIPLE, where another thread may begin or complete \
                an instance of the episode while the ranks agree"
            .to_string();
    }
    if uncounted.max == 1 {
        return format!(
            "a rank counts the instances of {MAX_LISTS} message lists per communicator at most, \
             and its episode's came later"
        );
    }
    let why = match (ready.max, ready.min) {
        (0, _) => "no rank had a repeating episode ready",
        (_, 0) => {
            "not every rank had this episode ready (each must have run it twice in a row with no other MPI call between its posts, and under tuning decided its own codelet)"
        }
        _ if same_episode => "the ranks were at different instances of the episode",
        _ => "the ranks were at different episodes",
    };
    why.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(min: i64, max: i64) -> Spread {
        Spread { min, max }
    }

    #[test]
    fn a_rank_that_stopped_counting_lists_says_so_first() {
        let none = spread(0, 0);
        let why = why_not_agreed(spread(0, 1), spread(0, 1), none, false);
        assert!(why.contains(&format!("{MAX_LISTS} message lists")), "{why}");
        let why = why_not_agreed(spread(0, 1), spread(0, 1), spread(0, 1), false);
        assert!(
            why.contains("MPI_THREAD_MULTIPLE"),
            "threads come first: {why}"
        );
        assert!(why_not_agreed(none, none, none, false).contains("no rank had"));
        assert!(why_not_agreed(spread(0, 1), none, none, false).contains("not every rank"));
        let (ready, different) = (spread(1, 1), "different instances");
        assert!(why_not_agreed(ready, none, none, true).contains(different));
        assert!(why_not_agreed(ready, none, none, false).contains("different episodes"));
    }
}
