//! Agreement on the `neighbor` codelet: the only place where ranks talk about halo episodes.
//!
//! A halo episode is not a collective, so no point of it is one where every rank can wait for
//! every other. The application's own collective calls on the episode's communicator are
//! (MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv and MPI_Barrier, which the library intercepts; a
//! portable program must work whether a collective synchronises or not). At some of them, the
//! same ones on every rank (`Communicator::due`), the ranks reduce their proposals: the episode
//! each last closed on the communicator once it ran twice in a row at its site, with its identity
//! (site and signature ordinal) and instance count. If every rank proposes the same one at the
//! same instance, they exchange their message lists, pair sends with receives (`edges`), build
//! the graph, and switch at the same instance: the first that no rank has begun. Under tuning the
//! trial alternates the collective with each rank's own codelet in pairs of instances until both
//! have COMMTUNE_SAMPLES samples; at a later agreement point the slowest rank's estimates of the
//! two are compared, and every rank keeps or drops the collective from the same instance. Each communicator agrees on one episode
//! at most; after a decision it stops checking.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_int;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use commtune_report::Op;
use commtune_tune::edges::{self, Message};
use commtune_tune::stats;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::codelets::halo::NEIGHBOR;
use crate::codelets::halo::neighbor::{Expected, Schedule};
use crate::config::Mode;
use crate::keys::Entry;
use crate::mpi::{self, Comm, HandleBits, MPI_Comm, PointToPointKind};
use crate::sync::lock;
use crate::{clock, comms, runtime};

/// Consecutive instances of an episode before a rank proposes it.
const STEADY: u64 = 2;
/// Agreement points are the application's collective calls number 1, 2, 4, 8, then every 16th.
const MAX_INTERVAL: u64 = 16;
/// Why a rank whose own messages pair gives up.
const PEERS_DIFFER: &str = "another rank's messages do not pair with its peers'";
/// The tag of the message-list exchange on the private communicator.
const LISTS_TAG: c_int = 0x6e62;

/// An episode on a communicator that could run as one collective, the latest at its site.
struct Candidate {
    entry: &'static Entry,
    identity: u64,
    steady: u64,
    messages: Vec<Expected>,
}

/// The agreement's state of one communicator (kept in its `comms` record).
#[derive(Default)]
struct CommAgreement {
    /// The number of the collective call being handled (in the record's count).
    collectives: u64,
    next_check: u64,
    interval: u64,
    /// By site; the site of the latest closed episode is what this rank proposes.
    candidates: HashMap<u64, Candidate>,
    latest: Option<u64>,
    /// The agreed episode under trial.
    trial: Option<&'static Entry>,
    /// No more agreement points (a decision was taken, or the communicator cannot have one).
    settled: bool,
    /// What the latest agreement point found, for the report.
    outcome: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Trial,
    Chosen,
    Rejected,
}

/// An agreed episode on this rank.
struct AgreedEpisode {
    schedule: Arc<Schedule>,
    /// The first instance that may run the collective, and the first the decision applies to
    /// (before it, a trial alternates the collective with the ranks' own codelets in pairs of
    /// instances, so that both are measured in the same stretch of the run with every rank in
    /// the same mode).
    from: u64,
    decided_from: u64,
    phase: Phase,
    /// The trial's samples of the collective and of the rank's own codelet.
    samples: Vec<f64>,
    own_samples: Vec<f64>,
    broken: bool,
    /// Its communicator was freed.
    freed: bool,
}

/// Keyed by the entry's address: entries live for the whole process.
static USES: LazyLock<DashMap<usize, AgreedEpisode, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// Whether ranks may agree on `neighbor` (the same on every rank: it depends on the knobs and on
/// which MPI libraries are loaded). Asked at every collective, so a plain load once known.
#[inline]
pub fn may_agree() -> bool {
    const UNKNOWN: u8 = 0;
    const NO: u8 = 1;
    const YES: u8 = 2;
    static KNOWN: AtomicU8 = AtomicU8::new(UNKNOWN);
    match KNOWN.load(Ordering::Relaxed) {
        NO => false,
        YES => true,
        _ => {
            let config = runtime::config();
            let forced = config.forced(Op::Halo);
            let asked = forced == Some(NEIGHBOR)
                || (config.mode == Mode::Tune
                    && forced.is_none()
                    && config.halo_neighbor
                    && !config.excluded(Op::Halo, NEIGHBOR));
            let may = asked && mpi::sees_every_call();
            KNOWN.store(if may { YES } else { NO }, Ordering::Relaxed);
            may
        }
    }
}

fn forced() -> bool {
    runtime::config().forced(Op::Halo) == Some(NEIGHBOR)
}

/// Why an episode's messages (`ops`, in posting order) cannot travel as one neighbourhood
/// collective, or the messages to post as one (those to MPI_PROC_NULL go as they are).
pub fn eligibility(ops: impl Iterator<Item = Expected>) -> Result<Vec<Expected>, &'static str> {
    let real: Vec<Expected> = ops.filter(|o| o.peer != mpi::proc_null()).collect();
    let first = real.first().ok_or("every message goes to MPI_PROC_NULL")?;
    if real
        .iter()
        .any(|o| o.comm.get().bits() != first.comm.get().bits())
    {
        return Err("its messages use several communicators");
    }
    if real
        .iter()
        .any(|o| o.peer == mpi::any_source() || o.tag == mpi::any_tag())
    {
        return Err("a receive names MPI_ANY_SOURCE or MPI_ANY_TAG");
    }
    if real.iter().any(|o| c_int::try_from(o.count).is_err()) {
        return Err("a count does not fit an int");
    }
    if mpi::is_intercomm(first.comm.get()) {
        return Err("its communicator is an intercommunicator");
    }
    Ok(real)
}

/// An episode of `entry` closed with messages `ops`: it becomes its communicator's candidate.
/// Only instances whose first post predicted them count as steady: a rank decides at the first
/// post whether an instance runs the collective. Nor do instances with another MPI call between
/// their posts (not `posted_alone`): there a rank would break the agreement while its peers wait
/// in the collective. The messages are checked and kept only when the candidate changes, not at
/// every instance.
pub fn closed(
    entry: &'static Entry,
    predicted: bool,
    posted_alone: bool,
    ops: impl Iterator<Item = Expected>,
) {
    if !may_agree() {
        return;
    }
    let mut real = ops.filter(|o| o.peer != mpi::proc_null()).peekable();
    let Some(comm) = real.peek().map(|o| o.comm.get()) else {
        return;
    };
    let mut c = communicator(comm);
    let site = entry.site.id;
    c.latest = Some(site);
    if let Some(k) = c.candidates.get_mut(&site)
        && std::ptr::eq(k.entry, entry)
        && predicted
    {
        k.steady = if posted_alone { k.steady + 1 } else { 0 };
        return;
    }
    match eligibility(real) {
        Ok(messages) => {
            let candidate = Candidate {
                entry,
                identity: FxBuildHasher.hash_one((site, entry.agree_hash)),
                steady: u64::from(posted_alone),
                messages,
            };
            c.candidates.insert(site, candidate);
        }
        Err(_) => {
            c.candidates.remove(&site);
        }
    }
}

/// The schedule the next instance of `entry` runs, if the ranks agreed to run it as a collective.
pub fn schedule_for(entry: &'static Entry) -> Option<Arc<Schedule>> {
    if !may_agree() {
        return None;
    }
    let u = USES.get(&entry.id())?;
    let instance = entry.calls() + 1;
    let collective = if instance < u.from {
        false
    } else if instance < u.decided_from {
        ((instance - u.from) / 2).is_multiple_of(2)
    } else {
        u.phase == Phase::Chosen
    };
    (collective && !u.broken && !u.freed).then(|| u.schedule.clone())
}

/// A sample of the instance of `entry` that just completed, which ran the collective or not.
pub fn sample(entry: &Entry, collective: bool, ticks: u64) {
    if !may_agree() {
        return;
    }
    let instance = entry.calls();
    if let Some(mut u) = USES.get_mut(&entry.id())
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
            entry.calls() + 1
        ));
    }
}

impl CommAgreement {
    /// Collective call `number` of the communicator: whether it is an agreement point.
    fn due(&mut self, number: u64) -> bool {
        self.collectives = number;
        if self.settled || self.collectives < self.next_check {
            return false;
        }
        self.interval = (self.interval * 2).clamp(1, MAX_INTERVAL);
        self.next_check = self.collectives + self.interval;
        true
    }
}

/// What the agreement reads of this rank's episodes, from the halo layer that tracks and tunes
/// them.
#[derive(Clone, Copy)]
pub struct Episodes {
    /// The key this thread's episode in progress is predicted to be.
    pub open: fn() -> Option<&'static Entry>,
    /// Whether this rank decided its own codelet for an episode key (under tuning, ranks propose
    /// an episode only then).
    pub settled: fn(&Entry) -> bool,
}

/// The application called a collective on `comm` (every rank of it does, in the same order);
/// `tuned`: the tuner runs it, and counts it in the communicator's collective calls (else this
/// does). Every collective call is counted while ranks may agree, even one MPI refused to tell
/// the library is freed: a rank that stopped counting would miss the agreement points its peers
/// reach.
#[inline]
pub fn at_collective(comm: MPI_Comm, episodes: Episodes, tuned: bool) {
    if may_agree() {
        count_collective(comm, episodes, tuned);
    }
}

#[cold]
fn count_collective(comm: MPI_Comm, episodes: Episodes, tuned: bool) {
    let bits = comm.bits();
    let record = comms::of(comm);
    let number = record.collectives.load(Ordering::Relaxed) + 1;
    if !tuned {
        record.collectives.store(number, Ordering::Relaxed);
    }
    let (due, trial) = {
        let mut c = state_of(record);
        (c.due(number), c.trial)
    };
    if !due {
        return;
    }
    if mpi::is_intercomm(comm) || mpi::comm_size(comm) < 2 {
        settle(
            bits,
            "its communicator has one rank, or is an intercommunicator",
        );
        return;
    }
    let Ok(private) = record.private(comm) else {
        settle(bits, "the library could not duplicate the communicator");
        return;
    };
    let agreed = match trial {
        None => propose(bits, &private, episodes),
        Some(entry) => evaluate(bits, entry, &private, episodes),
    };
    if let Err(code) = agreed {
        settle(bits, &format!("MPI error {code} during the agreement"));
    }
}

/// The agreement's state of the communicator of `record`, made on first use.
fn state_of(record: &'static comms::Communicator) -> MutexGuard<'static, CommAgreement> {
    let state: &'static (dyn Any + Send + Sync) = *record
        .neighbor
        .get_or_init(|| Box::leak(Box::new(Mutex::new(CommAgreement::default()))));
    lock(
        state
            .downcast_ref()
            .expect("a communicator's neighbor slot holds the agreement's state only"),
    )
}

/// The agreement's state of the application's communicator `comm`, made on first use.
fn communicator(comm: MPI_Comm) -> MutexGuard<'static, CommAgreement> {
    state_of(comms::of(comm))
}

/// The agreement's state of the communicator handle `bits`, if it has one.
fn state(bits: usize) -> Option<MutexGuard<'static, CommAgreement>> {
    comms::of_bits(bits)
        .filter(|record| record.neighbor.get().is_some())
        .map(state_of)
}

fn settle(bits: usize, outcome: &str) {
    if let Some(mut c) = state(bits) {
        c.settled = true;
        c.outcome = Some(outcome.to_string());
    }
}

fn set_outcome(bits: usize, outcome: String) {
    if let Some(mut c) = state(bits) {
        c.outcome = Some(outcome);
    }
}

/// The first instance no rank has begun: reduced from this rank's closed instances of `entry` and
/// whether it has one open.
fn next_instance(entry: &'static Entry, episodes: Episodes) -> i64 {
    let open = (episodes.open)().is_some_and(|e| std::ptr::eq(e, entry));
    entry.calls() as i64 + i64::from(open) + 1
}

/// Every rank proposes its candidate; if all propose the same episode at the same instance, the
/// graph is built and the episode switches.
fn propose(bits: usize, private: &Comm, episodes: Episodes) -> mpi::datatype::MpiResult {
    let (entry, identity, messages) = {
        let c = state(bits);
        let latest = c.as_ref().and_then(|c| c.candidates.get(&c.latest?));
        let ready =
            latest.filter(|k| k.steady >= STEADY && (forced() || (episodes.settled)(k.entry)));
        match ready {
            Some(k) => (Some(k.entry), k.identity, k.messages.clone()),
            None => (None, 0, Vec::new()),
        }
    };
    let ready = i64::from(entry.is_some());
    let identity = (identity >> 2) as i64;
    let closed = entry.map_or(0, |e| e.calls() as i64);
    let next = entry.map_or(0, |e| next_instance(e, episodes));
    let [identity, closed, ready, next] = private.min_max_i64([identity, closed, ready, next])?;
    // The first instance no rank has begun.
    let next = next.max;
    let agreed = ready.min == 1 && identity.same_everywhere();
    let Some(entry) = entry.filter(|_| agreed && closed.same_everywhere()) else {
        let why = match (ready.max, ready.min) {
            (0, _) => "no rank had a repeating episode ready",
            (_, 0) => {
                "not every rank had this episode ready (each must have run it twice in a row with no other MPI call between its posts, and under tuning decided its own codelet)"
            }
            _ if agreed => "the ranks were at different instances of the episode",
            _ => "the ranks were at different episodes",
        };
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
                    schedule: Arc::new(schedule),
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

fn collective_number(bits: usize) -> u64 {
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
    let bytes = |m: &Expected| m.count * mpi::type_size(m.datatype.get());
    let mut lists: HashMap<c_int, Vec<i64>> = HashMap::new();
    for m in messages.iter().filter(|m| m.kind == PointToPointKind::Send) {
        lists
            .entry(m.peer)
            .or_default()
            .extend([i64::from(m.tag), bytes(m)]);
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
            bytes: bytes(m),
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

/// Ends the trial of `entry` once every rank has its samples: the slowest rank's estimates
/// decide, the same everywhere.
fn evaluate(
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
    let (fewest, neighbor, own, broken) = USES.get(&entry.id()).map_or((0, 0.0, 0.0, true), |u| {
        let fewest = u.samples.len().min(u.own_samples.len());
        (
            fewest,
            estimate(&u.samples),
            estimate(&u.own_samples),
            u.broken,
        )
    });
    let mut values = [
        -(fewest as f64),
        neighbor,
        own,
        f64::from(u8::from(broken)),
        next_instance(entry, episodes) as f64,
    ];
    private.allreduce_max_f64(&mut values)?;
    let enough = -values[0] >= f64::from(config.tuning.samples);
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

/// The application freed a communicator (`comms` hook): its graph too (every rank is inside
/// MPI_Comm_free), and its agreed episodes never run the collective again (a new communicator
/// may reuse the handle).
pub fn forget(bits: usize) {
    let Some(mut c) = state(bits) else {
        return;
    };
    explain(&c);
    *c = CommAgreement::default();
    drop(c);
    let mut graphs = Vec::new();
    for mut u in USES.iter_mut() {
        if u.schedule.comm().is_some_and(|c| c.bits() == bits) && !u.freed {
            u.freed = true;
            graphs.push(u.schedule.graph());
        }
    }
    graphs.into_iter().for_each(mpi::comm_free);
}

/// Before the report: each communicator's episodes that never ran the collective say why.
pub fn finalizing() {
    comms::all()
        .into_iter()
        .filter(|record| record.neighbor.get().is_some())
        .for_each(|record| explain(&state_of(record)));
}

/// Notes on `c`'s episodes that never ran the collective why they did not.
fn explain(c: &CommAgreement) {
    let other = c
        .candidates
        .values()
        .any(|k| USES.contains_key(&k.entry.id()));
    let why = c.outcome.clone().unwrap_or_else(|| {
        if other {
            return "the ranks agreed on another episode of its communicator (one at most)".into();
        }
        "the application made no MPI_Allreduce, MPI_Alltoall, MPI_Allgatherv or MPI_Barrier on \
         the episode's communicator after the episode repeated (ranks agree only there)"
            .into()
    });
    for k in c.candidates.values() {
        if !USES.contains_key(&k.entry.id()) {
            k.entry
                .note(format!("halo codelet neighbor was not agreed: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_points_thin_out_to_every_16th_collective() {
        let mut c = CommAgreement::default();
        let due: Vec<u64> = (1..=70).filter(|&n| c.due(n)).collect();
        assert_eq!(due, [1, 2, 4, 8, 16, 32, 48, 64]);
        c.settled = true;
        assert!((71..171).all(|n| !c.due(n)));
    }
}
