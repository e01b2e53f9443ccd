/* Calls that look different on one rank only, as the standard allows: an alltoall whose
 * datatype is created every iteration (rank 0 frees it one iteration late, so its handles
 * alternate while the other ranks reuse one), and an allgatherv whose displacements (local to
 * each rank) alternate on rank 0. The tuner must treat each as one key on every rank: no
 * deadlock, correct results, tuned.
 * usage: local_variants [iterations (default 400)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 400;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *send = malloc(4 * size * sizeof(int)), *recv = malloc(4 * size * sizeof(int));
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    double mine[8], *all = malloc((8 * size + 1) * sizeof(double));
    MPI_Datatype previous = MPI_DATATYPE_NULL;
    for (int it = 0; it < iterations; it++) {
        MPI_Datatype four;
        MPI_Type_contiguous(4, MPI_INT, &four);
        MPI_Type_commit(&four);
        for (int i = 0; i < 4 * size; i++) send[i] = rank * 1000 + i + it;
        MPI_Alltoall(send, 1, four, recv, 1, four, MPI_COMM_WORLD); /* SITE:alltoall */
        for (int p = 0; p < size; p++)
            for (int k = 0; k < 4; k++)
                if (recv[4 * p + k] != p * 1000 + 4 * rank + k + it) failures++;
        if (rank == 0) {
            if (previous != MPI_DATATYPE_NULL) MPI_Type_free(&previous);
            previous = four;
        } else {
            MPI_Type_free(&four);
        }
        int shift = rank == 0 && it % 2 ? 1 : 0;
        for (int p = 0; p < size; p++) {
            counts[p] = 8;
            displs[p] = 8 * p + shift;
        }
        for (int i = 0; i < 8; i++) mine[i] = rank * 100 + i + it;
        MPI_Allgatherv(mine, 8, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD); /* SITE:allgatherv */
        for (int p = 0; p < size; p++)
            for (int i = 0; i < 8; i++)
                if (all[displs[p] + i] != p * 100 + i + it) failures++;
    }
    if (previous != MPI_DATATYPE_NULL) MPI_Type_free(&previous);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "local_variants: results correct\n" : "local_variants: %d WRONG RESULTS\n", total);
    free(send); free(recv); free(counts); free(displs); free(all);
    MPI_Finalize();
    return failures != 0;
}
