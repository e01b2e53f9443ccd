//! The raw calls behind the `neighbor` halo codelet: a distributed-graph communicator, the
//! nonblocking neighbourhood alltoallw, the small exchanges that build it, and generalized
//! requests, which stand for the application's Isend/Irecv handles while one collective carries
//! their messages.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::Once;

use mpi_sys as ffi;

use super::datatype::{Buf, MpiResult, check};
use super::{Comm, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Request, MPI_Status, Requests, SUCCESS};

/// One block of a neighbourhood alltoallw: the application's buffer of one message.
#[derive(Clone, Copy)]
pub struct Block {
    pub buf: *mut c_void,
    pub count: c_int,
    pub datatype: MPI_Datatype,
}

impl Comm {
    /// MPI_Alltoall of one i64 per rank.
    pub fn alltoall_i64(&self, send: &[i64]) -> MpiResult<Vec<i64>> {
        let mut recv = vec![0i64; send.len()];
        // SAFETY: both vectors hold one i64 per rank of the communicator.
        check(unsafe {
            ffi::PMPI_Alltoall(
                send.as_ptr().cast(),
                1,
                ffi::RSMPI_INT64_T,
                recv.as_mut_ptr().cast(),
                1,
                ffi::RSMPI_INT64_T,
                self.raw,
            )
        })?;
        Ok(recv)
    }

    /// Sends each list of `sends` to its peer and receives a list of the given length from each
    /// peer of `recvs`, on `tag`; returns the received lists in the order of `recvs`.
    pub fn exchange_i64(
        &self,
        sends: &[(c_int, Vec<i64>)],
        recvs: &[(c_int, usize)],
        tag: c_int,
    ) -> MpiResult<Vec<Vec<i64>>> {
        // SAFETY: reading a constant exported by mpi-sys.
        let int64 = unsafe { ffi::RSMPI_INT64_T };
        let mut lists: Vec<Vec<i64>> = recvs.iter().map(|&(_, n)| vec![0; n]).collect();
        let mut requests = Requests::new(0);
        for ((from, _), list) in recvs.iter().zip(&mut lists) {
            let buf = Buf::new(list.as_mut_ptr().cast(), list.len() as i64, int64)?;
            requests.push(self.irecv(&buf, *from, tag)?);
        }
        for (to, list) in sends {
            let buf = Buf::new(list.as_ptr().cast_mut().cast(), list.len() as i64, int64)?;
            requests.push(self.isend(&buf, *to, tag)?);
        }
        requests.waitall()?;
        Ok(lists)
    }

    /// A communicator with the distributed-graph topology `sources` → this rank → `destinations`
    /// (edges in order, repeated peers allowed), ranks kept. Collective.
    pub fn dist_graph(&self, sources: &[c_int], destinations: &[c_int]) -> MpiResult<Graph> {
        open_topology();
        // MPICH 4.0.2's neighbourhood alltoallw (blocking and not) leaves receive blocks unwritten,
        // or crashes, on a rank with more sources than destinations (a rank with sources only
        // receives nothing at all). So every pair of ranks gets as many edges one way as the
        // other: the missing ones carry nothing, and come after every real edge in both lists,
        // so that the k-th edge from a peer still meets the k-th edge to this rank.
        let (mut sources, mut destinations) = (sources.to_vec(), destinations.to_vec());
        let mut balance: BTreeMap<c_int, i64> = BTreeMap::new();
        destinations
            .iter()
            .for_each(|&p| *balance.entry(p).or_default() += 1);
        sources
            .iter()
            .for_each(|&p| *balance.entry(p).or_default() -= 1);
        let mut padding = Padding::default();
        for (&peer, &more_sends) in &balance {
            let (list, extra) = if more_sends > 0 {
                (&mut sources, &mut padding.recvs)
            } else {
                (&mut destinations, &mut padding.sends)
            };
            let n = more_sends.unsigned_abs() as usize;
            list.extend(std::iter::repeat_n(peer, n));
            *extra += n;
        }
        let indegree = c_int::try_from(sources.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        let outdegree =
            c_int::try_from(destinations.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        let mut graph = self.raw;
        // SAFETY: the arrays hold the degrees given; writes one handle.
        check(unsafe {
            ffi::PMPI_Dist_graph_create_adjacent(
                self.raw,
                indegree,
                sources.as_ptr(),
                ffi::RSMPI_UNWEIGHTED(),
                outdegree,
                destinations.as_ptr(),
                ffi::RSMPI_UNWEIGHTED(),
                ffi::RSMPI_INFO_NULL,
                0,
                &mut graph,
            )
        })?;
        // SAFETY: sets the error handler of our own communicator.
        check(unsafe { ffi::PMPI_Comm_set_errhandler(graph, ffi::RSMPI_ERRORS_RETURN) })?;
        Ok(Graph {
            raw: graph,
            padding,
        })
    }
}

/// Edges of a graph that carry nothing (`Comm::dist_graph`), after the real ones.
#[derive(Default)]
struct Padding {
    sends: usize,
    recvs: usize,
}

/// Open MPI 4.1 opens its topology framework at the first topology call, and two threads making
/// their first at once crashed it (in mca_base_var_register, with `neighbor` agreed on two
/// threads' communicators): the library's first graph is made on MPI_COMM_SELF, which involves no
/// other rank, by one thread while any other waits.
fn open_topology() {
    static OPENED: Once = Once::new();
    OPENED.call_once(|| {
        let mut graph = super::comm_self();
        // SAFETY: a graph without edges on MPI_COMM_SELF (empty arrays are not read); writes one
        // handle, freed at once.
        let made = unsafe {
            ffi::PMPI_Dist_graph_create_adjacent(
                super::comm_self(),
                0,
                [0].as_ptr(),
                ffi::RSMPI_UNWEIGHTED(),
                0,
                [0].as_ptr(),
                ffi::RSMPI_UNWEIGHTED(),
                ffi::RSMPI_INFO_NULL,
                0,
                &mut graph,
            )
        };
        if made == SUCCESS {
            super::comm_free(graph);
        }
    });
}

/// A distributed-graph communicator of the library's.
pub struct Graph {
    pub raw: MPI_Comm,
    padding: Padding,
}

// SAFETY: an MPI communicator handle may be used from any thread (MPI_THREAD_MULTIPLE).
unsafe impl Send for Graph {}
// SAFETY: as above.
unsafe impl Sync for Graph {}

impl Graph {
    /// Starts MPI_Ineighbor_alltoallw on this graph communicator: `sends[i]` goes to destination
    /// edge `i`, `recvs[j]` comes from source edge `j`. The arrays it returns must live until the
    /// request completes (MPI may read them until then).
    pub fn ineighbor_alltoallw(
        &self,
        sends: &[Block],
        recvs: &[Block],
    ) -> MpiResult<(MPI_Request, Arrays)> {
        let arrays = Arrays {
            sends: columns(sends, self.padding.sends),
            recvs: columns(recvs, self.padding.recvs),
        };
        let (send_base, send_counts, send_displs, send_types) = &arrays.sends;
        let (recv_base, recv_counts, recv_displs, recv_types) = &arrays.recvs;
        let mut request = super::request_null();
        // SAFETY: every block is an application buffer whose Isend/Irecv the collective
        // replaces; they stay valid until the application completes those requests, which it
        // cannot before this request completes. Displacements are relative to the base.
        check(unsafe {
            ffi::PMPI_Ineighbor_alltoallw(
                *send_base,
                send_counts.as_ptr(),
                send_displs.as_ptr(),
                send_types.as_ptr(),
                *recv_base,
                recv_counts.as_ptr(),
                recv_displs.as_ptr(),
                recv_types.as_ptr(),
                self.raw,
                &mut request,
            )
        })?;
        Ok((request, arrays))
    }
}

type Columns = (
    *mut c_void,
    Vec<c_int>,
    Vec<ffi::MPI_Aint>,
    Vec<MPI_Datatype>,
);

/// The argument arrays of a neighbourhood alltoallw in flight.
pub struct Arrays {
    sends: Columns,
    recvs: Columns,
}

// SAFETY: plain arrays and an address MPI reads; nothing here is dereferenced by Rust.
unsafe impl Send for Arrays {}

/// The base address and the count, displacement and datatype arrays of `blocks`, then `padding`
/// empty blocks. The arrays are never empty: MPICH 4.0.2 reads them on a rank without edges, and
/// an empty Vec's pointer is dangling.
fn columns(blocks: &[Block], padding: usize) -> Columns {
    let base = blocks
        .iter()
        .map(|b| b.buf)
        .min()
        .unwrap_or(std::ptr::null_mut());
    let n = (blocks.len() + padding).max(1);
    let (mut counts, mut displs, mut types) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for b in blocks {
        counts.push(b.count);
        displs.push((b.buf as isize - base as isize) as ffi::MPI_Aint);
        types.push(b.datatype);
    }
    for _ in 0..padding {
        counts.push(0);
        displs.push(0);
        types.push(super::constants().byte);
    }
    (base, counts, displs, types)
}

/// What a generalized request reports in its status when it completes: the received message's
/// source, tag and size in bytes (a send's status is not defined; it says 0 bytes), and MPI's
/// code for the message (the completion call returns it).
pub struct Reported {
    pub source: c_int,
    pub tag: c_int,
    pub bytes: MPI_Count,
    pub error: c_int,
}

/// A generalized request the library completes; its status says what `Reported` says.
pub struct Generalized {
    handle: MPI_Request,
    reported: *mut Reported,
    /// The application freed it (MPI_Request_free): the library frees it once complete.
    pub adopted: bool,
}

// SAFETY: a request handle may be completed from any thread (MPI_THREAD_MULTIPLE); `reported` is
// only touched before completion, by whichever thread completes it.
unsafe impl Send for Generalized {}

impl Generalized {
    pub fn start(reported: Reported) -> MpiResult<Generalized> {
        let reported = Box::into_raw(Box::new(reported));
        let mut handle = super::request_null();
        // SAFETY: the callbacks below read and free `reported`, which MPI hands back to them.
        let rc = unsafe {
            ffi::PMPI_Grequest_start(
                Some(query),
                Some(free),
                Some(cancel),
                reported.cast(),
                &mut handle,
            )
        };
        if rc != SUCCESS {
            // SAFETY: MPI did not take it: still ours alone.
            drop(unsafe { Box::from_raw(reported) });
            return Err(rc);
        }
        Ok(Generalized {
            handle,
            reported,
            adopted: false,
        })
    }

    pub fn handle(&self) -> MPI_Request {
        self.handle
    }

    /// Completes the request with MPI's code `error`, its status first updated from `status` (a
    /// message received by a request of the library's) when given.
    pub fn complete(self, error: c_int, status: Option<&MPI_Status>) {
        // SAFETY: MPI frees `reported` only after the completion below.
        unsafe { (*self.reported).error = error };
        if let Some(status) = status {
            let mut bytes: MPI_Count = 0;
            // SAFETY: MPI completed `status`; `reported` as above.
            unsafe {
                let reported = &mut *self.reported;
                if ffi::PMPI_Get_elements_x(status, super::constants().byte, &mut bytes) == SUCCESS
                {
                    reported.bytes = bytes;
                }
                reported.source = status.MPI_SOURCE;
                reported.tag = status.MPI_TAG;
            }
        }
        let mut handle = self.handle;
        // SAFETY: a generalized request this module started, completed once; freed here only if
        // the application gave it up.
        unsafe {
            ffi::PMPI_Grequest_complete(handle);
            if self.adopted {
                ffi::PMPI_Request_free(&mut handle);
            }
        }
    }
}

unsafe extern "C" fn query(extra: *mut c_void, status: *mut MPI_Status) -> c_int {
    // SAFETY: `extra` is the Reported this module boxed; `status` is MPI's to fill.
    unsafe {
        let reported = &*extra.cast::<Reported>();
        // Bytes as elements of MPI_BYTE: MPI_Get_count with the receive's datatype
        // then divides by its size, as for a point-to-point receive.
        ffi::PMPI_Status_set_elements_x(status, super::constants().byte, reported.bytes);
        ffi::PMPI_Status_set_cancelled(status, 0);
        (*status).MPI_SOURCE = reported.source;
        (*status).MPI_TAG = reported.tag;
        (*status).MPI_ERROR = reported.error;
        reported.error
    }
}

unsafe extern "C" fn free(extra: *mut c_void) -> c_int {
    // SAFETY: MPI calls this once, after completion, with the Reported this module boxed.
    drop(unsafe { Box::from_raw(extra.cast::<Reported>()) });
    SUCCESS
}

/// The messages travel inside a collective, which cannot be cancelled: MPI_Cancel succeeds and
/// the request completes normally, as the standard allows for a message already under way.
unsafe extern "C" fn cancel(_extra: *mut c_void, _complete: c_int) -> c_int {
    SUCCESS
}
