/* An alltoall that MPI itself rejects: in place, of large MPI_DOUBLE_INT blocks, which MPICH 4.0.2
 * fails with "Message truncated" on every rank. The same call is made natively first (PMPI, on a
 * duplicate of the communicator), then through the library; with MPI_ERRORS_RETURN each rank
 * prints both error classes. Whatever codelet runs the call must return without waiting for
 * peers that gave up (a throttled codelet waited forever for its cancelled sends).
 * Prints "codelet_error: rank R native CLASS tool CLASS" per rank.
 * usage: codelet_error [elements per block (default 100000)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

struct double_int {
    double d;
    int i;
};

static int error_class(int rc)
{
    int class = rc;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    return class;
}

static void fill(struct double_int *buf, long n, int rank)
{
    for (long i = 0; i < n; i++) {
        buf[i].d = rank + 0.5 * i;
        buf[i].i = (int)i;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int block = argc > 1 ? atoi(argv[1]) : 100000;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm reference;
    MPI_Comm_dup(MPI_COMM_WORLD, &reference);
    MPI_Comm_set_errhandler(reference, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    long n = (long)block * size;
    struct double_int *buf = malloc(n * sizeof *buf);
    fill(buf, n, rank);
    int native = error_class(PMPI_Alltoall(MPI_IN_PLACE, block, MPI_DOUBLE_INT, buf, block,
                                           MPI_DOUBLE_INT, reference));
    fill(buf, n, rank);
    int tool = error_class(MPI_Alltoall(MPI_IN_PLACE, block, MPI_DOUBLE_INT, buf, block,
                                        MPI_DOUBLE_INT, MPI_COMM_WORLD)); /* SITE:alltoall */
    printf("codelet_error: rank %d native %d tool %d\n", rank, native, tool);
    free(buf);
    MPI_Comm_free(&reference);
    MPI_Finalize();
    return 0;
}
