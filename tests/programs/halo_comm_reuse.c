/* One halo exchange (the same call sites, the same messages) on a duplicate of MPI_COMM_WORLD for
 * ITERATIONS iterations, then on a second duplicate made after the first was freed, which MPI
 * usually gives the first one's handle. Rank 0 prints "handle reused: 1" when it did, and
 * "halo_comm_reuse: results correct" when every message arrived intact.
 * Usage: halo_comm_reuse ITERATIONS (per communicator). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1024

static int failures;

static void exchange(MPI_Comm comm, int it)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    double out[N], from_left[N], from_right[N];
    for (int i = 0; i < N; i++)
        out[i] = rank * 1000.0 + it + i;
    MPI_Request requests[4];
    MPI_Irecv(from_left, N, MPI_DOUBLE, left, 1, comm, &requests[0]);
    MPI_Irecv(from_right, N, MPI_DOUBLE, right, 2, comm, &requests[1]);
    MPI_Isend(out, N, MPI_DOUBLE, right, 1, comm, &requests[2]);
    MPI_Isend(out, N, MPI_DOUBLE, left, 2, comm, &requests[3]);
    MPI_Waitall(4, requests, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; i++)
        if (from_left[i] != left * 1000.0 + it + i || from_right[i] != right * 1000.0 + it + i) {
            failures++;
            return;
        }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 50, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    for (int it = 0; it < iterations; it++)
        exchange(comm, it);
    MPI_Comm first = comm;
    MPI_Comm_free(&comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    int reused = comm == first;
    for (int it = 0; it < iterations; it++)
        exchange(comm, iterations + it);
    MPI_Comm_free(&comm);
    int all = 0;
    MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("handle reused: %d\n", reused);
        if (all == 0)
            printf("halo_comm_reuse: results correct\n");
    }
    MPI_Finalize();
    return 0;
}
