//! Episodes: the MPI_Isend/MPI_Irecv calls of a thread from the first post until the last
//! of them completes, keyed by the site of the completing call (Waitall, or the last Wait) and by
//! the episode's signature (ordered send/recv, peer, tag, count, datatype, communicator).
//!
//! Every completion call reports which of the tracked requests it finished, so episodes close
//! however the application completes them (Waitall, Waits one by one, Waitany, Test loops,
//! Request_free). Below MPI_THREAD_MULTIPLE one thread at a time is inside MPI, so the process's
//! calls are one stream, tracked as in a single-threaded program whichever threads make them: a
//! thread the program hands its requests to closes their episode. Under MPI_THREAD_MULTIPLE each
//! thread's calls are a stream of their own; requests another thread completes leave the episode
//! open until the handle is reused or the size bound is hit, and the episode is then dropped.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::fmt::Write;
use std::hash::Hasher;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::thread::LocalKey;

use commtune_history::halo::Episode;
use commtune_report::Op;
use commtune_tune::classes::size_class;
use dashmap::DashMap;
use rustc_hash::{FxBuildHasher, FxHasher};

use super::rank_tuner::{self, Class};
use super::{Completed, agreement};
use crate::codelets::halo::neighbor::{self, Expected};
use crate::codelets::halo::{CODELETS, IRECV_FIRST, NATIVE, NEIGHBOR, PERSISTENT, deferred};
use crate::config::Mode;
use crate::keys::{self, CallKey, Description, Entry, Measured};
use crate::mpi::datatype::Layout;
use crate::mpi::{self, HandleBits, MPI_Request, PointToPoint, PointToPointKind, Shared};
use crate::site::SiteRef;
use crate::{clock, comms, runtime};

/// Episodes with more operations than this are not profiled (bounded memory per stream).
const MAX_OPS: usize = 4096;

#[derive(Clone, Copy)]
struct Posted {
    request: usize,
    done: bool,
    kind: PointToPointKind,
    peer: c_int,
    tag: c_int,
    count: i64,
    datatype: Shared<mpi::MPI_Datatype>,
    /// The datatype's size, and whether it is derived (the application may free it before the
    /// episode closes: `Tracker::types_freed`).
    type_size: i64,
    derived: bool,
    comm: Shared<mpi::MPI_Comm>,
    /// The halo codelet that posted it, and whether it posted it differently from native.
    codelet: usize,
    changed: bool,
}

#[derive(Default)]
struct Tracker {
    ops: Vec<Posted>,
    open: usize,
    /// Clock ticks at the episode's first post.
    first_post: u64,
    /// Watched datatypes freed before the episode's first post (`mpi::datatypes_freed`).
    types_freed: u64,
    /// The episode's first post (its call site and message), which predicts its key.
    first: u64,
    /// The key this episode is expected to be, from the last episode with the same first post,
    /// and its tuning class then (`rank_tuner::class`), taken from `PREDICTIONS` until the
    /// episode closes.
    predicted: Option<&'static Entry>,
    predicted_class: Option<Arc<Class>>,
    /// The halo codelet the episode is to run.
    codelet: usize,
    /// Receives the predicted key has (None without a prediction), and those posted so far.
    expected_recvs: Option<usize>,
    recvs: usize,
    /// Whether the episode watches for other MPI calls (the ranks may agree on `neighbor`), and
    /// how many posts it had at the first one.
    watching: bool,
    interrupted_at: Option<usize>,
    /// Every post so far went to MPI_PROC_NULL: an agreed episode's messages leave those out, so
    /// its instance shows at the first real post.
    before_real: bool,
    /// Its messages all completed while they were the first of an agreed episode's
    /// (`agreement::still_posting`): the completing call's site, for its close if the next post
    /// does not go on with that episode's messages.
    unclosed: Option<usize>,
}

/// First posts remembered per stream at most.
const MAX_PREDICTIONS: usize = 4096;

/// The last episode that started with each first post.
type Predictions = HashMap<u64, Prediction, FxBuildHasher>;

thread_local! {
    /// Each thread's own stream (MPI_THREAD_MULTIPLE).
    static OWN_TRACKER: RefCell<Tracker> = RefCell::default();
    static OWN_PREDICTIONS: RefCell<Predictions> = RefCell::default();
}

/// The process's stream (below MPI_THREAD_MULTIPLE).
static TRACKER: LazyLock<Mutex<Tracker>> = LazyLock::new(Mutex::default);
static PREDICTIONS: LazyLock<Mutex<Predictions>> = LazyLock::new(Mutex::default);

/// Runs `f` on the calling thread's stream's `own` or `shared` state (see the module's doc).
/// Never held across an MPI call of the application's, which would come back to it.
fn stream<T, R>(
    own: &'static LocalKey<RefCell<T>>,
    shared: &'static Mutex<T>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    if runtime::process().is_some_and(|p| p.threads_at_once) {
        own.with_borrow_mut(f)
    } else {
        f(&mut shared.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn tracker<R>(f: impl FnOnce(&mut Tracker) -> R) -> R {
    stream(&OWN_TRACKER, &TRACKER, f)
}

fn predictions<R>(f: impl FnOnce(&mut Predictions) -> R) -> R {
    stream(&OWN_PREDICTIONS, &PREDICTIONS, f)
}

/// What the last episode that started with a first post was.
struct Prediction {
    entry: &'static Entry,
    /// Its tuning class (tuning only).
    class: Option<Arc<Class>>,
    recvs: usize,
}

/// The halo codelet for a post at `caller` of `call`: at an episode's first post it is chosen
/// (forced, or the tuner's choice for the key the episode is predicted to be), and the rest of
/// the episode keeps it.
pub fn codelet(caller: usize, call: &PointToPoint) -> usize {
    let real = call.peer != mpi::proc_null();
    let (codelet, first) = tracker(|t| {
        if let Some(site) = t.unclosed.take() {
            let posted = t.ops.iter().map(Posted::expected);
            if !agreement::goes_on(posted.chain([Expected::of(call)])) {
                t.close(site);
            }
        }
        if !t.ops.is_empty() {
            let decides = t.before_real && real && t.codelet != NEIGHBOR;
            t.before_real &= !real;
            return (t.codelet, decides.then_some(t.predicted));
        }
        t.before_real = !real;
        t.first = first_post(caller, call);
        // Taken, not copied: the class goes back when the episode closes.
        let prediction = predictions(|p| p.remove(&t.first));
        t.predicted = prediction.as_ref().map(|p| p.entry);
        t.expected_recvs = prediction.as_ref().map(|p| p.recvs);
        t.predicted_class = prediction.and_then(|p| p.class);
        if agreement::may_agree() && !t.watching {
            t.watching = true;
            deferred::watch_begins();
        }
        let config = runtime::config();
        t.codelet = match config.forced(Op::Halo) {
            Some(forced) => forced,
            None if config.mode == Mode::Tune => {
                t.predicted_class.as_deref().map_or(0, rank_tuner::choose)
            }
            None => 0,
        };
        (t.codelet, Some(t.predicted))
    });
    // Only an episode's first post decides (its first real one, if it began with MPI_PROC_NULL).
    let Some(predicted) = first.filter(|_| agreement::may_agree()) else {
        return codelet;
    };
    // Outside the tracker: deciding may post a previous instance's held messages.
    neighbor::flush();
    let predicted = predicted.and_then(|entry| Some((entry, agreement::schedule_for(entry)?)));
    let (schedule, broken): (_, neighbor::Broken) = match predicted {
        Some((entry, schedule)) => (schedule, Box::new(move |why| agreement::broken(entry, why))),
        // Held as the agreed episode it may be: one that ends short of it is another episode,
        // no broken agreement.
        None => match agreement::schedule_beginning_with(call) {
            Some(schedule) => (schedule, Box::new(|_| {})),
            None => return codelet,
        },
    };
    neighbor::begins(schedule, broken);
    tracker(|t| t.codelet = NEIGHBOR);
    NEIGHBOR
}

/// The watch of a derived datatype posted in an episode: `mpi::datatypes_freed` counts it.
fn read_no_more(_datatype: usize) {}

fn first_post(caller: usize, call: &PointToPoint) -> u64 {
    let mut h = FxHasher::default();
    h.write_usize(caller);
    h.write_u8(call.kind as u8);
    h.write_i32(call.peer);
    h.write_i32(call.tag);
    h.write_i64(call.count);
    h.write_usize(call.datatype.bits());
    h.write_usize(call.comm.bits());
    h.finish()
}

/// Distinct episodes seen per completion site, to number them (`KeyData::merge_key`).
static EPISODES_PER_SITE: LazyLock<DashMap<SiteRef, u32, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// An Isend or Irecv was posted successfully by halo codelet `codelet` (`changed`: other than
/// native would have).
pub fn posted(call: &PointToPoint, request: MPI_Request, codelet: usize, changed: bool) {
    tracker(|t| {
        let request = request.bits();
        // A handle that is reused was completed where we could not see it.
        if let Some(stale) = t.ops.iter_mut().find(|o| o.request == request && !o.done) {
            stale.done = true;
            t.open -= 1;
        }
        if t.ops.len() >= MAX_OPS {
            t.reset();
            return;
        }
        if t.ops.is_empty() {
            t.first_post = clock::now();
            t.types_freed = mpi::datatypes_freed();
        }
        if call.kind == PointToPointKind::Recv {
            t.recvs += 1;
        }
        // A derived datatype is watched so that the episode's close knows whether it may still
        // read it (a type MPI refuses to watch is never read after its post).
        let (type_size, predefined) = mpi::size_if_predefined(call.datatype);
        let derived = !predefined;
        let watched = derived && mpi::watch_datatype(call.datatype, read_no_more).is_ok();
        if derived && !watched {
            t.types_freed = u64::MAX;
        }
        t.ops.push(Posted {
            request,
            done: false,
            kind: call.kind,
            peer: call.peer,
            tag: call.tag,
            count: call.count,
            datatype: Shared::new(call.datatype),
            type_size,
            derived,
            comm: Shared::new(call.comm),
            codelet,
            changed,
        });
        t.open += 1;
    });
}

/// Whether the episode in progress is predicted to post more receives than it has so far (None:
/// no prediction).
pub fn receives_outstanding() -> Option<bool> {
    tracker(|t| t.expected_recvs.map(|expected| t.recvs < expected))
}

/// Another MPI call came while the calling thread's stream's episode watches (`deferred`): an episode with one
/// between its posts cannot run as `neighbor`, whose posts must all come before any other call.
pub fn interrupted() {
    let interrupt = |t: &mut Tracker| {
        if t.watching && t.interrupted_at.is_none() {
            t.interrupted_at = Some(t.ops.len());
        }
    };
    // Never held across an MPI call; if it were, the call is the tracker's own.
    if runtime::process().is_some_and(|p| p.threads_at_once) {
        OWN_TRACKER.with(|t| t.try_borrow_mut().map(|mut t| interrupt(&mut t)).ok());
    } else if let Ok(mut t) = TRACKER.try_lock() {
        interrupt(&mut t);
    }
}

/// Whether the calling thread's stream has an episode in progress (whose requests completion
/// calls may finish).
pub fn is_open() -> bool {
    tracker(|t| t.open > 0 || t.unclosed.is_some())
}

/// A completion call at `caller` finished `completed` of the requests that were `before`.
pub fn completed(caller: usize, before: &[usize], completed: &Completed) {
    tracker(|t| {
        if matches!(completed, Completed::Failed(_)) {
            t.reset();
            return;
        }
        completed.each(before.len(), |i, _| t.finish(before[i]));
        if t.open == 0 && !t.ops.is_empty() {
            if agreement::still_posting(t.ops.iter().map(Posted::expected)) {
                t.unclosed = Some(caller);
            } else {
                t.close(caller);
            }
        }
    });
}

impl Posted {
    /// The bytes it moves.
    fn bytes(&self) -> u64 {
        (self.count * self.type_size).max(0) as u64
    }

    /// Its datatype's name, read only while the datatype may be (`alive`: see `Tracker`).
    fn type_name(&self, alive: bool) -> String {
        if alive || !self.derived {
            mpi::type_name(self.datatype.get())
        } else {
            format!("derived({} bytes)", self.type_size)
        }
    }

    fn expected(&self) -> Expected {
        Expected {
            kind: self.kind,
            peer: self.peer,
            tag: self.tag,
            count: self.count,
            bytes: self.bytes() as i64,
            comm: self.comm,
        }
    }
}

impl Tracker {
    fn reset(&mut self) {
        self.ops.clear();
        self.open = 0;
        self.recvs = 0;
        self.interrupted_at = None;
        self.unclosed = None;
        if std::mem::take(&mut self.watching) {
            deferred::watch_ends();
        }
    }

    /// Marks the tracked request `request` done.
    fn finish(&mut self, request: usize) {
        if let Some(op) = self
            .ops
            .iter_mut()
            .find(|o| o.request == request && !o.done)
        {
            op.done = true;
            self.open -= 1;
        }
    }

    fn close(&mut self, caller: usize) {
        let mut signature = FxHasher::default();
        for op in &self.ops {
            signature.write_u8(op.kind as u8);
            signature.write_i32(op.peer);
            signature.write_i32(op.tag);
            signature.write_i64(op.count);
            signature.write_usize(op.datatype.get().bits());
            signature.write_usize(op.comm.get().bits());
        }
        let key = CallKey {
            caller,
            op: Op::Halo,
            words: [signature.finish(), self.ops.len() as u64, 0, 0, 0],
        };
        let ops = &self.ops;
        // The application may have freed a derived datatype since its post, and MPI destroyed
        // it when its messages completed: read none then.
        let alive = self.types_freed == mpi::datatypes_freed();
        let (_, entry) = keys::find(key, |site| describe(site, ops, alive));
        let expected = self.predicted.is_some_and(|p| std::ptr::eq(p, entry));
        // Calls after the last post (the completion itself) come after the collective started.
        let posted_alone = self.interrupted_at.is_none_or(|at| at >= ops.len());
        agreement::closed(
            entry,
            expected,
            posted_alone,
            ops.iter().map(Posted::expected),
        );
        if entry.calls() == 0 {
            limits(ops, alive)
                .into_iter()
                .for_each(|note| entry.note(note));
        }
        // An episode whose messages were not all posted by one codelet counts as native, and
        // so does one whose codelet left every message as it was; messages to MPI_PROC_NULL
        // carry nothing and do not count.
        let real = || ops.iter().filter(|o| o.peer != mpi::proc_null());
        let posted_by = match real().next() {
            Some(first) if real().all(|o| o.codelet == first.codelet) => first.codelet,
            _ => NATIVE,
        };
        let unchanged = posted_by != NATIVE && !real().any(|o| o.changed);
        let ran = if unchanged { NATIVE } else { posted_by };
        if unchanged {
            entry.unchanged(posted_by);
        }
        let config = runtime::config();
        if let Some(forced) = config.forced(Op::Halo)
            && forced != ran
            && !unchanged
            && let Some(why) = not_run(forced, ops, expected)
        {
            entry.note(format!(
                "forced halo codelet {} did not run an episode: {why}",
                CODELETS[forced].name
            ));
        }
        // The test-only delay of COMMTUNE_INJECT_DELAY: a slow episode on this rank.
        if let Some(delay) = config.delay(Op::Halo, ran, entry.calls() + 1) {
            std::thread::sleep(delay);
        }
        let now = clock::now();
        let elapsed = now.saturating_sub(self.first_post);
        // Halo codelets reorder, batch or repackage an exchange's messages; one message has
        // nothing of that to gain, so a search could only cost (LAMMPS's lone receives).
        let exchange = real().nth(1).is_some();
        let tuned = config.mode == Mode::Tune && config.forced(Op::Halo).is_none() && exchange;
        // The predicted key's class while it lives (the key fixes the communicators, and their
        // epochs change only when one is freed, which drops the class): the codelet chosen at
        // the first post was chosen for it. Otherwise the class is found anew.
        let class = match self.predicted_class.take() {
            Some(class) if expected && class.is_live() => Some((class, Some(self.codelet))),
            _ if tuned => Some((
                rank_tuner::class(entry, handles(ops), communicators(ops), || {
                    identity(ops, entry.description.bytes_per_call)
                }),
                None,
            )),
            _ => None,
        };
        let measured = match &class {
            Some((class, chosen)) => {
                rank_tuner::completed(entry, class, *chosen, ran, unchanged, elapsed, now)
            }
            None => Measured::Other,
        };
        let class = class.map(|(class, _)| class);
        entry.record_ending(elapsed, ran, measured, now);
        let prediction = Prediction {
            entry,
            class,
            recvs: self.recvs,
        };
        predictions(|p| {
            if p.len() >= MAX_PREDICTIONS {
                p.clear();
            }
            p.insert(self.first, prediction);
        });
        self.reset();
    }
}

/// The communicator handles of an episode's messages, each once.
fn handles(ops: &[Posted]) -> Vec<usize> {
    let mut handles: Vec<usize> = ops.iter().map(|op| op.comm.get().bits()).collect();
    handles.sort_unstable();
    handles.dedup();
    handles
}

/// The epochs of the communicators of an episode's messages, hashed: a handle MPI gives to a new
/// communicator after the application freed the old one gets a new epoch (`comms`).
fn communicators(ops: &[Posted]) -> u64 {
    let mut h = FxHasher::default();
    let mut last = None;
    for op in ops {
        let bits = op.comm.get().bits();
        // Consecutive messages mostly share their communicator: one lookup for them.
        if last != Some(bits) {
            last = Some(bits);
            h.write_u64(comms::of(op.comm.get()).epoch.load(Ordering::Relaxed));
        }
    }
    h.finish()
}

/// The episode as the history store names it across runs (`commtune_history::halo::Episode`),
/// moving `bytes`: this rank in MPI_COMM_WORLD, and its messages with peers relative to this
/// rank in their communicator (a peer that is no rank, MPI_PROC_NULL or MPI_ANY_SOURCE, as
/// `u32::MAX`).
fn identity(ops: &[Posted], bytes: u64) -> Episode {
    let (rank, size) = runtime::process().map_or((0, 1), |p| (p.rank, p.size));
    let mut place: Option<(usize, c_int, c_int)> = None;
    let mut messages = Vec::with_capacity(ops.len());
    for op in ops {
        let bits = op.comm.get().bits();
        // Consecutive messages mostly share their communicator: one query for them.
        let (_, me, members) = match place {
            Some(known) if known.0 == bits => known,
            _ => *place.insert((
                bits,
                mpi::comm_rank(op.comm.get()),
                mpi::comm_size(op.comm.get()),
            )),
        };
        let peer = if (0..members).contains(&op.peer) {
            (op.peer - me).rem_euclid(members) as u32
        } else {
            u32::MAX
        };
        messages.push((op.kind == PointToPointKind::Send, peer, op.bytes()));
    }
    Episode {
        comm_size: size,
        rank,
        shape: commtune_history::halo::shape(messages),
        messages: ops.len() as u32,
        bytes,
    }
}

/// Why the forced halo codelet `forced` did not run an episode whose messages it did not post
/// (None for `neighbor`, whose agreement notes its own reasons).
fn not_run(forced: usize, ops: &[Posted], predicted: bool) -> Option<String> {
    let real: Vec<&Posted> = ops.iter().filter(|o| o.peer != mpi::proc_null()).collect();
    let reason = if forced == NEIGHBOR || real.is_empty() {
        return None;
    } else if !predicted && matches!(forced, PERSISTENT | IRECV_FIRST) {
        "it starts with the episode's second instance (the first is posted natively)".to_string()
    } else if forced != PERSISTENT && !mpi::sees_every_call() {
        mpi::hidden_calls().to_string()
    } else if real.iter().any(|o| o.codelet == forced) {
        format!(
            "some of its messages were posted natively (requires {})",
            CODELETS[forced].requirements()
        )
    } else {
        format!("requires {}", CODELETS[forced].requirements())
    };
    Some(reason)
}

/// What keeps halo codelets from changing an episode, for the report.
fn limits(ops: &[Posted], alive: bool) -> Vec<String> {
    let real: Vec<&Posted> = ops.iter().filter(|o| o.peer != mpi::proc_null()).collect();
    if real.is_empty() {
        return vec!["every message goes to MPI_PROC_NULL: no halo codelet changes it".into()];
    }
    let mut notes = Vec::new();
    if real.len() == 1 {
        notes.push(format!(
            "one message: not tuned ({})",
            rank_tuner::NOT_AN_EXCHANGE
        ));
    }
    if real.iter().any(|o| c_int::try_from(o.count).is_err()) {
        notes.push("halo codelet persistent: counts beyond an int are posted natively".into());
    }
    let hidden = mpi::hidden_calls();
    let first_send = ops.iter().position(|o| o.kind == PointToPointKind::Send);
    let last_recv = ops.iter().rposition(|o| o.kind == PointToPointKind::Recv);
    let irecv_first = match (first_send, last_recv) {
        _ if !mpi::sees_every_call() => Some(hidden),
        (None, _) => Some("no sends to hold back"),
        (_, None) => Some("no receives to post first"),
        (Some(send), Some(recv)) if recv < send => Some("the receives already come first"),
        _ => None,
    };
    if let Some(why) = irecv_first {
        notes.push(format!("halo codelet irecv_first changes nothing: {why}"));
    }
    let contiguous = |o: &&Posted| {
        (alive || !o.derived) && Layout::of(o.datatype.get()).is_ok_and(|l| l.is_contiguous())
    };
    if real.iter().all(contiguous) {
        notes.push("halo codelet pack: every datatype is contiguous (nothing to pack)".into());
    } else if !mpi::sees_every_call() {
        notes.push(format!("halo codelet pack does not apply: {hidden}"));
    }
    match agreement::eligibility(ops.iter().map(Posted::expected)) {
        Err(why) => notes.push(format!("halo codelet neighbor does not apply: {why}")),
        Ok(_) if !agreement::may_agree() => notes.push(format!(
            "halo codelet neighbor is not tried: {}",
            neighbor_not_tried()
        )),
        Ok(_) => {}
    }
    notes
}

/// Why ranks may not agree on `neighbor`, from the knobs in force (never a suggestion to set
/// what is set).
fn neighbor_not_tried() -> String {
    let config = runtime::config();
    let forced = config.forced(Op::Halo);
    let asked = forced == Some(NEIGHBOR) || (config.halo_neighbor && forced.is_none());
    if asked && config.excluded(Op::Halo, NEIGHBOR) && forced.is_none() {
        "COMMTUNE_EXCLUDE names it".into()
    } else if asked && config.mode != Mode::Tune && forced.is_none() {
        "COMMTUNE_HALO_NEIGHBOR=on takes effect with COMMTUNE_MODE=tune \
         (COMMTUNE_FORCE=halo=neighbor runs it in any mode)"
            .into()
    } else if asked {
        format!("it needs every MPI call visible: {}", mpi::hidden_calls())
    } else if let Some(other) = forced {
        format!(
            "COMMTUNE_FORCE=halo={} forces another codelet",
            CODELETS[other].name
        )
    } else {
        let visible = if mpi::sees_every_call() {
            ""
        } else {
            " (not with Open MPI's Fortran bindings or MPICH's mpi_f08, which hide MPI calls)"
        };
        format!(
            "it changes which messages match, so every rank must agree to it: \
             COMMTUNE_HALO_NEIGHBOR=on lets tuning try it, COMMTUNE_FORCE=halo=neighbor forces \
             it{visible}"
        )
    }
}

/// The report's description of an episode: its messages in posting order.
fn describe(site: SiteRef, ops: &[Posted], alive: bool) -> Description {
    let ordinal = {
        let mut n = EPISODES_PER_SITE.entry(site).or_insert(0);
        *n += 1;
        *n
    };
    let sends = ops
        .iter()
        .filter(|o| o.kind == PointToPointKind::Send)
        .count();
    let mut signature = format!("{sends} sends, {} recvs:", ops.len() - sends);
    for op in ops.iter().take(8) {
        let kind = match op.kind {
            PointToPointKind::Send => "send",
            PointToPointKind::Recv => "recv",
        };
        let _ = write!(
            signature,
            " {kind}(peer={} tag={} {}x{})",
            op.peer,
            op.tag,
            op.count,
            op.type_name(alive)
        );
    }
    if ops.len() > 8 {
        let _ = write!(signature, " ... ({} more)", ops.len() - 8);
    }
    let merge_key = format!("episode {ordinal}");
    let mut class = FxHasher::default();
    class.write_usize(site);
    for op in ops {
        class.write_u8(op.kind as u8);
        class.write_i32(op.peer);
        class.write_i32(op.tag);
        class.write_u64(size_class(op.bytes()).0);
    }
    Description {
        // Halo episodes are tuned per rank: nothing to agree on.
        agree: merge_key.clone(),
        merge_key,
        signature,
        facts: String::new(),
        // A message to or from MPI_PROC_NULL carries nothing.
        bytes_per_call: ops
            .iter()
            .filter(|o| o.peer != mpi::proc_null())
            .map(Posted::bytes)
            .sum(),
        class: Some(class.finish()),
        // Never described again: the ordinal above names the episode across ranks, and halo
        // codelets check their requirements message by message.
        handles: Vec::new(),
    }
}
