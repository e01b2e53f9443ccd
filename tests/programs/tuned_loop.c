/* An iterative program for the tuner: every iteration makes one MPI_Allreduce, one MPI_Alltoall
 * and one MPI_Allgatherv (each from its own line) and checks the results.
 * usage: tuned_loop [iterations (default 300)] [doubles per allreduce (default 8)]
 *                   [work: microseconds every rank sleeps per iteration, as an application
 *                   computes between its calls (default 0)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 300;
    int n = argc > 2 ? atoi(argv[2]) : 8;
    long work_us = argc > 3 ? atol(argv[3]) : 0;
    struct timespec work = {work_us / 1000000, work_us % 1000000 * 1000};
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
    int *send = malloc(4 * size * sizeof(int)), *recv = malloc(4 * size * sizeof(int));
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), total = 0;
    for (int p = 0; p < size; p++) {
        counts[p] = 2 + p;
        displs[p] = total;
        total += counts[p];
    }
    int *mine = malloc((2 + rank) * sizeof(int)), *all = malloc(total * sizeof(int));
    for (int it = 0; it < iterations; it++) {
        if (work_us > 0) nanosleep(&work, NULL);
        for (int i = 0; i < n; i++) in[i] = rank + i + it;
        MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce */
        for (int i = 0; i < n; i++)
            if (out[i] != size * (size - 1) / 2.0 + (double)size * (i + it)) failures++;
        for (int i = 0; i < 4 * size; i++) send[i] = rank * 10000 + i + it;
        MPI_Alltoall(send, 4, MPI_INT, recv, 4, MPI_INT, MPI_COMM_WORLD); /* SITE:alltoall */
        for (int p = 0; p < size; p++)
            for (int k = 0; k < 4; k++)
                if (recv[4 * p + k] != p * 10000 + 4 * rank + k + it) failures++;
        for (int i = 0; i < 2 + rank; i++) mine[i] = rank * 100 + i + it;
        MPI_Allgatherv(mine, 2 + rank, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD); /* SITE:allgatherv */
        for (int p = 0; p < size; p++)
            for (int k = 0; k < counts[p]; k++)
                if (all[displs[p] + k] != p * 100 + k + it) failures++;
    }
    int total_failures = 0;
    MPI_Reduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total_failures == 0 ? "tuned_loop: results correct\n" : "tuned_loop: %d WRONG RESULTS\n", total_failures);
    MPI_Finalize();
    return failures != 0;
}
