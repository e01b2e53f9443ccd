//! MPI_Allreduce, MPI_Alltoall and MPI_Allgatherv (and their MPI-4 `_c` variants), and
//! MPI_Barrier, which is not tuned but is a point where halo episodes may be agreed on.

use std::ffi::{c_int, c_void};
use std::hash::Hasher;

use commtune_report::Op;
use rustc_hash::FxHasher;

use super::dispatch;
use crate::codelets::Operation;
use crate::halo;
use crate::keys::{self, CallKey, Description};
use crate::mpi::{
    self, Allgatherv, Allreduce, Alltoall, Counts, HandleBits, MPI_Comm, MPI_Count, MPI_Datatype,
    MPI_Op,
};
use crate::runtime;

#[unsafe(no_mangle)]
pub extern "C" fn commtune_barrier(comm: MPI_Comm) -> c_int {
    halo::post_deferred();
    if runtime::enabled() && runtime::process().is_some() && mpi::are_valid(comm, &[]) {
        halo::agree_at_collective(comm);
    }
    mpi::barrier(comm)
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_allreduce(
    ra: *const c_void,
    large: c_int,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    halo::post_deferred();
    let call = Allreduce {
        sendbuf,
        recvbuf,
        count,
        datatype,
        op,
        comm,
        large: large != 0,
    };
    if !runtime::enabled() || runtime::process().is_none() || !mpi::are_valid(comm, &[datatype]) {
        return call.native();
    }
    let in_place = mpi::is_in_place(sendbuf);
    let key = CallKey {
        caller: ra as usize,
        op: Op::Allreduce,
        words: [
            comm.bits() as u64,
            count as u64,
            datatype.bits() as u64,
            op.bits() as u64,
            u64::from(in_place),
        ],
    };
    let (key, entry) = keys::find(key, |_| {
        let size = mpi::comm_size(comm);
        let in_place = if in_place { " in_place" } else { "" };
        let signature = format!(
            "count={count} datatype={} op={} comm_size={size}{in_place}",
            mpi::type_name(datatype),
            mpi::op_name(op),
        );
        Description {
            agree: format!(
                "bytes={} op={} comm_size={size}{in_place} {:?}",
                call.bytes(),
                mpi::op_name(op),
                call.facts()
            ),
            merge_key: signature.clone(),
            signature,
            bytes_per_call: call.bytes(),
            handles: keys::freeable(comm, &[datatype], Some(op)),
        }
    });
    dispatch(&call, key, entry)
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_alltoall(
    ra: *const c_void,
    large: c_int,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    halo::post_deferred();
    let call = Alltoall {
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcount,
        recvtype,
        comm,
        large: large != 0,
    };
    if !runtime::enabled()
        || runtime::process().is_none()
        || !mpi::are_valid(comm, &[sendtype, recvtype])
    {
        return call.native();
    }
    let in_place = mpi::is_in_place(sendbuf);
    let key = CallKey {
        caller: ra as usize,
        op: Op::Alltoall,
        words: [
            comm.bits() as u64,
            if in_place { u64::MAX } else { sendcount as u64 },
            sendtype.bits() as u64,
            recvcount as u64,
            recvtype.bits() as u64,
        ],
    };
    let (key, entry) = keys::find(key, |_| {
        let size = mpi::group_size(comm);
        let send = if in_place {
            "in_place".to_string()
        } else {
            format!(
                "sendcount={sendcount} sendtype={}",
                mpi::type_name(sendtype)
            )
        };
        let signature = format!(
            "{send} recvcount={recvcount} recvtype={} comm_size={size}",
            mpi::type_name(recvtype)
        );
        Description {
            agree: format!(
                "block_bytes={} comm_size={size} {:?}",
                recvcount * mpi::type_size(recvtype),
                call.facts()
            ),
            merge_key: signature.clone(),
            signature,
            bytes_per_call: call.bytes(i64::from(size)),
            handles: keys::freeable(comm, &[sendtype, recvtype], None),
        }
    });
    dispatch(&call, key, entry)
}

#[unsafe(no_mangle)]
pub extern "C" fn commtune_allgatherv(
    ra: *const c_void,
    large: c_int,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_void,
    displs: *const c_void,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    halo::post_deferred();
    let large = large != 0;
    let call = Allgatherv {
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcounts: Counts::new(recvcounts, large),
        displs: Counts::new(displs, large),
        recvtype,
        comm,
        large,
    };
    if !runtime::enabled()
        || runtime::process().is_none()
        || !mpi::are_valid(comm, &[sendtype, recvtype])
    {
        return call.native();
    }
    let in_place = mpi::is_in_place(sendbuf);
    // One entry per rank of the (remote, for an intercommunicator) group.
    let size = mpi::group_size(comm).max(0) as usize;
    // SAFETY: MPI requires recvcounts and displs to hold one entry per rank of that group.
    let call = unsafe {
        Allgatherv {
            recvcounts: call.recvcounts.readable(size),
            displs: call.displs.readable(size),
            ..call
        }
    };
    let mut layout = FxHasher::default();
    for i in 0..size {
        layout.write_i64(call.recvcounts.get(i));
        layout.write_i64(call.displs.get(i));
    }
    let key = CallKey {
        caller: ra as usize,
        op: Op::Allgatherv,
        words: [
            comm.bits() as u64,
            if in_place { u64::MAX } else { sendcount as u64 },
            sendtype.bits() as u64,
            recvtype.bits() as u64,
            layout.finish(),
        ],
    };
    let (key, entry) = keys::find(key, |_| {
        let counts: Vec<i64> = (0..size).map(|i| call.recvcounts.get(i)).collect();
        let merge_key = format!(
            "recvcounts={} recvtype={} comm_size={size}",
            summarize_counts(&counts),
            mpi::type_name(recvtype)
        );
        let send = if in_place {
            "in_place".to_string()
        } else {
            format!(
                "sendcount={sendcount} sendtype={}",
                mpi::type_name(sendtype)
            )
        };
        let bytes: Vec<i64> = counts
            .iter()
            .map(|c| c * mpi::type_size(recvtype))
            .collect();
        Description {
            agree: format!(
                "recvbytes={} comm_size={size} {:?}",
                summarize_counts(&bytes),
                call.facts()
            ),
            signature: format!("{send} {merge_key}"),
            merge_key,
            bytes_per_call: call.bytes(size),
            handles: keys::freeable(comm, &[sendtype, recvtype], None),
        }
    });
    dispatch(&call, key, entry)
}

/// Counts in full for small communicators, else their sum and range.
fn summarize_counts(counts: &[i64]) -> String {
    if counts.len() <= 8 {
        format!("{counts:?}").replace(' ', "")
    } else {
        format!(
            "[sum={},min={},max={}]",
            counts.iter().sum::<i64>(),
            counts.iter().min().unwrap_or(&0),
            counts.iter().max().unwrap_or(&0)
        )
    }
}
