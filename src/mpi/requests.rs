//! The completion calls (Wait*, Test*, Request_free), passed through to PMPI, and the life of
//! the persistent requests the library makes itself.

use std::ffi::c_int;

use mpi_sys as ffi;

use super::{MPI_Request, MPI_Status};

/// A persistent request the library made (MPI_Send_init/MPI_Recv_init) and owns.
#[derive(Clone, Copy)]
pub struct Persistent(pub(super) MPI_Request);

// SAFETY: an MPI request handle may be used from any thread (MPI_THREAD_MULTIPLE); the library
// lets one thread at a time start or complete it.
unsafe impl Send for Persistent {}
// SAFETY: as above.
unsafe impl Sync for Persistent {}

impl Persistent {
    /// The handle, as the application receives it.
    pub fn handle(self) -> MPI_Request {
        self.0
    }

    /// Starts it. MPI may give it a new handle: Open MPI's MPI_Start makes a new request when the
    /// previous run is not finished inside the library (the old one is freed when it is), so only
    /// the handle this leaves is valid afterwards. A request that never ran keeps its handle.
    pub fn start(&mut self) -> c_int {
        // SAFETY: an inactive persistent request of ours; MPI writes back its (new) handle.
        unsafe { ffi::PMPI_Start(&mut self.0) }
    }

    /// Frees it: at once when inactive, else when it completes.
    pub fn free(mut self) {
        // SAFETY: a persistent request of ours that nobody starts after this.
        unsafe { ffi::PMPI_Request_free(&mut self.0) };
    }
}

/// Tests `requests` (handles of the library's own persistent requests) for completion: None
/// while one is pending; else MPI's return code, with `statuses` filled (their error fields only
/// when it is MPI_ERR_IN_STATUS).
pub fn test_all(requests: &mut [MPI_Request], statuses: &mut [MPI_Status]) -> Option<c_int> {
    let mut flag = 0;
    let n = c_int::try_from(requests.len().min(statuses.len())).unwrap_or(c_int::MAX);
    // SAFETY: both slices hold `n` elements; MPI writes the flag and up to `n` statuses.
    let rc =
        unsafe { ffi::PMPI_Testall(n, requests.as_mut_ptr(), &mut flag, statuses.as_mut_ptr()) };
    (rc != super::SUCCESS || flag != 0).then_some(rc)
}

/// A persistent request of the library's that a failed completion call completed, or left
/// pending: when it is complete, completes it (inactive, its handle kept) and returns true.
pub fn settle_if_done(request: &mut MPI_Request) -> bool {
    let mut flag = 0;
    // SAFETY: a valid request handle; MPI writes the flag and ignores the status.
    let rc = unsafe { ffi::PMPI_Request_get_status(*request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    if rc != super::SUCCESS || flag == 0 {
        return false;
    }
    // SAFETY: complete or inactive, so this returns at once; a persistent request's handle stays.
    unsafe { ffi::PMPI_Wait(request, ffi::RSMPI_STATUS_IGNORE) };
    true
}

/// A status for MPI to fill.
pub fn empty_status() -> MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers, for which all zeros is a valid value.
    unsafe { std::mem::zeroed() }
}

/// A request the library completes itself, from whichever thread gets there first: one the
/// application gave up (MPI_Request_free), or one carrying held posts.
pub struct Pending(MPI_Request);

// SAFETY: as for `Persistent`.
unsafe impl Send for Pending {}

impl Pending {
    pub fn new(request: MPI_Request) -> Pending {
        Pending(request)
    }

    /// Whether it has completed: tests it, or with `wait` waits for it.
    pub fn done(&mut self, wait: bool) -> bool {
        self.finish(wait).is_some()
    }

    /// As `finish`: MPI's code and the status once complete.
    pub fn finish(&mut self, wait: bool) -> Option<(c_int, MPI_Status)> {
        finish(&mut self.0, wait)
    }
}

/// Waits for (`wait`) or tests one of the library's requests; MPI's code and the status once
/// complete (a failed call counts as complete: its code says why). MPI sets the handle to
/// MPI_REQUEST_NULL when it completes.
pub fn finish(request: &mut MPI_Request, wait: bool) -> Option<(c_int, MPI_Status)> {
    let mut status = empty_status();
    let mut flag = 1;
    // SAFETY: an active request of the library's; MPI writes the flag and the status.
    let rc = unsafe {
        if wait {
            ffi::PMPI_Wait(request, &mut status)
        } else {
            ffi::PMPI_Test(request, &mut flag, &mut status)
        }
    };
    (rc != super::SUCCESS || flag != 0).then_some((rc, status))
}

pub fn request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Request_get_status(request, flag, status) }
}

pub fn wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Wait(request, status) }
}

pub fn waitall(count: c_int, requests: *mut MPI_Request, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Waitall(count, requests, statuses) }
}

pub fn waitany(
    count: c_int,
    requests: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Waitany(count, requests, index, status) }
}

pub fn waitsome(
    incount: c_int,
    requests: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Waitsome(incount, requests, outcount, indices, statuses) }
}

pub fn test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Test(request, flag, status) }
}

pub fn testall(
    count: c_int,
    requests: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Testall(count, requests, flag, statuses) }
}

pub fn testany(
    count: c_int,
    requests: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Testany(count, requests, index, flag, status) }
}

pub fn testsome(
    incount: c_int,
    requests: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Testsome(incount, requests, outcount, indices, statuses) }
}

pub fn request_free(request: *mut MPI_Request) -> c_int {
    // SAFETY: the application's arguments, passed through unchanged.
    unsafe { ffi::PMPI_Request_free(request) }
}
