//! MPI_Isend/MPI_Irecv (the messages of halo episodes) and the calls that complete them.
//!
//! This is the edge where the application's request variables and arrays, status arrays and
//! index arrays become Rust references and slices, once, for the call; everything below works on
//! those. An argument MPI would reject (a null array, a negative count) is passed on as it is,
//! for MPI to report.

use std::ffi::{c_int, c_void};

use crate::halo::{self, Completed, Failure};
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

/// Where a completion call writes the statuses of `count` requests: `statuses`, the application's
/// array (or `ignore`, MPI_STATUS_IGNORE or MPI_STATUSES_IGNORE). When `halo::observe` is to read
/// them (`halo::reads_statuses`), each error field starts as MPI_SUCCESS (MPI writes those of
/// requests that fail) and MPI writes ignored statuses into `spare`.
fn to_write(
    statuses: *mut MPI_Status,
    ignore: *mut MPI_Status,
    count: c_int,
    spare: &mut Vec<MPI_Status>,
) -> *mut MPI_Status {
    let Ok(count) = usize::try_from(count) else {
        return statuses;
    };
    if !runtime::enabled() || !halo::reads_statuses() {
        return statuses;
    }
    let array = if statuses == ignore {
        spare.resize(count, requests::empty_status());
        spare.as_mut_slice()
    } else if statuses.is_null() {
        return statuses;
    } else {
        // SAFETY: MPI requires a status array to hold one status per request.
        unsafe { std::slice::from_raw_parts_mut(statuses, count) }
    };
    array.iter_mut().for_each(|s| s.MPI_ERROR = mpi::SUCCESS);
    array.as_mut_ptr()
}

/// The status of a call that completes one request (None: MPI_STATUS_IGNORE).
fn status_of<'a>(status: *const MPI_Status) -> Option<&'a MPI_Status> {
    if status == mpi::status_ignore() {
        return None;
    }
    // SAFETY: MPI requires a status variable the call writes; it does not outlive the call.
    unsafe { status.as_ref() }
}

/// The outcome of Wait/Test, which completes its one request or fails.
fn one_done<'i>(rc: c_int, status: *const MPI_Status) -> (c_int, Completed<'i>) {
    let completed = if rc == mpi::SUCCESS {
        Completed::Index(0, status_of(status))
    } else {
        Completed::Failed(Failure::Index(0))
    };
    (rc, completed)
}

/// The outcome of Waitall/Testall, which complete every request or fail; after
/// MPI_ERR_IN_STATUS the statuses say which failed and which completed.
fn every(rc: c_int, statuses: Option<&[MPI_Status]>) -> (c_int, Completed<'_>) {
    let completed = match statuses {
        _ if rc == mpi::SUCCESS => Completed::All(statuses),
        Some(statuses) if mpi::error_class(rc) == mpi::ERR_IN_STATUS => {
            Completed::Failed(Failure::Statuses(statuses))
        }
        _ => Completed::Failed(Failure::Unknown),
    };
    (rc, completed)
}

/// Sets the application's index variable to MPI_UNDEFINED before Waitany/Testany: after a failed
/// call, an index is one MPI wrote, the request that failed.
fn undefine(index: *mut c_int) {
    // SAFETY: an index variable the application passed for MPI to write; MPI writes it again.
    if let Some(index) = unsafe { index.as_mut() } {
        *index = mpi::UNDEFINED;
    }
}

/// The outcome of Waitany/Testany: the index MPI returned, unless it is MPI_UNDEFINED.
fn any<'i>(rc: c_int, index: *const c_int, status: *const MPI_Status) -> (c_int, Completed<'i>) {
    // SAFETY: the application's index variable, set by `undefine` and then by MPI.
    let index = unsafe { index.as_ref() }.map(|&i| usize::try_from(i).ok());
    let completed = match (rc == mpi::SUCCESS, index) {
        (true, Some(Some(i))) => Completed::Index(i, status_of(status)),
        (true, Some(None)) => Completed::Nothing,
        (false, Some(Some(i))) => Completed::Failed(Failure::Index(i)),
        (_, _) => Completed::Failed(Failure::Unknown),
    };
    (rc, completed)
}

/// The outcome of Waitsome/Testsome: after MPI_ERR_IN_STATUS too, MPI wrote which requests
/// completed.
fn some<'i>(
    rc: c_int,
    outcount: *const c_int,
    indices: *const c_int,
    statuses: Option<&'i [MPI_Status]>,
) -> (c_int, Completed<'i>) {
    let in_status = mpi::error_class(rc) == mpi::ERR_IN_STATUS;
    let count = if in_status {
        // SAFETY: with MPI_ERR_IN_STATUS, MPI wrote the count of requests it completed.
        unsafe { outcount.as_ref() }.copied()
    } else {
        written(rc, outcount)
    };
    let indices = match count.map(usize::try_from) {
        None => return (rc, Completed::Failed(Failure::Unknown)),
        Some(Ok(count)) if count > 0 && !indices.is_null() => {
            // SAFETY: MPI wrote `count` indices into the application's index array.
            unsafe { std::slice::from_raw_parts(indices, count) }
        }
        Some(_) => &[],
    };
    let completed = match (in_status, indices.is_empty()) {
        (true, _) => Completed::Failed(Failure::Indices(indices)),
        (false, true) => Completed::Nothing,
        (false, false) => Completed::Indices(indices, statuses),
    };
    (rc, completed)
}

/// The outcome of Test/Testall, whose flag says whether they completed what `done` says.
fn flagged<'i>(flag: *const c_int, done: (c_int, Completed<'i>)) -> (c_int, Completed<'i>) {
    match written(done.0, flag) {
        Some(0) => (done.0, Completed::Nothing),
        _ => done,
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
    let mut spare = Vec::new();
    completion(ra, one, Kind::Wait, |one| {
        let status = to_write(status, mpi::status_ignore(), 1, &mut spare);
        if !must_poll(one) {
            return one_done(requests::wait(one.as_mut_ptr(), status), status);
        }
        let mut flag = 0;
        let rc = poll(one, |one| {
            (
                requests::test(one.as_mut_ptr(), &mut flag, status),
                flag != 0,
            )
        });
        one_done(rc, status)
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
    let mut spare = Vec::new();
    completion(ra, all, Kind::Wait, |all| {
        let statuses = to_write(statuses, mpi::statuses_ignore(), count, &mut spare);
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
        let written = statuses_of(statuses, count).map(|s| &*s);
        (rc, every(waited, written).1)
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
    undefine(index);
    let mut spare = Vec::new();
    completion(ra, all, Kind::Wait, |all| {
        let status = to_write(status, mpi::status_ignore(), 1, &mut spare);
        if !must_poll(all) {
            let rc = requests::waitany(count, all.as_mut_ptr(), index, status);
            return any(rc, index, status);
        }
        let mut flag = 0;
        let rc = poll(all, |all| {
            let rc = requests::testany(count, all.as_mut_ptr(), index, &mut flag, status);
            (rc, flag != 0)
        });
        any(rc, index, status)
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
    let mut spare = Vec::new();
    completion(ra, all, Kind::Wait, |all| {
        let statuses = to_write(statuses, mpi::statuses_ignore(), incount, &mut spare);
        let rc = if must_poll(all) {
            poll(all, |all| {
                let rc = requests::testsome(incount, all.as_mut_ptr(), outcount, indices, statuses);
                (rc, written(rc, outcount).is_some_and(|n| n != 0))
            })
        } else {
            requests::waitsome(incount, all.as_mut_ptr(), outcount, indices, statuses)
        };
        some(
            rc,
            outcount,
            indices,
            statuses_of(statuses, incount).map(|s| &*s),
        )
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
    let mut spare = Vec::new();
    completion(ra, one, Kind::Test, |one| {
        let status = to_write(status, mpi::status_ignore(), 1, &mut spare);
        let rc = requests::test(one.as_mut_ptr(), flag, status);
        flagged(flag, one_done(rc, status))
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
    let mut spare = Vec::new();
    completion(ra, all, Kind::Test, |all| {
        let statuses = to_write(statuses, mpi::statuses_ignore(), count, &mut spare);
        let rc = requests::testall(count, all.as_mut_ptr(), flag, statuses);
        flagged(flag, every(rc, statuses_of(statuses, count).map(|s| &*s)))
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
    undefine(index);
    let mut spare = Vec::new();
    completion(ra, all, Kind::Test, |all| {
        let status = to_write(status, mpi::status_ignore(), 1, &mut spare);
        let rc = match (out_arg(index), out_arg(flag)) {
            (Some(index), Some(flag)) if !all.is_empty() && halo::reads_statuses() => {
                testany_in_turn(all, index, flag, status)
            }
            _ => requests::testany(count, all.as_mut_ptr(), index, flag, status),
        };
        flagged(flag, any(rc, index, status))
    })
}

/// An output argument of the application's for MPI to write (None: a null pointer, which MPI
/// rejects).
fn out_arg<'a>(p: *mut c_int) -> Option<&'a mut c_int> {
    // SAFETY: an output argument the application passed for the duration of the call.
    unsafe { p.as_mut() }
}

/// MPI_Testany over `all` while a persistent request of the library's may be among them, one
/// request at a time, in order: Open MPI's MPI_Testany returns MPI_SUCCESS over a failed
/// persistent request and keeps its error out of the status, where its MPI_Test returns it. The
/// application's own requests go through a one-request MPI_Testany, which skips an inactive one
/// as MPI_Testany does.
fn testany_in_turn(
    all: &mut [MPI_Request],
    index: &mut c_int,
    flag: &mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    let mut active = false;
    for (i, request) in all.iter_mut().enumerate() {
        let (rc, found) = if halo::is_persistent_of_ours(*request) {
            let rc = requests::test(request, flag, status);
            (rc, *flag != 0)
        } else {
            let mut at = mpi::UNDEFINED;
            let rc = requests::testany(1, request, &mut at, flag, status);
            (rc, at == 0)
        };
        if rc != mpi::SUCCESS || found {
            *index = c_int::try_from(i).unwrap_or(mpi::UNDEFINED);
            return rc;
        }
        active |= *flag == 0;
    }
    *index = mpi::UNDEFINED;
    *flag = c_int::from(!active);
    mpi::SUCCESS
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
    let mut spare = Vec::new();
    completion(ra, all, Kind::Test, |all| {
        let statuses = to_write(statuses, mpi::statuses_ignore(), incount, &mut spare);
        let rc = requests::testsome(incount, all.as_mut_ptr(), outcount, indices, statuses);
        some(
            rc,
            outcount,
            indices,
            statuses_of(statuses, incount).map(|s| &*s),
        )
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
        (mpi::SUCCESS, Completed::All(None))
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
        every(requests::request_free(one.as_mut_ptr()), None)
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
