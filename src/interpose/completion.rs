//! MPI_Isend/MPI_Irecv (the messages of halo episodes) and the calls that complete them.
//!
//! This is the edge where the application's request variables and arrays, status arrays and
//! index arrays become Rust references and slices, once, for the call; everything below works on
//! those. An argument MPI would reject (a null array, a negative count) is passed on as it is,
//! for MPI to report.

use std::ffi::{c_int, c_void};

use crate::halo::{self, Completed};
use crate::mpi::requests;
use crate::mpi::{
    self, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Request, MPI_Status, PointToPoint,
    PointToPointKind,
};
use crate::runtime;

/// The application's `count` requests at `array`, for the duration of the call.
fn requests_of<'a>(array: *mut MPI_Request, count: c_int) -> Option<&'a mut [MPI_Request]> {
    let count = usize::try_from(count).ok()?;
    if count == 0 {
        return Some(&mut []);
    }
    if array.is_null() {
        return None;
    }
    // SAFETY: MPI requires `array` to hold `count` writable handles during the call; the slice
    // does not outlive the call.
    Some(unsafe { std::slice::from_raw_parts_mut(array, count) })
}

/// The application's status array for `count` requests (None: MPI_STATUSES_IGNORE).
fn statuses_of<'a>(statuses: *mut MPI_Status, count: c_int) -> Option<&'a mut [MPI_Status]> {
    let count = usize::try_from(count).ok()?;
    if statuses.is_null() || statuses == mpi::statuses_ignore() {
        return None;
    }
    // SAFETY: MPI requires a status array to hold one status per request.
    Some(unsafe { std::slice::from_raw_parts_mut(statuses, count) })
}

/// An int MPI wrote (a flag, an index, an outcount) when the call returned MPI_SUCCESS.
fn written(rc: c_int, p: *const c_int) -> Option<c_int> {
    // SAFETY: after MPI_SUCCESS, MPI has written the output argument the application passed.
    (rc == mpi::SUCCESS && !p.is_null()).then(|| unsafe { *p })
}

fn post(ra: *const c_void, call: PointToPoint, request: *mut MPI_Request) -> c_int {
    // SAFETY: MPI_Isend/MPI_Irecv require a valid request variable.
    let Some(request) = (unsafe { request.as_mut() }) else {
        let rc = mpi::ERR_REQUEST;
        mpi::call_errhandler(call.comm, rc);
        return rc;
    };
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

/// Runs a completion call over `requests`, telling the episode tracker what it completed.
fn completion<'i>(
    ra: *const c_void,
    requests: &mut [MPI_Request],
    kind: Kind,
    call: impl FnOnce(&mut [MPI_Request]) -> (c_int, Completed<'i>),
) -> c_int {
    // The request being completed may be a deferred one (MPI_Request_free posted its own before
    // deciding who frees the request).
    if kind != Kind::Free {
        halo::post_deferred();
    }
    if !runtime::enabled() {
        return call(requests).0;
    }
    halo::progress_neighbor(requests, kind == Kind::Wait);
    halo::observe(ra as usize, requests, call)
}

/// The outcome of a call that completes all requests or fails.
fn all_or_unknown<'i>(rc: c_int) -> (c_int, Completed<'i>) {
    let completed = if rc == mpi::SUCCESS {
        Completed::All
    } else {
        Completed::Unknown(None)
    };
    (rc, completed)
}

/// The outcome of Waitany/Testany: the index MPI returned, unless it is MPI_UNDEFINED.
fn any<'i>(rc: c_int, index: *const c_int) -> (c_int, Completed<'i>) {
    match written(rc, index).map(usize::try_from) {
        None => (rc, Completed::Unknown(None)),
        Some(Ok(i)) => (rc, Completed::Index(i)),
        Some(Err(_)) => (rc, Completed::Nothing),
    }
}

/// The outcome of Waitsome/Testsome.
fn some<'i>(rc: c_int, outcount: *const c_int, indices: *const c_int) -> (c_int, Completed<'i>) {
    let Some(count) = written(rc, outcount) else {
        return (rc, Completed::Unknown(None));
    };
    match usize::try_from(count) {
        Ok(0) => (rc, Completed::Nothing),
        // SAFETY: MPI wrote `count` indices into the application's index array.
        Ok(count) if !indices.is_null() => (
            rc,
            Completed::Indices(unsafe { std::slice::from_raw_parts(indices, count) }),
        ),
        _ => (rc, Completed::Nothing),
    }
}

/// The outcome of Test/Testall: everything completed when the flag is set.
fn flagged<'i>(rc: c_int, flag: *const c_int) -> (c_int, Completed<'i>) {
    match written(rc, flag) {
        None => (rc, Completed::Unknown(None)),
        Some(0) => (rc, Completed::Nothing),
        Some(_) => (rc, Completed::All),
    }
}

/// Whether a Wait call over `requests` must poll its Test twin instead of blocking: the array
/// holds a request that only the library can complete, whose message MPI does not know is the
/// application's (`halo::neighbor_must_poll`).
fn must_poll(requests: &[MPI_Request]) -> bool {
    runtime::enabled() && halo::neighbor_must_poll(requests)
}

/// Calls `test` (a Test call over `requests`, returning MPI's code and whether it found what the
/// Wait call waits for) until it does, completing the library's messages in between.
fn poll(
    requests: &mut [MPI_Request],
    mut test: impl FnMut(&mut [MPI_Request]) -> (c_int, bool),
) -> c_int {
    loop {
        halo::progress_neighbor(requests, false);
        let (rc, found) = test(requests);
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
    let Some(one) = requests_of(request, 1) else {
        return requests::wait(request, status);
    };
    completion(ra, one, Kind::Wait, |one| {
        if !must_poll(one) {
            return all_or_unknown(requests::wait(one.as_mut_ptr(), status));
        }
        let mut flag = 0;
        all_or_unknown(poll(one, |one| {
            (
                requests::test(one.as_mut_ptr(), &mut flag, status),
                flag != 0,
            )
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
    let Some(all) = requests_of(array, count) else {
        return requests::waitall(count, array, statuses);
    };
    let stepped = halo::run_pairwise_steps(all);
    completion(ra, all, Kind::Wait, |all| {
        let waited = stepped.quietly(statuses_of(statuses, count), || {
            if must_poll(all) {
                let mut flag = 0;
                poll(all, |all| {
                    let rc = requests::testall(count, all.as_mut_ptr(), &mut flag, statuses);
                    (rc, flag != 0)
                })
            } else {
                requests::waitall(count, all.as_mut_ptr(), statuses)
            }
        });
        let rc = halo::finish_pairwise_steps(statuses_of(statuses, count), stepped, waited);
        // What completed is what this MPI_Waitall completed; what it returns includes the steps.
        let completed = match all_or_unknown(waited).1 {
            Completed::Unknown(_) if mpi::error_class(waited) == mpi::ERR_IN_STATUS => {
                Completed::Unknown(statuses_of(statuses, count).map(|s| &*s))
            }
            completed => completed,
        };
        (rc, completed)
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
    let Some(all) = requests_of(array, count) else {
        return requests::waitany(count, array, index, status);
    };
    completion(ra, all, Kind::Wait, |all| {
        if !must_poll(all) {
            return any(
                requests::waitany(count, all.as_mut_ptr(), index, status),
                index,
            );
        }
        let mut flag = 0;
        let rc = poll(all, |all| {
            let rc = requests::testany(count, all.as_mut_ptr(), index, &mut flag, status);
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
    let Some(all) = requests_of(array, incount) else {
        return requests::waitsome(incount, array, outcount, indices, statuses);
    };
    completion(ra, all, Kind::Wait, |all| {
        let rc = if must_poll(all) {
            poll(all, |all| {
                let rc = requests::testsome(incount, all.as_mut_ptr(), outcount, indices, statuses);
                (rc, written(rc, outcount).is_some_and(|n| n != 0))
            })
        } else {
            requests::waitsome(incount, all.as_mut_ptr(), outcount, indices, statuses)
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
    let Some(one) = requests_of(request, 1) else {
        return requests::test(request, flag, status);
    };
    completion(ra, one, Kind::Test, |one| {
        flagged(requests::test(one.as_mut_ptr(), flag, status), flag)
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
    let Some(all) = requests_of(array, count) else {
        return requests::testall(count, array, flag, statuses);
    };
    completion(ra, all, Kind::Test, |all| {
        flagged(
            requests::testall(count, all.as_mut_ptr(), flag, statuses),
            flag,
        )
    })
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
    let Some(all) = requests_of(array, count) else {
        return requests::testany(count, array, index, flag, status);
    };
    completion(ra, all, Kind::Test, |all| {
        let rc = requests::testany(count, all.as_mut_ptr(), index, flag, status);
        match written(rc, flag) {
            Some(0) => (rc, Completed::Nothing),
            _ => any(rc, index),
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
    let Some(all) = requests_of(array, incount) else {
        return requests::testsome(incount, array, outcount, indices, statuses);
    };
    completion(ra, all, Kind::Test, |all| {
        let rc = requests::testsome(incount, all.as_mut_ptr(), outcount, indices, statuses);
        some(rc, outcount, indices)
    })
}

/// A freed request is no longer the application's to complete: it leaves the episode.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_request_free(ra: *const c_void, request: *mut MPI_Request) -> c_int {
    let Some(one) = requests_of(request, 1) else {
        return requests::request_free(request);
    };
    let handle = one[0];
    let taken_over = |one: &mut [MPI_Request]| {
        one[0] = mpi::request_null();
        (mpi::SUCCESS, Completed::All)
    };
    if runtime::enabled() && halo::neighbor_adopts(handle) {
        // Freeing cannot block: a `neighbor` instance being posted stays held.
        return halo::observe(ra as usize, one, taken_over);
    }
    halo::post_deferred_listed();
    if runtime::enabled() && halo::freeing(handle) {
        // The library completes it; to the application it is freed.
        return completion(ra, one, Kind::Free, taken_over);
    }
    completion(ra, one, Kind::Free, |one| {
        all_or_unknown(requests::request_free(one.as_mut_ptr()))
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
        halo::progress_neighbor(&[request], false);
    }
    let rc = requests::request_get_status(request, flag, status);
    if runtime::enabled() && written(rc, flag).is_some_and(|f| f != 0) {
        halo::found_complete(request);
    }
    rc
}
