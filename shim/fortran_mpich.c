/* MPICH Fortran entry points. MPICH's Fortran bindings call the C MPI_* functions, so the C
 * wrappers see them, except where `use mpi_f08` calls PMPI directly: MPI_Init and
 * MPI_Init_thread (the library is told that the program makes calls it cannot see: MPI_Barrier,
 * MPI_Probe, MPI_Request_free and more go to PMPI too), MPI_Finalize (the report would wait for
 * the at-exit fallback) and the Wait and Test families (halo episodes would never close). An
 * f08 TYPE(MPI_Request) and TYPE(MPI_Status) have the C layout in MPICH, LOGICAL is an int
 * (gfortran's .TRUE. is 1) and indices count from 1. */
#include "commtune.h"

_Static_assert(sizeof(MPI_Request) == sizeof(int), "f08 MPI_Request holds the C handle");
_Static_assert(sizeof(MPI_Comm) == sizeof(int), "f08 MPI_Comm holds the C handle");


void mpi_finalize_f08_(int *ierror)
{
    int rc = commtune_finalize();
    if (ierror != NULL) *ierror = rc;
}

/* `use mpi_f08`'s MPI_Abort calls PMPI_Abort directly too (mpif.h and `use mpi` call MPI_Abort).
 * An f08 TYPE(MPI_Comm) holds the C handle. */
void mpi_abort_f08_(MPI_Comm *comm, int *errorcode, int *ierror)
{
    int rc = commtune_abort(*comm, *errorcode);
    if (ierror != NULL) *ierror = rc;
}


void mpi_init_f08_(int *ierror)
{
    int rc = commtune_init_f08(-1, NULL);
    if (ierror != NULL) *ierror = rc;
}

void mpi_init_thread_f08_(int *required, int *provided, int *ierror)
{
    int rc = commtune_init_f08(*required, provided);
    if (ierror != NULL) *ierror = rc;
}

static int index_f(int c) { return c == MPI_UNDEFINED ? c : c + 1; }

static MPI_Status *status_c(MPI_Status *status)
{
    return (void *)status == (void *)MPI_F08_STATUS_IGNORE ? MPI_STATUS_IGNORE : status;
}

static MPI_Status *statuses_c(MPI_Status *statuses)
{
    return (void *)statuses == (void *)MPI_F08_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : statuses;
}

static void set_ierror(int *ierror, int rc)
{
    if (ierror != NULL) *ierror = rc;
}

void mpi_waitany_f08_(int *count, MPI_Request *requests, int *index, MPI_Status *status,
                      int *ierror)
{
    int rc = commtune_waitany(CALLER, *count, requests, index, status_c(status));
    if (rc == MPI_SUCCESS) *index = index_f(*index);
    set_ierror(ierror, rc);
}

void mpi_waitsome_f08_(int *incount, MPI_Request *requests, int *outcount, int *indices,
                       MPI_Status *statuses, int *ierror)
{
    int rc = commtune_waitsome(CALLER, *incount, requests, outcount, indices, statuses_c(statuses));
    if (rc == MPI_SUCCESS)
        for (int i = 0; i < *outcount; i++) indices[i] = index_f(indices[i]);
    set_ierror(ierror, rc);
}

void mpi_test_f08_(MPI_Request *request, int *flag, MPI_Status *status, int *ierror)
{
    int c_flag = 0;
    int rc = commtune_test(CALLER, request, &c_flag, status_c(status));
    if (rc == MPI_SUCCESS) *flag = c_flag != 0;
    set_ierror(ierror, rc);
}

void mpi_testall_f08_(int *count, MPI_Request *requests, int *flag, MPI_Status *statuses,
                      int *ierror)
{
    int c_flag = 0;
    int rc = commtune_testall(CALLER, *count, requests, &c_flag, statuses_c(statuses));
    if (rc == MPI_SUCCESS) *flag = c_flag != 0;
    set_ierror(ierror, rc);
}

void mpi_testany_f08_(int *count, MPI_Request *requests, int *index, int *flag,
                      MPI_Status *status, int *ierror)
{
    int c_flag = 0;
    int rc = commtune_testany(CALLER, *count, requests, index, &c_flag, status_c(status));
    if (rc == MPI_SUCCESS) {
        *flag = c_flag != 0;
        *index = index_f(*index);
    }
    set_ierror(ierror, rc);
}

void mpi_testsome_f08_(int *incount, MPI_Request *requests, int *outcount, int *indices,
                       MPI_Status *statuses, int *ierror)
{
    int rc = commtune_testsome(CALLER, *incount, requests, outcount, indices, statuses_c(statuses));
    if (rc == MPI_SUCCESS)
        for (int i = 0; i < *outcount; i++) indices[i] = index_f(indices[i]);
    set_ierror(ierror, rc);
}

void mpi_wait_f08_(MPI_Request *request, MPI_Status *status, int *ierror)
{
    set_ierror(ierror, commtune_wait(CALLER, request, status_c(status)));
}

void mpi_waitall_f08_(int *count, MPI_Request *requests, MPI_Status *statuses, int *ierror)
{
    set_ierror(ierror, commtune_waitall(CALLER, *count, requests, statuses_c(statuses)));
}
