/* MPICH Fortran entry points. MPICH's Fortran bindings call the C MPI_* functions, so the C
 * wrappers see them, except where `use mpi_f08` calls PMPI directly: MPI_Finalize (the report
 * would wait for the at-exit fallback) and MPI_Wait/MPI_Waitall (halo episodes would never
 * close). An f08 TYPE(MPI_Request) and TYPE(MPI_Status) have the C layout in MPICH. */
#include "commtune.h"

_Static_assert(sizeof(MPI_Request) == sizeof(int), "f08 MPI_Request holds the C handle");


void mpi_finalize_f08_(int *ierror)
{
    int rc = commtune_finalize();
    if (ierror != NULL) *ierror = rc;
}

void mpi_wait_f08_(MPI_Request *request, MPI_Status *status, int *ierror)
{
    if ((void *)status == (void *)MPI_F08_STATUS_IGNORE) status = MPI_STATUS_IGNORE;
    int rc = commtune_wait(CALLER, request, status);
    if (ierror != NULL) *ierror = rc;
}

void mpi_waitall_f08_(int *count, MPI_Request *requests, MPI_Status *statuses, int *ierror)
{
    if ((void *)statuses == (void *)MPI_F08_STATUSES_IGNORE) statuses = MPI_STATUSES_IGNORE;
    int rc = commtune_waitall(CALLER, *count, requests, statuses);
    if (ierror != NULL) *ierror = rc;
}
