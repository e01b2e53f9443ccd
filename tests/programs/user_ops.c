/* Two MPI_Allreduce sites with the same bytes and communicator: one with a commutative user
 * operation, one with a non-commutative one (keep the left operand: the result is rank 0's
 * vector). Codelets that reorder operands may run the first, never the second, even when the
 * tuner searches both together. Rank 0 prints "user_ops: results correct".
 * usage: user_ops [iterations (default 200)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 64

static void add(void *in, void *inout, int *len, MPI_Datatype *type)
{
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] += ((double *)in)[i];
}

static void keep_left(void *in, void *inout, int *len, MPI_Datatype *type)
{
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] = ((double *)in)[i];
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 200;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op sum, first;
    MPI_Op_create(add, 1, &sum);
    MPI_Op_create(keep_left, 0, &first);
    double in[N], out[N];
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < N; i++)
            in[i] = rank * 1000 + it + i;
        MPI_Allreduce(in, out, N, MPI_DOUBLE, sum, MPI_COMM_WORLD); /* SITE:commutative */
        for (int i = 0; i < N; i++)
            if (out[i] != 1000.0 * size * (size - 1) / 2 + (double)size * (it + i)) failures++;
        MPI_Allreduce(in, out, N, MPI_DOUBLE, first, MPI_COMM_WORLD); /* SITE:ordered */
        for (int i = 0; i < N; i++)
            if (out[i] != it + i) failures++;
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "user_ops: results correct\n" : "user_ops: %d WRONG RESULTS\n", total);
    MPI_Op_free(&sum);
    MPI_Op_free(&first);
    MPI_Finalize();
    return total != 0;
}
