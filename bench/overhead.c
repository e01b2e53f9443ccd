/* Per-call cost of an 8-byte MPI_Allreduce, for measuring what the preload library adds.
 * Prints the mean time per call in nanoseconds over `calls` calls (after a warm-up). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    double in = 1.0, out = 0.0;
    for (long i = 0; i < calls / 10; i++) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double start = now_ns();
    for (long i = 0; i < calls; i++) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double per_call = (now_ns() - start) / calls;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("%.1f\n", per_call);
    MPI_Finalize();
    return 0;
}
