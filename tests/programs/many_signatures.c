/* One call site whose count changes every call (1100 distinct signatures): the library keeps
 * 1024 of them apart and folds the rest into one untuned key, so memory stays bounded. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *in = malloc(1100 * sizeof(int)), *out = malloc(1100 * sizeof(int));
    for (int it = 0; it < 1100; it++) {
        int n = it + 1;
        for (int i = 0; i < n; i++) in[i] = rank + i;
        MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:changing */
        if (out[n - 1] != size * (size - 1) / 2 + size * (n - 1)) failures++;
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "many_signatures: results correct\n" : "many_signatures: %d WRONG RESULTS\n", total);
    free(in);
    free(out);
    MPI_Finalize();
    return failures != 0;
}
