/* Constants whose values only this flavour's mpi.h knows. */
#include "commtune.h"

const struct commtune_mpi_constants commtune_mpi_constants = {
    .in_place = MPI_IN_PLACE,
    .bottom = MPI_BOTTOM,
    .byte = MPI_BYTE,
    .packed = MPI_PACKED,
    .maxloc = MPI_MAXLOC,
    .minloc = MPI_MINLOC,
    .replace = MPI_REPLACE,
    .no_op = MPI_NO_OP,
    .op_null = MPI_OP_NULL,
    .combiner_named = MPI_COMBINER_NAMED,
    .version = MPI_VERSION,
    .subversion = MPI_SUBVERSION,
};
