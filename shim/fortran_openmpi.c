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

/* Open MPI's mpi_f08 Test family calls the Fortran profiling symbols pmpi_test_, ... instead of
 * ompi_test_f: without these, episodes completed by MPI_Test* in mpi_f08 programs never close. */
#define F08_TEST_ALIAS(lower) \
    __typeof__(ompi_##lower##_f) pmpi_##lower##_ __attribute__((alias("ompi_" #lower "_f")));

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

void ompi_abort_f(MPI_Fint *comm, MPI_Fint *errorcode, MPI_Fint *ierr)
{
    set_ierr(ierr, commtune_abort(PMPI_Comm_f2c(*comm), *errorcode));
}
FORTRAN_ALIASES(abort, ABORT)

void ompi_op_free_f(MPI_Fint *op, MPI_Fint *ierr)
{
    MPI_Op c_op = PMPI_Op_f2c(*op);
    int rc = commtune_op_free(&c_op);
    if (rc == MPI_SUCCESS) *op = PMPI_Op_c2f(c_op);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(op_free, OP_FREE)

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

/* gfortran's .TRUE. */
#define FORTRAN_TRUE 1

static void status_f(const MPI_Status *c, MPI_Fint *f)
{
    if (!OMPI_IS_FORTRAN_STATUS_IGNORE(f)) PMPI_Status_c2f(c, f);
}

static void statuses_f(int n, const MPI_Status *c, MPI_Fint *f)
{
    if (OMPI_IS_FORTRAN_STATUSES_IGNORE(f)) return;
    for (int i = 0; i < n; i++) PMPI_Status_c2f(&c[i], &f[i * FORTRAN_STATUS_SIZE]);
}

/* A request array as C handles, with room for as many statuses (one allocation, freed by
 * free(requests)); NULL when out of memory. */
static MPI_Request *requests_c(int n, const MPI_Fint *f, MPI_Status **statuses)
{
    size_t slots = n > 0 ? (size_t)n : 1;
    MPI_Request *c = malloc(slots * (sizeof(MPI_Request) + sizeof(MPI_Status)));
    if (c == NULL) return NULL;
    for (int i = 0; i < n; i++) c[i] = PMPI_Request_f2c(f[i]);
    *statuses = (MPI_Status *)(c + slots);
    return c;
}

static void requests_f(int n, const MPI_Request *c, MPI_Fint *f)
{
    for (int i = 0; i < n; i++) f[i] = PMPI_Request_c2f(c[i]);
}

/* Fortran indices count from 1; MPI_UNDEFINED stays. */
static MPI_Fint index_f(int c) { return c == MPI_UNDEFINED ? c : c + 1; }

void ompi_wait_f(MPI_Fint *request, MPI_Fint *status, MPI_Fint *ierr)
{
    MPI_Request c_request = PMPI_Request_f2c(*request);
    MPI_Status c_status;
    int rc = commtune_wait(CALLER, &c_request, &c_status);
    if (rc == MPI_SUCCESS) {
        *request = PMPI_Request_c2f(c_request);
        status_f(&c_status, status);
    }
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(wait, WAIT)

void ompi_waitall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *statuses, MPI_Fint *ierr)
{
    MPI_Status *c_statuses = NULL;
    MPI_Request *c_requests = requests_c(*count, requests, &c_statuses);
    if (c_requests == NULL) return set_ierr(ierr, MPI_ERR_NO_MEM);
    int rc = commtune_waitall(CALLER, *count, c_requests, c_statuses);
    if (rc == MPI_SUCCESS) {
        requests_f(*count, c_requests, requests);
        statuses_f(*count, c_statuses, statuses);
    }
    free(c_requests);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(waitall, WAITALL)

void ompi_waitany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, MPI_Fint *status,
                    MPI_Fint *ierr)
{
    MPI_Status *unused = NULL, c_status;
    MPI_Request *c_requests = requests_c(*count, requests, &unused);
    if (c_requests == NULL) return set_ierr(ierr, MPI_ERR_NO_MEM);
    int c_index = MPI_UNDEFINED;
    int rc = commtune_waitany(CALLER, *count, c_requests, &c_index, &c_status);
    if (rc == MPI_SUCCESS) {
        requests_f(*count, c_requests, requests);
        *index = index_f(c_index);
        status_f(&c_status, status);
    }
    free(c_requests);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(waitany, WAITANY)

/* Waitsome and Testsome: the same arguments and conversions around a different Rust entry. */
typedef int (*some_fn)(void *ra, int incount, MPI_Request *requests, int *outcount, int *indices,
                       MPI_Status *statuses);

static void some_f(some_fn call, void *ra, MPI_Fint *incount, MPI_Fint *requests,
                   MPI_Fint *outcount, MPI_Fint *indices, MPI_Fint *statuses, MPI_Fint *ierr)
{
    MPI_Status *c_statuses = NULL;
    MPI_Request *c_requests = requests_c(*incount, requests, &c_statuses);
    int *c_indices = malloc((*incount > 0 ? *incount : 1) * sizeof(int));
    if (c_requests == NULL || c_indices == NULL) {
        free(c_requests);
        free(c_indices);
        return set_ierr(ierr, MPI_ERR_NO_MEM);
    }
    int c_outcount = MPI_UNDEFINED;
    int rc = call(ra, *incount, c_requests, &c_outcount, c_indices, c_statuses);
    if (rc == MPI_SUCCESS) {
        requests_f(*incount, c_requests, requests);
        *outcount = c_outcount;
        for (int i = 0; i < c_outcount; i++) indices[i] = index_f(c_indices[i]);
        if (c_outcount != MPI_UNDEFINED) statuses_f(c_outcount, c_statuses, statuses);
    }
    free(c_requests);
    free(c_indices);
    set_ierr(ierr, rc);
}

void ompi_waitsome_f(MPI_Fint *incount, MPI_Fint *requests, MPI_Fint *outcount,
                     MPI_Fint *indices, MPI_Fint *statuses, MPI_Fint *ierr)
{
    some_f(commtune_waitsome, CALLER, incount, requests, outcount, indices, statuses, ierr);
}
FORTRAN_ALIASES(waitsome, WAITSOME)

void ompi_test_f(MPI_Fint *request, MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr)
{
    MPI_Request c_request = PMPI_Request_f2c(*request);
    MPI_Status c_status;
    int c_flag = 0;
    int rc = commtune_test(CALLER, &c_request, &c_flag, &c_status);
    if (rc == MPI_SUCCESS) {
        *request = PMPI_Request_c2f(c_request);
        *flag = c_flag ? FORTRAN_TRUE : 0;
        if (c_flag) status_f(&c_status, status);
    }
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(test, TEST)
F08_TEST_ALIAS(test)

void ompi_testall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *flag, MPI_Fint *statuses,
                    MPI_Fint *ierr)
{
    MPI_Status *c_statuses = NULL;
    MPI_Request *c_requests = requests_c(*count, requests, &c_statuses);
    if (c_requests == NULL) return set_ierr(ierr, MPI_ERR_NO_MEM);
    int c_flag = 0;
    int rc = commtune_testall(CALLER, *count, c_requests, &c_flag, c_statuses);
    if (rc == MPI_SUCCESS) {
        requests_f(*count, c_requests, requests);
        *flag = c_flag ? FORTRAN_TRUE : 0;
        if (c_flag) statuses_f(*count, c_statuses, statuses);
    }
    free(c_requests);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(testall, TESTALL)
F08_TEST_ALIAS(testall)

void ompi_testany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, MPI_Fint *flag,
                    MPI_Fint *status, MPI_Fint *ierr)
{
    MPI_Status *unused = NULL, c_status;
    MPI_Request *c_requests = requests_c(*count, requests, &unused);
    if (c_requests == NULL) return set_ierr(ierr, MPI_ERR_NO_MEM);
    int c_index = MPI_UNDEFINED, c_flag = 0;
    int rc = commtune_testany(CALLER, *count, c_requests, &c_index, &c_flag, &c_status);
    if (rc == MPI_SUCCESS) {
        requests_f(*count, c_requests, requests);
        *index = index_f(c_index);
        *flag = c_flag ? FORTRAN_TRUE : 0;
        if (c_flag) status_f(&c_status, status);
    }
    free(c_requests);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(testany, TESTANY)
F08_TEST_ALIAS(testany)

void ompi_testsome_f(MPI_Fint *incount, MPI_Fint *requests, MPI_Fint *outcount,
                     MPI_Fint *indices, MPI_Fint *statuses, MPI_Fint *ierr)
{
    some_f(commtune_testsome, CALLER, incount, requests, outcount, indices, statuses, ierr);
}
FORTRAN_ALIASES(testsome, TESTSOME)
F08_TEST_ALIAS(testsome)

void ompi_request_free_f(MPI_Fint *request, MPI_Fint *ierr)
{
    MPI_Request c_request = PMPI_Request_f2c(*request);
    int rc = commtune_request_free(CALLER, &c_request);
    if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(c_request);
    set_ierr(ierr, rc);
}
FORTRAN_ALIASES(request_free, REQUEST_FREE)
