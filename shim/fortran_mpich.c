/* MPICH Fortran entry points. MPICH's Fortran bindings call the C MPI_* functions, so the C
 * wrappers see them, except `use mpi_f08`'s MPI_Finalize, which bypasses MPI_Finalize; without
 * this the report would wait for the at-exit fallback. */
#include "commtune.h"

void mpi_finalize_f08_(int *ierror)
{
    int rc = commtune_finalize();
    if (ierror != NULL) *ierror = rc;
}
