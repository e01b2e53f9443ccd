/* One call site used alternately on two communicators of the same size, while rank 0 alone varies
 * what does not change the type signature: its allgatherv displacements take 12 values and its
 * receive datatype is a new (equivalent) type every call. Rank 0 thus has more local variants of
 * each signature than the library keeps apart (8); they must never share the tuning of the other
 * communicator (they did, and the ranks disagreed on which instance was searched: a hang).
 * Prints "local_variants_comms: results correct".
 * usage: local_variants_comms [iterations (default 300)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 8

__attribute__((noinline)) static int gather(MPI_Comm comm, int it, int rank, int size, double *all, int *counts, int *displs)
{
    double mine[N];
    MPI_Datatype type = MPI_DOUBLE;
    if (rank == 0) {
        MPI_Type_contiguous(1, MPI_DOUBLE, &type);
        MPI_Type_commit(&type);
    }
    int shift = rank == 0 ? it % 12 : 0;
    for (int p = 0; p < size; p++) {
        counts[p] = N;
        displs[p] = N * p + shift;
    }
    for (int i = 0; i < N; i++) mine[i] = rank * 100 + i + it;
    MPI_Allgatherv(mine, N, MPI_DOUBLE, all, counts, displs, type, comm); /* SITE:allgatherv */
    int failures = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i < N; i++)
            if (all[displs[p] + i] != p * 100 + i + it) failures++;
    if (rank == 0) MPI_Type_free(&type);
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 300;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm comms[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]);
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    double *all = malloc((N * size + 12) * sizeof(double));
    for (int it = 0; it < iterations; it++)
        failures += gather(comms[it % 2], it, rank, size, all, counts, displs);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "local_variants_comms: results correct\n"
                          : "local_variants_comms: %d WRONG RESULTS\n", total);
    MPI_Comm_free(&comms[0]);
    MPI_Comm_free(&comms[1]);
    free(counts); free(displs); free(all);
    MPI_Finalize();
    return total != 0;
}
