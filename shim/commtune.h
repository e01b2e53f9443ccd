/* The Rust entry points behind the shim (src/interpose). Every tuned or observed call enters
 * Rust with the application's return address; `large` marks the MPI-4 `_c` (MPI_Count)
 * variants, whose count and displacement arrays are MPI_Count / MPI_Aint instead of int. */
#ifndef COMMTUNE_SHIM_H
#define COMMTUNE_SHIM_H

#include <stddef.h>

#include <mpi.h>

#define CALLER __builtin_return_address(0)

/* Nonzero while halo operations wait to be posted (src/halo/deferred.rs). Every MPI entry point
 * posts them before anything else, so that no call can block while they wait. */
extern int commtune_deferred_pending;
void commtune_post_deferred(void);
#define COMMTUNE_POST_DEFERRED()                                                                  \
    do {                                                                                          \
        if (__atomic_load_n(&commtune_deferred_pending, __ATOMIC_ACQUIRE))                        \
            commtune_post_deferred();                                                             \
    } while (0)

int commtune_init(int *argc, char ***argv, int required, int *provided);
/* MPI_Init (required < 0) or MPI_Init_thread through MPICH's `use mpi_f08` bindings. */
int commtune_init_f08(int required, int *provided);
int commtune_finalize(void);
/* Writes what this rank measured (no communication, bounded wait), then calls PMPI_Abort. */
int commtune_abort(MPI_Comm comm, int errorcode);

int commtune_allreduce(void *ra, int large, const void *sendbuf, void *recvbuf, MPI_Count count,
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int commtune_alltoall(void *ra, int large, const void *sendbuf, MPI_Count sendcount,
                      MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,
                      MPI_Datatype recvtype, MPI_Comm comm);
int commtune_allgatherv(void *ra, int large, const void *sendbuf, MPI_Count sendcount,
                        MPI_Datatype sendtype, void *recvbuf, const void *recvcounts,
                        const void *displs, MPI_Datatype recvtype, MPI_Comm comm);

/* Frees a reduction operation; keys described with it are described again at their next call
 * (MPI may give its handle to a new operation). */
int commtune_op_free(MPI_Op *op);

/* Not tuned: a point where every rank of `comm` is inside the same call (halo agreement). */
int commtune_barrier(MPI_Comm comm);

int commtune_isend(void *ra, int large, const void *buf, MPI_Count count, MPI_Datatype datatype,
                   int dest, int tag, MPI_Comm comm, MPI_Request *request);
int commtune_irecv(void *ra, int large, void *buf, MPI_Count count, MPI_Datatype datatype,
                   int source, int tag, MPI_Comm comm, MPI_Request *request);

/* Completion calls: Wait/Waitall close halo episodes; the rest only tell the episode tracker
 * which of its requests completed, so that episodes never wait for a request already gone. */
int commtune_wait(void *ra, MPI_Request *request, MPI_Status *status);
int commtune_waitall(void *ra, int count, MPI_Request *requests, MPI_Status *statuses);
int commtune_waitany(void *ra, int count, MPI_Request *requests, int *index, MPI_Status *status);
int commtune_waitsome(void *ra, int incount, MPI_Request *requests, int *outcount, int *indices,
                      MPI_Status *statuses);
int commtune_test(void *ra, MPI_Request *request, int *flag, MPI_Status *status);
int commtune_testall(void *ra, int count, MPI_Request *requests, int *flag, MPI_Status *statuses);
int commtune_testany(void *ra, int count, MPI_Request *requests, int *index, int *flag,
                     MPI_Status *status);
int commtune_testsome(void *ra, int incount, MPI_Request *requests, int *outcount, int *indices,
                      MPI_Status *statuses);
int commtune_request_free(void *ra, MPI_Request *request);
int commtune_request_get_status(MPI_Request request, int *flag, MPI_Status *status);

/* MPI constants that mpi-sys does not provide, exported with this flavour's values. */
struct commtune_mpi_constants {
    void *in_place;
    void *bottom;
    MPI_Datatype byte;
    MPI_Datatype packed;
    MPI_Op maxloc;
    MPI_Op minloc;
    MPI_Op replace;
    MPI_Op no_op;
    MPI_Op op_null;
    int combiner_named;
    int version;
    int subversion;
};

/* Return addresses of the calling thread's stack, innermost first. */
int commtune_backtrace(void **frames, int max);
#endif
