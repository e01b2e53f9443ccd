/* A fixed number of calls of one collective, timed as a whole: for comparing the tuner with
 * native and with each codelet forced (scripts/bench-tuner). All calls come from one line, so
 * they are one key for the tuner.
 * usage: tuned allreduce|alltoall <bytes> <calls>
 * Rank 0 prints: SECONDS <slowest rank's time for all calls> */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 4) {
        fprintf(stderr, "usage: tuned allreduce|alltoall <bytes> <calls>\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *op = argv[1];
    long bytes = atol(argv[2]), calls = atol(argv[3]);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = (int)(bytes / 8 > 0 ? bytes / 8 : 1);
    int alltoall = strcmp(op, "alltoall") == 0;
    long elements = alltoall ? (long)n * size : n;
    double *s = malloc(elements * sizeof(double)), *r = malloc(elements * sizeof(double));
    for (long i = 0; i < elements; i++) s[i] = i % 7;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (long i = 0; i < calls; i++) {
        if (alltoall)
            MPI_Alltoall(s, n, MPI_DOUBLE, r, n, MPI_DOUBLE, MPI_COMM_WORLD);
        else
            MPI_Allreduce(s, r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    double mine = MPI_Wtime() - start, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("SECONDS %.6f\n", slowest);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
