//! MPI_Isend/MPI_Irecv (the messages of halo episodes) and the calls that complete them.

use std::ffi::{c_int, c_void};

use crate::halo::{self, Completed};
use crate::mpi::requests::{self, read_int};
use crate::mpi::{
    self, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Request, MPI_Status, PointToPoint,
    PointToPointKind,
};
use crate::runtime;

fn post(ra: *const c_void, call: PointToPoint, request: *mut MPI_Request) -> c_int {
    if runtime::enabled() && runtime::process().is_some() {
        halo::post(ra as usize, &call, request)
    } else {
        call.native(request)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_isend(
    ra: *const c_void,
    large: c_int,
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    let call = PointToPoint {
        kind: PointToPointKind::Send,
        buf: buf.cast_mut(),
        count,
        datatype,
        peer: dest,
        tag,
        comm,
        large: large != 0,
    };
    post(ra, call, request)
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_irecv(
    ra: *const c_void,
    large: c_int,
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    let call = PointToPoint {
        kind: PointToPointKind::Recv,
        buf,
        count,
        datatype,
        peer: source,
        tag,
        comm,
        large: large != 0,
    };
    post(ra, call, request)
}

/// What a completion call does with requests that are not complete.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Wait,
    Test,
    /// MPI_Request_free: it cannot block, so a `neighbor` instance being posted stays held.
    Free,
}

/// Runs a completion call, telling the episode tracker what it completed.
fn completion(
    ra: *const c_void,
    requests: *mut MPI_Request,
    count: c_int,
    kind: Kind,
    call: impl FnOnce() -> (c_int, Completed),
) -> c_int {
    // The request being completed may be a deferred one (MPI_Request_free posted its own before
    // deciding who frees the request).
    if kind != Kind::Free {
        halo::post_deferred();
    }
    if !runtime::enabled() {
        return call().0;
    }
    // SAFETY: the application's array of `count` requests, as MPI requires.
    unsafe { halo::progress_neighbor(requests, count.max(0) as usize, kind == Kind::Wait) };
    // SAFETY: the application's array of `count` requests, as MPI requires; the index arrays
    // `call` reports are MPI's output for the same call.
    unsafe { halo::observe(ra as usize, requests, count.max(0) as usize, call) }
}

/// The outcome of a call that completes all requests or fails.
fn all_or_unknown(rc: c_int) -> (c_int, Completed) {
    let completed = if rc == mpi::SUCCESS {
        Completed::All
    } else {
        Completed::Unknown
    };
    (rc, completed)
}

/// The outcome of Waitany/Testany: the index MPI returned, unless it is MPI_UNDEFINED.
fn any(rc: c_int, index: *const c_int) -> (c_int, Completed) {
    if rc != mpi::SUCCESS {
        return (rc, Completed::Unknown);
    }
    // SAFETY: the call returned MPI_SUCCESS, so MPI wrote the index.
    match usize::try_from(unsafe { read_int(index) }) {
        Ok(i) => (rc, Completed::Index(i)),
        Err(_) => (rc, Completed::Nothing),
    }
}

/// The outcome of Waitsome/Testsome.
fn some(rc: c_int, outcount: *const c_int, indices: *const c_int) -> (c_int, Completed) {
    if rc != mpi::SUCCESS {
        return (rc, Completed::Unknown);
    }
    // SAFETY: the call returned MPI_SUCCESS, so MPI wrote the outcount.
    match usize::try_from(unsafe { read_int(outcount) }) {
        Ok(count) => (rc, Completed::Indices { indices, count }),
        Err(_) => (rc, Completed::Nothing),
    }
}

/// Whether a Wait call over `array[..count]` must poll its Test twin instead of blocking: the
/// array holds a request that only the library can complete, whose message MPI does not know is
/// the application's (`halo::neighbor_must_poll`).
fn must_poll(array: *const MPI_Request, count: c_int) -> bool {
    // SAFETY: the application's array of `count` requests, as the Wait call requires.
    runtime::enabled() && unsafe { halo::neighbor_must_poll(array, count.max(0) as usize) }
}

/// Calls `test` (a Test call over `array[..count]`, returning MPI's code and whether it found
/// what the Wait call waits for) until it does, completing the library's messages in between.
fn poll(array: *const MPI_Request, count: c_int, mut test: impl FnMut() -> (c_int, bool)) -> c_int {
    loop {
        // SAFETY: the application's array of `count` requests, as the Wait call requires.
        unsafe { halo::progress_neighbor(array, count.max(0) as usize, false) };
        let (rc, found) = test();
        if rc != mpi::SUCCESS || found {
            return rc;
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_wait(
    ra: *const c_void,
    request: *mut MPI_Request,
    status: *mut MPI_Status,
) -> c_int {
    completion(ra, request, 1, Kind::Wait, || {
        if !must_poll(request, 1) {
            return all_or_unknown(requests::wait(request, status));
        }
        let mut flag = 0;
        all_or_unknown(poll(request, 1, || {
            (requests::test(request, &mut flag, status), flag != 0)
        }))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_waitall(
    ra: *const c_void,
    count: c_int,
    array: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's array of `count` requests, as MPI_Waitall requires.
    let stepped = unsafe { halo::run_pairwise_steps(array, count.max(0) as usize) };
    completion(ra, array, count, Kind::Wait, || {
        let rc = if must_poll(array, count) {
            let mut flag = 0;
            poll(array, count, || {
                let rc = requests::testall(count, array, &mut flag, statuses);
                (rc, flag != 0)
            })
        } else {
            requests::waitall(count, array, statuses)
        };
        if rc == mpi::SUCCESS {
            // SAFETY: MPI_Waitall's status array holds `count` statuses, or is IGNORE.
            unsafe { halo::restore_statuses(statuses, stepped) };
        }
        all_or_unknown(rc)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_waitany(
    ra: *const c_void,
    count: c_int,
    array: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    completion(ra, array, count, Kind::Wait, || {
        if !must_poll(array, count) {
            return any(requests::waitany(count, array, index, status), index);
        }
        let mut flag = 0;
        let rc = poll(array, count, || {
            let rc = requests::testany(count, array, index, &mut flag, status);
            (rc, flag != 0)
        });
        any(rc, index)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_waitsome(
    ra: *const c_void,
    incount: c_int,
    array: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    completion(ra, array, incount, Kind::Wait, || {
        let rc = if must_poll(array, incount) {
            poll(array, incount, || {
                let rc = requests::testsome(incount, array, outcount, indices, statuses);
                // SAFETY: MPI wrote the outcount when it returned MPI_SUCCESS.
                (rc, rc == mpi::SUCCESS && unsafe { read_int(outcount) } != 0)
            })
        } else {
            requests::waitsome(incount, array, outcount, indices, statuses)
        };
        some(rc, outcount, indices)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_test(
    ra: *const c_void,
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    completion(ra, request, 1, Kind::Test, || {
        flagged(requests::test(request, flag, status), flag)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_testall(
    ra: *const c_void,
    count: c_int,
    array: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    completion(ra, array, count, Kind::Test, || {
        flagged(requests::testall(count, array, flag, statuses), flag)
    })
}

/// The outcome of Test/Testall: everything completed when the flag is set.
fn flagged(rc: c_int, flag: *const c_int) -> (c_int, Completed) {
    if rc != mpi::SUCCESS {
        (rc, Completed::Unknown)
    // SAFETY: the call returned MPI_SUCCESS, so MPI wrote the flag.
    } else if unsafe { read_int(flag) } != 0 {
        (rc, Completed::All)
    } else {
        (rc, Completed::Nothing)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_testany(
    ra: *const c_void,
    count: c_int,
    array: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    completion(ra, array, count, Kind::Test, || {
        let rc = requests::testany(count, array, index, flag, status);
        // SAFETY: the call returned MPI_SUCCESS, so MPI wrote the flag.
        if rc == mpi::SUCCESS && unsafe { read_int(flag) } == 0 {
            (rc, Completed::Nothing)
        } else {
            any(rc, index)
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_testsome(
    ra: *const c_void,
    incount: c_int,
    array: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    completion(ra, array, incount, Kind::Test, || {
        let rc = requests::testsome(incount, array, outcount, indices, statuses);
        some(rc, outcount, indices)
    })
}

/// A freed request is no longer the application's to complete: it leaves the episode.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_request_free(ra: *const c_void, request: *mut MPI_Request) -> c_int {
    // SAFETY: the application's request variable, as MPI_Request_free requires.
    let handle = (!request.is_null()).then(|| unsafe { requests::request_at(request, 0) });
    let taken_over = |request: *mut MPI_Request| {
        // SAFETY: as above.
        unsafe { requests::set_request_at(request, 0, mpi::request_null()) };
        (mpi::SUCCESS, Completed::All)
    };
    if runtime::enabled() && handle.is_some_and(halo::neighbor_adopts) {
        // Freeing cannot block: a `neighbor` instance being posted stays held.
        // SAFETY: one writable handle.
        return unsafe { halo::observe(ra as usize, request, 1, || taken_over(request)) };
    }
    halo::post_deferred_listed();
    if runtime::enabled() && handle.is_some_and(halo::freeing) {
        // The library completes it; to the application it is freed.
        return completion(ra, request, 1, Kind::Free, || taken_over(request));
    }
    completion(ra, request, 1, Kind::Free, || {
        all_or_unknown(requests::request_free(request))
    })
}

/// MPI_Request_get_status: a packed receive it finds complete is unpacked first.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    halo::post_deferred();
    if runtime::enabled() {
        // SAFETY: one handle.
        unsafe { halo::progress_neighbor(&request, 1, false) };
    }
    let rc = requests::request_get_status(request, flag, status);
    // SAFETY: the call returned MPI_SUCCESS, so MPI wrote the flag.
    if rc == mpi::SUCCESS && runtime::enabled() && unsafe { read_int(flag) } != 0 {
        halo::found_complete(request);
    }
    rc
}
