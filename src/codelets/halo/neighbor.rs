//! The `neighbor` halo codelet: an episode's messages travel as one MPI_Ineighbor_alltoallw on a
//! distributed-graph communicator built for the episode (`halo::agreement`). The application receives a
//! generalized request for each Isend/Irecv; they complete, with the statuses point-to-point
//! would give, when the collective does.
//!
//! Unlike the other halo codelets this one changes which messages match: a rank running it talks
//! only to peers running it for the same instance. So it runs only on instances every rank of the
//! communicator agreed to (`halo::agreement`), and each rank holds its posts until the episode's last
//! message is posted and its next MPI call (the completion, usually), from any thread, comes, then
//! starts the collective. An episode whose posts go on otherwise is not an instance of the agreed one but
//! another that began alike on this rank: its messages go natively. A rank that makes another MPI
//! call before posting all of an instance it took for the agreed one cannot keep the agreement: it
//! posts what it holds natively and says so in the report (peers that started the collective wait
//! for it; see the requirements).

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::HaloRequirement::{
    Agreed, AskedFor, EveryCallVisible, IntCount, MatchingSizes, NoWildcards, OneIntracommunicator,
    PostedAlone,
};
use super::{HaloCodelet, deferred};
use crate::mpi::neighbor::{Arrays, Block, Generalized, Graph, Reported};
use crate::mpi::requests::Pending;
use crate::mpi::{
    self, HandleBits, MPI_Comm, MPI_Request, MPI_Status, PointToPoint, PointToPointKind, Shared,
};

pub const CODELET: HaloCodelet = HaloCodelet {
    name: "neighbor",
    requires: &[
        AskedFor,
        Agreed,
        EveryCallVisible,
        OneIntracommunicator,
        NoWildcards,
        IntCount,
        MatchingSizes,
        PostedAlone,
    ],
    bursts: true,
};

/// One message of an episode, as a post must look to be the agreed one.
#[derive(Clone, Copy)]
pub struct Expected {
    pub kind: PointToPointKind,
    pub peer: c_int,
    pub tag: c_int,
    pub count: i64,
    /// The bytes it moves, from its post: the application may free the datatype after it. A
    /// message is told by them, not by its datatype's handle (`Expected::identity`).
    pub bytes: i64,
    pub comm: Shared<MPI_Comm>,
}

impl Expected {
    /// The message `call` posts.
    pub fn of(call: &PointToPoint) -> Expected {
        Expected {
            kind: call.kind,
            peer: call.peer,
            tag: call.tag,
            count: call.count,
            bytes: (call.count * mpi::type_size(call.datatype)).max(0),
            comm: Shared::new(call.comm),
        }
    }

    /// What tells the message from others: its kind, peer, tag, communicator and size in bytes.
    /// The size stands for its count and datatype: it is what matching and the peers see, while
    /// a datatype the application frees and makes again between instances may come back with
    /// another handle on one rank only (which would then post that instance natively while its
    /// peers wait in the collective). The collective moves each post's own buffer, count and
    /// datatype. Instances are counted by it too (`agreement::candidates`).
    pub fn identity(&self) -> (PointToPointKind, c_int, c_int, usize, i64) {
        (
            self.kind,
            self.peer,
            self.tag,
            self.comm.get().bits(),
            self.bytes,
        )
    }

    /// Whether `other` is the same message (`identity`).
    fn same(&self, other: &Expected) -> bool {
        self.identity() == other.identity()
    }
}

/// An agreed episode: its messages (not those to MPI_PROC_NULL) and the graph that carries them.
pub struct Schedule {
    messages: Vec<Expected>,
    /// Per message, its block among the collective's sends or receives.
    blocks: Vec<usize>,
    sends: usize,
    graph: Graph,
}

impl Schedule {
    /// Whether an episode whose first post is `call` may be an instance of this one.
    pub fn begins_with(&self, call: &PointToPoint) -> bool {
        self.messages
            .first()
            .is_some_and(|m| m.same(&Expected::of(call)))
    }

    /// The agreed `messages` (posting order), each on block `blocks[i]` of the collective's sends
    /// or receives, `sends` of them sends, carried by `graph`.
    pub fn new(messages: Vec<Expected>, blocks: Vec<usize>, sends: usize, graph: Graph) -> Self {
        Schedule {
            messages,
            blocks,
            sends,
            graph,
        }
    }

    /// How many `messages` are (posting order, none to MPI_PROC_NULL), and how many this
    /// episode has, when they are its first (at least one); None otherwise.
    pub fn begun_by(&self, messages: impl Iterator<Item = Expected>) -> Option<(usize, usize)> {
        let mut matched = 0;
        for m in messages {
            match self.messages.get(matched) {
                Some(expected) if expected.same(&m) => matched += 1,
                _ => return None,
            }
        }
        (matched > 0).then_some((matched, self.messages.len()))
    }

    /// The communicator the messages belong to.
    pub fn comm(&self) -> Option<MPI_Comm> {
        self.messages.first().map(|m| m.comm.get())
    }

    /// The graph communicator (freed with the application's communicator).
    pub fn graph(&self) -> MPI_Comm {
        self.graph.raw
    }
}

/// An instance being posted: the messages so far, each with the request the application holds.
struct Holding {
    schedule: Arc<Schedule>,
    /// Tells the agreement why this rank could not keep it.
    broken: Broken,
    posted: Vec<(PointToPoint, Generalized)>,
}

/// What the agreement is told when an instance cannot run as agreed: its reason.
pub type Broken = Box<dyn FnOnce(&'static str) + Send>;

/// A request of the library's whose completion completes the application's requests.
struct Carrier {
    request: Pending,
    /// The collective's argument arrays, which MPI reads until it completes.
    _arrays: Option<Arrays>,
    members: Vec<Generalized>,
    /// A native message whose status the member reports (else the members report what they were
    /// posted with).
    native: bool,
}

/// The instance being posted. Process-wide, as the hold list is (`deferred`): the next MPI call
/// starts it whichever thread makes it, a thread the program handed the requests to
/// (MPI_THREAD_SERIALIZED) included, which would otherwise wait for a collective nobody starts.
/// One thread at a time uses it: `neighbor` never runs under MPI_THREAD_MULTIPLE.
static HOLDING: Mutex<Option<Holding>> = Mutex::new(None);

/// The instance being posted, if any. The lock is never held across an MPI call: an error
/// handler may call MPI, which flushes.
fn holding() -> MutexGuard<'static, Option<Holding>> {
    HOLDING.lock().unwrap_or_else(|p| p.into_inner())
}

static CARRIERS: Mutex<Vec<Carrier>> = Mutex::new(Vec::new());
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// At an episode's first post of an instance the ranks agreed to run as `schedule`: its posts
/// are held until the last, then the collective starts. `broken` is told why, if this rank then
/// cannot keep the agreement.
pub fn begins(schedule: Arc<Schedule>, broken: Broken) {
    flush();
    *holding() = Some(Holding {
        posted: Vec::with_capacity(schedule.messages.len()),
        schedule,
        broken,
    });
    deferred::neighbor_holds();
}

/// Posts `call`, an Isend or Irecv of an episode that runs `neighbor`; returns MPI's code and
/// whether the codelet applied.
pub fn post(call: &PointToPoint, request: &mut MPI_Request) -> (c_int, bool) {
    if call.peer == mpi::proc_null() {
        return (call.native(request), true);
    }
    // Out of the lock while MPI runs.
    let held = holding().take();
    let Some(mut h) = held else {
        return (call.native(request), false);
    };
    let message = Expected::of(call);
    let reported = Reported {
        source: call.peer,
        tag: call.tag,
        bytes: match call.kind {
            PointToPointKind::Recv => message.bytes,
            PointToPointKind::Send => 0,
        },
        error: mpi::SUCCESS,
    };
    let generalized = match h.schedule.messages.get(h.posted.len()) {
        Some(expected) if expected.same(&message) => Generalized::start(reported).ok(),
        _ => None,
    };
    let Some(generalized) = generalized else {
        // Not an instance of the agreed episode but another that began alike on this rank
        // (whose peers post it natively too): its messages go natively, and the agreement
        // stands for the agreed episode's instances.
        deferred::neighbor_released();
        post_natively(h.posted);
        return (call.native(request), false);
    };
    *request = generalized.handle();
    h.posted.push((*call, generalized));
    *holding() = Some(h);
    (mpi::SUCCESS, true)
}

/// Starts the collective of a fully posted instance.
fn start(h: Holding) {
    deferred::neighbor_released();
    let empty = Block {
        buf: std::ptr::null_mut(),
        count: 0,
        datatype: mpi::constants().byte,
    };
    let s = &h.schedule;
    let mut sends = vec![empty; s.sends];
    let mut recvs = vec![empty; s.messages.len() - s.sends];
    for ((call, _), &block) in h.posted.iter().zip(&s.blocks) {
        let into = match call.kind {
            PointToPointKind::Send => &mut sends,
            PointToPointKind::Recv => &mut recvs,
        };
        into[block] = Block {
            buf: call.buf,
            count: call.count as c_int,
            datatype: call.datatype,
        };
    }
    match s.graph.ineighbor_alltoallw(&sends, &recvs) {
        Ok((request, arrays)) => carry(Carrier {
            request: Pending::new(request),
            _arrays: Some(arrays),
            members: h.posted.into_iter().map(|(_, g)| g).collect(),
            native: false,
        }),
        Err(_) => break_off(h, "MPI refused the neighbourhood collective"),
    }
}

fn carry(carrier: Carrier) {
    CARRIERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(carrier);
    IN_FLIGHT.fetch_add(1, Ordering::Release);
}

/// The instance cannot run as agreed: what it holds is posted natively.
fn break_off(h: Holding, why: &'static str) {
    deferred::neighbor_released();
    (h.broken)(why);
    post_natively(h.posted);
}

/// Posts held messages natively, each completing its application request (with MPI's error, if
/// MPI refuses the post).
fn post_natively(posted: Vec<(PointToPoint, Generalized)>) {
    for (call, generalized) in posted {
        let mut request = mpi::request_null();
        match call.native(&mut request) {
            mpi::SUCCESS => carry(Carrier {
                request: Pending::new(request),
                _arrays: None,
                members: vec![generalized],
                native: true,
            }),
            error => generalized.complete(error, None),
        }
    }
}

/// The application frees `request` (MPI_Request_free): true when it is one of the library's
/// generalized requests, which the library then frees itself once its message has gone. Freeing
/// cannot block, so an instance being posted keeps being held.
pub fn adopt(request: MPI_Request) -> bool {
    let bits = request.bits();
    holding()
        .as_mut()
        .is_some_and(|h| mark_adopted(h.posted.iter_mut().map(|(_, g)| g), bits))
        || (IN_FLIGHT.load(Ordering::Acquire) > 0
            && CARRIERS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter_mut()
                .any(|c| mark_adopted(c.members.iter_mut(), bits)))
}

fn mark_adopted<'a>(mut members: impl Iterator<Item = &'a mut Generalized>, bits: usize) -> bool {
    members
        .find(|g| g.handle().bits() == bits)
        .map(|g| g.adopted = true)
        .is_some()
}

/// Another MPI call came (`deferred`): the instance's posts are over. Fully posted, its
/// collective starts now, not at its last post: a rank that took another episode for the agreed
/// one (whose posts began alike on this rank) finds out at the post that follows, before it has
/// started a collective its peers will never join.
pub fn flush() {
    let held = holding().take();
    if let Some(h) = held {
        if h.posted.len() == h.schedule.messages.len() {
            start(h);
        } else {
            break_off(
                h,
                "another MPI call came before all its messages were posted",
            );
        }
    }
}

/// Before a completion call over `requests`: completes the application's requests whose
/// collectives (or native messages) are done. With `wait` (a Wait call) the collectives of
/// requests in the array are waited for, which is no new blocking: every rank started its
/// collective before any completion call. Messages posted natively after a broken agreement are
/// only tested (waiting for one could block where MPI_Waitany would have returned another);
/// `must_poll` says when the completion call must poll instead of blocking.
pub fn progress(requests: &[MPI_Request], wait: bool) {
    if IN_FLIGHT.load(Ordering::Acquire) == 0 {
        return;
    }
    let asked = handles(requests);
    let waited: Vec<Carrier> = {
        let mut carriers = CARRIERS.lock().unwrap_or_else(|p| p.into_inner());
        let mut waited = Vec::new();
        let mut kept = Vec::with_capacity(carriers.len());
        for mut c in carriers.drain(..) {
            if wait && !c.native && c.carries_any(&asked) {
                waited.push(c);
            } else if let Some((rc, status)) = c.request.finish(false) {
                complete(c, rc, &status);
            } else {
                kept.push(c);
            }
        }
        *carriers = kept;
        waited
    };
    // Outside the lock: another thread may progress its own collectives meanwhile.
    for mut c in waited {
        match c.request.finish(true) {
            Some((rc, status)) => complete(c, rc, &status),
            None => carry(c),
        }
    }
}

/// Whether `requests` holds a request whose native message (after a broken agreement) is still
/// under way: a blocking completion call must then poll, testing it in between.
pub fn must_poll(requests: &[MPI_Request]) -> bool {
    if IN_FLIGHT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let asked = handles(requests);
    CARRIERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|c| c.native && c.carries_any(&asked))
}

fn handles(requests: &[MPI_Request]) -> Vec<usize> {
    requests.iter().map(|r| r.bits()).collect()
}

impl Carrier {
    fn carries_any(&self, handles: &[usize]) -> bool {
        self.members
            .iter()
            .any(|g| handles.contains(&g.handle().bits()))
    }
}

/// Completes `carrier`'s members with MPI's code `rc` for its request.
fn complete(carrier: Carrier, rc: c_int, status: &MPI_Status) {
    IN_FLIGHT.fetch_sub(1, Ordering::Release);
    let status = carrier.native.then_some(status);
    carrier
        .members
        .into_iter()
        .for_each(|g| g.complete(rc, status));
}

/// MPI_Finalize is near: completes what has finished (the application should have completed its
/// requests; a collective still running is left to MPI).
pub fn finalizing() {
    progress(&[], false);
}
