/* An allreduce loop whose rank 0 arrives late at every call (it sleeps before it), so that the
 * other ranks wait inside the call: production calls take that skew on top of the algorithm's
 * time, while a search sample timed after a barrier does not. Checks the results.
 * usage: skewed_loop iterations skew_microseconds */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iterations = argc > 1 ? atoi(argv[1]) : 100;
    long skew_us = argc > 2 ? atol(argv[2]) : 0;
    struct timespec skew = {skew_us / 1000000, skew_us % 1000000 * 1000};
    double in[8], out[8];
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < 8; i++) in[i] = rank + i + it;
        if (rank == 0) nanosleep(&skew, NULL);
        MPI_Allreduce(in, out, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce */
        for (int i = 0; i < 8; i++)
            if (out[i] != size * (size - 1) / 2.0 + (double)size * (i + it)) failures++;
    }
    int total_failures = 0;
    MPI_Reduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total_failures == 0 ? "skewed_loop: results correct\n" : "skewed_loop: %d WRONG RESULTS\n", total_failures);
    MPI_Finalize();
    return failures != 0;
}
