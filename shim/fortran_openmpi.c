/* Open MPI Fortran entry points (mpif.h, `use mpi`, `use mpi_f08`).
 *
 * Open MPI's Fortran layer calls PMPI_* directly, so the C wrappers never see Fortran programs.
 * Each call is defined once as ompi_<name>_f (what the mpi_f08 module calls) and aliased to the
 * four mpif.h spellings; handles are converted with the f2c/c2f functions and the Fortran
 * sentinels (MPI_IN_PLACE, MPI_BOTTOM, MPI_STATUS(ES)_IGNORE) are recognised like Open MPI does. */
#include <stdlib.h>

#include <mpif-c-constants-decl.h>

#include "commtune.h"

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER arrays are passed as int arrays");

/* MPI_STATUS_SIZE of mpif-config.h: a Fortran status is a C MPI_Status laid out as integers. */
#define FORTRAN_STATUS_SIZE 6
_Static_assert(sizeof(MPI_Status) == FORTRAN_STATUS_SIZE * sizeof(MPI_Fint), "status layout");

#define FORTRAN_ALIASES(lower, upper)                                                      \
    __typeof__(ompi_##lower##_f) mpi_##lower __attribute__((alias("ompi_" #lower "_f")));   \
    __typeof__(ompi_##lower##_f) mpi_##lower##_ __attribute__((alias("ompi_" #lower "_f")));  \
    __typeof__(ompi_##lower##_f) mpi_##lower##__ __attribute__((alias("ompi_" #lower "_f"))); \
    __typeof__(ompi_##lower##_f) MPI_##upper __attribute__((alias("ompi_" #lower "_f")));

static void *buffer_c(void *p)
{
    if (OMPI_IS_FORTRAN_IN_PLACE(p)) return MPI_IN_PLACE;
    if (OMPI_IS_FORTRAN_BOTTOM(p)) return MPI_BOTTOM;
    return p;
}

static void set_ierr(MPI_Fint *ierr, int rc)
{
    if (ierr != NULL) *ierr = (MPI_Fint)rc;
}

void ompi_init_f(MPI_Fint *ierr)
{
    int argc = 0;
    char **argv = NULL;
    set_ierr(ierr, commtune_init(&argc, &argv, -1, NULL));
}
FORTRAN_ALIASES(init, INIT)

void ompi_init_thread_f(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    int argc = 0;
    char **argv = NULL;
    int c_provided = 0;
    int rc = commtune_init(&argc, &argv, *required, &c_provided);
    if (rc == MPI_SUCCESS) *provided = c_provided;
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(init_thread, INIT_THREAD)

void ompi_finalize_f(MPI_Fint *ierr) { set_ierr(ierr, commtune_finalize()); }
FORTRAN_ALIASES(finalize, FINALIZE)

void ompi_allreduce_f(char *sendbuf, char *recvbuf, MPI_Fint *count, MPI_Fint *datatype,
                      MPI_Fint *op, MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, commtune_allreduce(CALLER, 0, buffer_c(sendbuf), buffer_c(recvbuf), *count,
                                      PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                                      PMPI_Comm_f2c(*comm)));
}
FORTRAN_ALIASES(allreduce, ALLREDUCE)

void ompi_alltoall_f(char *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, char *recvbuf,
                     MPI_Fint *recvcount, MPI_Fint *recvtype, MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, commtune_alltoall(CALLER, 0, buffer_c(sendbuf), *sendcount,
                                     PMPI_Type_f2c(*sendtype), buffer_c(recvbuf), *recvcount,
                                     PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm)));
}
FORTRAN_ALIASES(alltoall, ALLTOALL)

void ompi_allgatherv_f(char *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, char *recvbuf,
                       MPI_Fint *recvcounts, MPI_Fint *displs, MPI_Fint *recvtype,
                       MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, commtune_allgatherv(CALLER, 0, buffer_c(sendbuf), *sendcount,
                                       PMPI_Type_f2c(*sendtype), buffer_c(recvbuf), recvcounts,
                                       displs, PMPI_Type_f2c(*recvtype),
                                       PMPI_Comm_f2c(*comm)));
}
FORTRAN_ALIASES(allgatherv, ALLGATHERV)

void ompi_isend_f(char *buf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *dest, MPI_Fint *tag,
                  MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
    MPI_Request c_request;
    int rc = commtune_isend(CALLER, 0, buffer_c(buf), *count, PMPI_Type_f2c(*datatype), *dest,
                            *tag, PMPI_Comm_f2c(*comm), &c_request);
    if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(c_request);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(isend, ISEND)

void ompi_irecv_f(char *buf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *source,
                  MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
    MPI_Request c_request;
    int rc = commtune_irecv(CALLER, 0, buffer_c(buf), *count, PMPI_Type_f2c(*datatype), *source,
                            *tag, PMPI_Comm_f2c(*comm), &c_request);
    if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(c_request);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(irecv, IRECV)

void ompi_wait_f(MPI_Fint *request, MPI_Fint *status, MPI_Fint *ierr)
{
    MPI_Request c_request = PMPI_Request_f2c(*request);
    MPI_Status c_status;
    int rc = commtune_wait(CALLER, &c_request, &c_status);
    if (rc == MPI_SUCCESS) {
        *request = PMPI_Request_c2f(c_request);
        if (!OMPI_IS_FORTRAN_STATUS_IGNORE(status)) PMPI_Status_c2f(&c_status, status);
    }
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(wait, WAIT)

void ompi_waitall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *statuses, MPI_Fint *ierr)
{
    int n = *count;
    if (n <= 0) {
        set_ierr(ierr, commtune_waitall(CALLER, 0, NULL, MPI_STATUSES_IGNORE));
        return;
    }
    MPI_Request *c_requests = malloc(n * sizeof(MPI_Request));
    MPI_Status *c_statuses = malloc(n * sizeof(MPI_Status));
    if (c_requests == NULL || c_statuses == NULL) {
        free(c_requests);
        free(c_statuses);
        set_ierr(ierr, MPI_ERR_NO_MEM);
        return;
    }
    for (int i = 0; i < n; i++) c_requests[i] = PMPI_Request_f2c(requests[i]);
    int rc = commtune_waitall(CALLER, n, c_requests, c_statuses);
    if (rc == MPI_SUCCESS) {
        for (int i = 0; i < n; i++) {
            requests[i] = PMPI_Request_c2f(c_requests[i]);
            if (!OMPI_IS_FORTRAN_STATUSES_IGNORE(statuses))
                PMPI_Status_c2f(&c_statuses[i], &statuses[i * FORTRAN_STATUS_SIZE]);
        }
    }
    free(c_requests);
    free(c_statuses);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(waitall, WAITALL)
