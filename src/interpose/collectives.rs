//! MPI_Allreduce, MPI_Alltoall and MPI_Allgatherv (and their MPI-4 `_c` variants), and
//! MPI_Barrier, which is not tuned but is a point where halo episodes may be agreed on.

use std::ffi::{c_int, c_void};
use std::hash::Hasher;

use commtune_report::Op;
use commtune_tune::classes::class_name;
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
        halo::agree_at_collective(comm, false);
    }
    mpi::barrier(comm)
}

/// What the entry points need of each intercepted collective's call record.
trait Intercepted: Operation + Sized {
    /// The datatypes MPI must find valid (with the communicator) before the library reads the
    /// call.
    fn datatypes(&self) -> [MPI_Datatype; 2];
    /// The call once its handles are known valid (allgatherv's count arrays are read then).
    fn checked(self) -> Self {
        self
    }
    /// Its raw identity, from the return address `caller`.
    fn key(&self, caller: usize) -> CallKey;
    /// Its description, the first time the key is seen (or a handle it read was freed).
    fn describe(&self) -> Description;
}

/// Runs an intercepted collective made at `ra`: native while the library is off or MPI is not
/// running or would reject the call, else through its key.
fn intercept<C: Intercepted>(ra: *const c_void, call: C) -> c_int {
    halo::post_deferred();
    if !runtime::enabled()
        || runtime::process().is_none()
        || !mpi::are_valid(call.comm(), &call.datatypes())
    {
        return call.native();
    }
    let call = call.checked();
    let (key, entry) = keys::find(call.key(ra as usize), |_| call.describe());
    dispatch(&call, key, entry)
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
    let call = Allreduce {
        sendbuf,
        recvbuf,
        count,
        datatype,
        op,
        comm,
        large: large != 0,
    };
    intercept(ra, call)
}

impl Intercepted for Allreduce {
    fn datatypes(&self) -> [MPI_Datatype; 2] {
        [self.datatype, self.datatype]
    }

    fn key(&self, caller: usize) -> CallKey {
        CallKey {
            caller,
            op: Op::Allreduce,
            words: [
                self.comm.bits() as u64,
                self.count as u64,
                self.datatype.bits() as u64,
                self.op.bits() as u64,
                u64::from(mpi::is_in_place(self.sendbuf)),
            ],
        }
    }

    fn describe(&self) -> Description {
        let facts = self.facts().agreed();
        let size = mpi::comm_size(self.comm);
        let in_place = if mpi::is_in_place(self.sendbuf) {
            " in_place"
        } else {
            ""
        };
        let signature = format!(
            "count={} datatype={} op={} comm_size={size}{in_place}",
            self.count,
            mpi::type_name(self.datatype),
            mpi::op_name(self.op),
        );
        Description {
            agree: format!(
                "bytes={} op={} comm_size={size}{in_place} {}",
                class_name(self.bytes()),
                mpi::op_name(self.op),
                facts
            ),
            merge_key: signature.clone(),
            signature,
            facts,
            bytes_per_call: self.bytes(),
            class: None,
            handles: keys::freeable(self.comm, &[self.datatype], Some(self.op)),
        }
    }
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
    intercept(ra, call)
}

/// The send side as a signature reads it.
fn send_side(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype) -> String {
    if mpi::is_in_place(sendbuf) {
        "in_place".to_string()
    } else {
        format!(
            "sendcount={sendcount} sendtype={}",
            mpi::type_name(sendtype)
        )
    }
}

/// The send type as the library reads it: in place, `recvtype`, since MPI ignores the send type
/// then and each rank may pass anything, MPI_DATATYPE_NULL on some ranks only.
fn send_type(
    sendbuf: *const c_void,
    sendtype: MPI_Datatype,
    recvtype: MPI_Datatype,
) -> MPI_Datatype {
    if mpi::is_in_place(sendbuf) {
        recvtype
    } else {
        sendtype
    }
}

/// The send count and type as a key reads them: in place, neither is read (MPI ignores them, and
/// ranks may pass anything).
fn send_words(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype) -> [u64; 2] {
    if mpi::is_in_place(sendbuf) {
        [u64::MAX; 2]
    } else {
        [sendcount as u64, sendtype.bits() as u64]
    }
}

impl Intercepted for Alltoall {
    fn datatypes(&self) -> [MPI_Datatype; 2] {
        [
            send_type(self.sendbuf, self.sendtype, self.recvtype),
            self.recvtype,
        ]
    }

    fn key(&self, caller: usize) -> CallKey {
        let [sendcount, sendtype] = send_words(self.sendbuf, self.sendcount, self.sendtype);
        CallKey {
            caller,
            op: Op::Alltoall,
            words: [
                self.comm.bits() as u64,
                sendcount,
                sendtype,
                self.recvcount as u64,
                self.recvtype.bits() as u64,
            ],
        }
    }

    fn describe(&self) -> Description {
        let facts = self.facts().agreed();
        let size = mpi::group_size(self.comm);
        let signature = format!(
            "{} recvcount={} recvtype={} comm_size={size}",
            send_side(self.sendbuf, self.sendcount, self.sendtype),
            self.recvcount,
            mpi::type_name(self.recvtype)
        );
        Description {
            agree: format!(
                "block_bytes={} comm_size={size} {}",
                class_name((self.recvcount * mpi::type_size(self.recvtype)).max(0) as u64),
                facts
            ),
            merge_key: signature.clone(),
            signature,
            facts,
            bytes_per_call: self.bytes(i64::from(size)),
            class: None,
            handles: keys::freeable(self.comm, &self.datatypes(), None),
        }
    }
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
    intercept(ra, call)
}

impl Intercepted for Allgatherv {
    fn datatypes(&self) -> [MPI_Datatype; 2] {
        [
            send_type(self.sendbuf, self.sendtype, self.recvtype),
            self.recvtype,
        ]
    }

    fn checked(self) -> Self {
        // One entry per rank of the (remote, for an intercommunicator) group.
        let size = mpi::group_size(self.comm).max(0) as usize;
        // SAFETY: MPI requires recvcounts and displs to hold one entry per rank of that group.
        unsafe {
            Allgatherv {
                recvcounts: self.recvcounts.readable(size),
                displs: self.displs.readable(size),
                ..self
            }
        }
    }

    fn key(&self, caller: usize) -> CallKey {
        let mut layout = FxHasher::default();
        for i in 0..self.recvcounts.entries() {
            layout.write_i64(self.recvcounts.get(i));
            layout.write_i64(self.displs.get(i));
        }
        let [sendcount, sendtype] = send_words(self.sendbuf, self.sendcount, self.sendtype);
        CallKey {
            caller,
            op: Op::Allgatherv,
            words: [
                self.comm.bits() as u64,
                sendcount,
                sendtype,
                self.recvtype.bits() as u64,
                layout.finish(),
            ],
        }
    }

    fn describe(&self) -> Description {
        let facts = self.facts().agreed();
        let size = self.recvcounts.entries();
        let counts: Vec<i64> = (0..size).map(|i| self.recvcounts.get(i)).collect();
        let merge_key = format!(
            "recvcounts={} recvtype={} comm_size={size}",
            summarize_counts(&counts),
            mpi::type_name(self.recvtype)
        );
        let bytes: Vec<i64> = counts
            .iter()
            .map(|c| c * mpi::type_size(self.recvtype))
            .collect();
        Description {
            agree: format!(
                "recvbytes={} largest={} comm_size={size} {}",
                class_name(bytes.iter().sum::<i64>().max(0) as u64),
                class_name(bytes.iter().copied().max().unwrap_or(0).max(0) as u64),
                facts
            ),
            signature: format!(
                "{} {merge_key}",
                send_side(self.sendbuf, self.sendcount, self.sendtype)
            ),
            merge_key,
            facts,
            bytes_per_call: self.bytes(size),
            class: None,
            handles: keys::freeable(self.comm, &self.datatypes(), None),
        }
    }
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
