/* Allreduces of several sizes from one line, one size after the other, so that the tuner
 * decides the earlier sizes before it meets the later ones; checks the results. A size written
 * dN runs N doubles on a duplicate of MPI_COMM_WORLD: a key of its own for a problem (operation,
 * communicator size, bytes) a size before may have decided.
 * usage: sizes iterations [d]doubles [[d]doubles ...] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iterations = argc > 1 ? atoi(argv[1]) : 300;
    for (int a = 2; a < argc; a++) {
        int dup = argv[a][0] == 'd';
        int n = atoi(argv[a] + dup);
        MPI_Comm comm = MPI_COMM_WORLD;
        if (dup) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
        for (int it = 0; it < iterations; it++) {
            for (int i = 0; i < n; i++) in[i] = rank + i + it;
            MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, comm); /* SITE:allreduce */
            for (int i = 0; i < n; i++)
                if (out[i] != size * (size - 1) / 2.0 + (double)size * (i + it)) failures++;
        }
        if (dup) MPI_Comm_free(&comm);
        free(in);
        free(out);
    }
    int total_failures = 0;
    MPI_Reduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total_failures == 0 ? "sizes: results correct\n" : "sizes: %d WRONG RESULTS\n", total_failures);
    MPI_Finalize();
    return failures != 0;
}
