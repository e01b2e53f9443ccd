//! Communication on a private communicator: what codelets are built from.
//!
//! Every codelet message uses its operation's tag on the private duplicate of the application's
//! communicator (ARCHITECTURE.md, invariant 3), so no application receive can match it.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use mpi_sys as ffi;

use super::datatype::{Buf, MpiResult, check, empty_buf};
use super::requests::{empty_status, finish};
use super::{HandleBits, MPI_Comm, MPI_Op, MPI_Request, SUCCESS, constants, status_ignore};

/// A private communicator with this process's rank and the size.
#[derive(Clone, Copy, Debug)]
pub struct Comm {
    pub raw: MPI_Comm,
    pub rank: i32,
    pub size: i32,
}

// SAFETY: an MPI communicator handle may be used from any thread (MPI_THREAD_MULTIPLE), and
// the two ints are plain data.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl Comm {
    pub fn send(&self, buf: &Buf, to: i32, tag: i32) -> MpiResult {
        // SAFETY: `buf` is the application's buffer or a scratch buffer of `count` elements.
        check(unsafe { ffi::PMPI_Send(buf.ptr, buf.int_count()?, buf.datatype, to, tag, self.raw) })
    }

    pub fn recv(&self, buf: &Buf, from: i32, tag: i32) -> MpiResult {
        // SAFETY: as in `send`; the status is ignored.
        check(unsafe {
            ffi::PMPI_Recv(
                buf.ptr,
                buf.int_count()?,
                buf.datatype,
                from,
                tag,
                self.raw,
                status_ignore(),
            )
        })
    }

    pub fn sendrecv(&self, send: &Buf, to: i32, recv: &Buf, from: i32, tag: i32) -> MpiResult {
        // SAFETY: as in `send` and `recv`.
        check(unsafe {
            ffi::PMPI_Sendrecv(
                send.ptr,
                send.int_count()?,
                send.datatype,
                to,
                tag,
                recv.ptr,
                recv.int_count()?,
                recv.datatype,
                from,
                tag,
                self.raw,
                status_ignore(),
            )
        })
    }

    pub fn isend(&self, buf: &Buf, to: i32, tag: i32) -> MpiResult<MPI_Request> {
        let mut request = super::request_null();
        // SAFETY: as in `send`; the buffer stays valid until the request completes (callers wait
        // before returning).
        check(unsafe {
            ffi::PMPI_Isend(
                buf.ptr,
                buf.int_count()?,
                buf.datatype,
                to,
                tag,
                self.raw,
                &mut request,
            )
        })?;
        Ok(request)
    }

    pub fn irecv(&self, buf: &Buf, from: i32, tag: i32) -> MpiResult<MPI_Request> {
        let mut request = super::request_null();
        // SAFETY: as in `isend`.
        check(unsafe {
            ffi::PMPI_Irecv(
                buf.ptr,
                buf.int_count()?,
                buf.datatype,
                from,
                tag,
                self.raw,
                &mut request,
            )
        })?;
        Ok(request)
    }

    /// MPI_Reduce on the private communicator; `send` None means MPI_IN_PLACE (root only).
    pub fn reduce(&self, send: Option<&Buf>, recv: &Buf, op: MPI_Op, root: i32) -> MpiResult {
        let sendbuf: *const c_void = match send {
            Some(b) => b.ptr,
            None => constants().in_place,
        };
        // SAFETY: application or scratch buffers of `count` elements.
        check(unsafe {
            ffi::PMPI_Reduce(
                sendbuf,
                recv.ptr,
                recv.int_count()?,
                recv.datatype,
                op,
                root,
                self.raw,
            )
        })
    }

    pub fn bcast(&self, buf: &Buf, root: i32) -> MpiResult {
        // SAFETY: application or scratch buffer of `count` elements.
        check(unsafe { ffi::PMPI_Bcast(buf.ptr, buf.int_count()?, buf.datatype, root, self.raw) })
    }

    /// MPI_Gatherv into `recv` (blocks of `recv.datatype` at element displacements); `send`
    /// None means MPI_IN_PLACE (root only).
    pub fn gatherv(
        &self,
        send: Option<&Buf>,
        recv: &Buf,
        counts: &[c_int],
        displacements: &[c_int],
        root: i32,
    ) -> MpiResult {
        let (sendbuf, sendcount, sendtype): (*const c_void, c_int, _) = match send {
            Some(b) => (b.ptr, b.int_count()?, b.datatype),
            None => (constants().in_place, 0, recv.datatype),
        };
        // SAFETY: the arrays have one entry per rank; buffers as in `send`.
        check(unsafe {
            ffi::PMPI_Gatherv(
                sendbuf,
                sendcount,
                sendtype,
                recv.ptr,
                counts.as_ptr(),
                displacements.as_ptr(),
                recv.datatype,
                root,
                self.raw,
            )
        })
    }
}

impl Comm {
    /// Sends an empty message with `tag` to every other rank and waits at most `patience` for
    /// the sends to complete (a rank that is gone leaves its send behind, never a wait).
    pub fn notify_others(&self, tag: i32, patience: Duration) {
        let empty = empty_buf();
        let requests = (0..self.size)
            .filter(|&r| r != self.rank)
            .filter_map(|r| self.isend(&empty, r, tag).ok())
            .collect();
        settle(requests, patience);
    }

    /// Waits at most `patience` for an empty message with `tag` from `from`; whether it came.
    pub fn await_notice(&self, from: i32, tag: i32, patience: Duration) -> bool {
        let empty = empty_buf();
        match self.irecv(&empty, from, tag) {
            Ok(request) => settle(vec![request], patience),
            Err(_) => false,
        }
    }
}

/// Tests `requests` until all completed or `patience` ran out; those still active then are
/// cancelled and left to MPI (freed, not waited for). Whether all completed.
fn settle(mut requests: Vec<MPI_Request>, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        requests.retain_mut(|r| finish(r, false).is_none());
        if requests.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            for r in &mut requests {
                // SAFETY: active requests this module created; cancelling and freeing never
                // blocks.
                unsafe {
                    ffi::PMPI_Cancel(r);
                    ffi::PMPI_Request_free(r);
                }
            }
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The requests of one codelet call. Dropped while some are still active (the call failed
/// midway), it cancels and completes them: nothing writes the application's buffers after the
/// call has returned.
pub struct Requests(Vec<MPI_Request>);

impl Requests {
    /// `n` null requests (slots to fill with `set` or `push`).
    pub fn new(n: usize) -> Requests {
        Requests(vec![super::request_null(); n])
    }

    pub fn push(&mut self, request: MPI_Request) {
        self.0.push(request);
    }

    pub fn set(&mut self, slot: usize, request: MPI_Request) {
        self.0[slot] = request;
    }

    /// Completes every request, failed ones too; the error of the first that failed.
    pub fn waitall(&mut self) -> MpiResult {
        let n = c_int::try_from(self.0.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        // MPI_Waitall says only MPI_ERR_IN_STATUS; the statuses say what went wrong.
        let mut statuses = vec![empty_status(); self.0.len()];
        // SAFETY: the vector holds `n` handles this module created (or null ones), and there is
        // one status for each.
        let rc = unsafe { ffi::PMPI_Waitall(n, self.0.as_mut_ptr(), statuses.as_mut_ptr()) };
        if rc == ffi::MPI_ERR_IN_STATUS as c_int
            && let Some(failed) = statuses.iter().find(|s| s.MPI_ERROR != SUCCESS)
        {
            return Err(failed.MPI_ERROR);
        }
        check(rc)
    }

    /// Waits for one active request: its slot and how it completed, or None when none is
    /// active. An error MPI reports without naming its request is returned with the next
    /// request that completes (MPI is asked again, at most once per request).
    pub fn waitany(&mut self) -> Option<(usize, MpiResult)> {
        let n = c_int::try_from(self.0.len()).ok()?;
        let mut unnamed = None;
        for _ in 0..=self.0.len() {
            let mut index = -1;
            // SAFETY: the vector holds `n` handles this module created (or null ones); writes
            // one int.
            let rc =
                unsafe { ffi::PMPI_Waitany(n, self.0.as_mut_ptr(), &mut index, status_ignore()) };
            // MPI_UNDEFINED (no active request) is negative in both flavours.
            match usize::try_from(index).ok().filter(|&i| i < self.0.len()) {
                Some(slot) => {
                    if rc != SUCCESS && self.0[slot].bits() != super::request_null().bits() {
                        // Completed in error but not freed by MPI: waiting again would return it
                        // again.
                        // SAFETY: a request this module created, no longer active.
                        unsafe { ffi::PMPI_Request_free(&mut self.0[slot]) };
                    }
                    return Some((slot, check(unnamed.unwrap_or(rc))));
                }
                None if rc == SUCCESS => return None,
                None => {
                    unnamed.get_or_insert(rc);
                }
            }
        }
        None
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        let null = super::request_null();
        for request in self.0.iter_mut().filter(|r| r.bits() != null.bits()) {
            // SAFETY: an active request this module created; cancelled, then completed.
            unsafe {
                ffi::PMPI_Cancel(request);
                ffi::PMPI_Wait(request, status_ignore());
            }
        }
    }
}
