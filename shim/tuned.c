/* C entry points of the calls commtune tunes or observes: capture the caller, enter Rust.
 * Everything else about these calls (classification, timing, fallback to PMPI) is in Rust. */
#include "commtune.h"

int MPI_Init(int *argc, char ***argv) { return commtune_init(argc, argv, -1, NULL); }

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    return commtune_init(argc, argv, required, provided);
}

int MPI_Finalize(void) { return commtune_finalize(); }

int MPI_Abort(MPI_Comm comm, int errorcode) { return commtune_abort(comm, errorcode); }

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm)
{
    return commtune_allreduce(CALLER, 0, sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return commtune_alltoall(CALLER, 0, sendbuf, sendcount, sendtype, recvbuf, recvcount,
                             recvtype, comm);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm)
{
    return commtune_allgatherv(CALLER, 0, sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                               displs, recvtype, comm);
}

int MPI_Barrier(MPI_Comm comm) { return commtune_barrier(comm); }

int MPI_Op_free(MPI_Op *op) { return commtune_op_free(op); }

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm, MPI_Request *request)
{
    return commtune_isend(CALLER, 0, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    return commtune_irecv(CALLER, 0, buf, count, datatype, source, tag, comm, request);
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    return commtune_wait(CALLER, request, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    return commtune_waitall(CALLER, count, requests, statuses);
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    return commtune_waitany(CALLER, count, requests, index, status);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    return commtune_waitsome(CALLER, incount, requests, outcount, indices, statuses);
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    return commtune_test(CALLER, request, flag, status);
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    return commtune_testall(CALLER, count, requests, flag, statuses);
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    return commtune_testany(CALLER, count, requests, index, flag, status);
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    return commtune_testsome(CALLER, incount, requests, outcount, indices, statuses);
}

int MPI_Request_free(MPI_Request *request) { return commtune_request_free(CALLER, request); }

int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status)
{
    return commtune_request_get_status(request, flag, status);
}

#if MPI_VERSION >= 4
/* MPI-4 large-count variants (MPICH 4; mpi4py built against MPICH calls only these). */
int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm)
{
    return commtune_allreduce(CALLER, 1, sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                   void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return commtune_alltoall(CALLER, 1, sendbuf, sendcount, sendtype, recvbuf, recvcount,
                             recvtype, comm);
}

int MPI_Allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                     void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                     MPI_Datatype recvtype, MPI_Comm comm)
{
    return commtune_allgatherv(CALLER, 1, sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                               displs, recvtype, comm);
}

int MPI_Isend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                MPI_Comm comm, MPI_Request *request)
{
    return commtune_isend(CALLER, 1, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                MPI_Comm comm, MPI_Request *request)
{
    return commtune_irecv(CALLER, 1, buf, count, datatype, source, tag, comm, request);
}
#endif
