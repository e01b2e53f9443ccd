/* Collectives whose ranks differ in what the tuner sees: ranks reaching the same collective from
 * different call sites (always, or only sometimes, as in hpcc), ranks calling it with different
 * datatypes of one type signature, and a call made only twice. The MPI standard only promises
 * that the instances match, so the tuner agrees on operation and bytes, not on sites: no
 * deadlock, correct results, one choice for each set of matching calls.
 * usage: mismatch [iterations (default 200)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 200;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_DOUBLE, &pair);
    MPI_Type_commit(&pair);
    double *block = malloc(2 * size * sizeof(double)), *blocks = malloc(2 * size * sizeof(double));
    for (int it = 0; it < iterations; it++) {
        double in[2] = {rank, it}, out[2] = {0, 0};
        if (rank == 0)
            MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:rank0 */
        else
            MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:others */
        if (out[0] != size * (size - 1) / 2.0 || out[1] != (double)it * size) failures++;
        /* One line, but rank 0 sends blocks of 2 doubles and the others blocks of 1 pair. */
        for (int p = 0; p < size; p++) {
            block[2 * p] = rank;
            block[2 * p + 1] = p + it;
        }
        /* Rank 0 takes another line every third iteration: the instances still match. */
        double x = rank, y = 0;
        if (rank == 0 && it % 3 == 0)
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:sometimes_b */
        else
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:sometimes_a */
        if (y != size * (size - 1) / 2.0) failures++;
        int count = rank == 0 ? 2 : 1;
        MPI_Datatype type = rank == 0 ? MPI_DOUBLE : pair;
        MPI_Alltoall(block, count, type, blocks, count, type, MPI_COMM_WORLD); /* SITE:signature */
        for (int p = 0; p < size; p++)
            if (blocks[2 * p] != p || blocks[2 * p + 1] != rank + it) failures++;
    }
    for (int it = 0; it < 2; it++) {
        int v = rank, sum = 0;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:twice */
        if (sum != size * (size - 1) / 2) failures++;
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "mismatch: results correct\n" : "mismatch: %d WRONG RESULTS\n", total);
    MPI_Type_free(&pair);
    free(block);
    free(blocks);
    MPI_Finalize();
    return failures != 0;
}
