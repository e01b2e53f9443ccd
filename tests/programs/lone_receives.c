/* Two exchanges a halo codelet cannot improve, each step between ring neighbours.
 *
 * usage: lone_receives [lone | moving]
 *   lone    LAMMPS's pattern: one MPI_Irecv from the left neighbour, a blocking MPI_Send to the
 *           right one, MPI_Wait: an "episode" of one message, which the halo tuner leaves native
 *   moving  MPI_Irecv and MPI_Isend completed by MPI_Waitall, in buffers that move every step
 *           (never the same message twice), so `persistent` and `pairwise`, which reuse a
 *           message's persistent request, never apply
 * Run with 2 to 4 ranks; rank 0 prints "lone_receives: results correct". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define N 512
#define STEPS 80

static double out[STEPS * N], in[STEPS * N];

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int moving = argc > 1 && strcmp(argv[1], "moving") == 0;
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int failures = 0;
    for (int step = 0; step < STEPS; step++) {
        double *o = moving ? out + step * N : out, *i_ = moving ? in + step * N : in;
        for (int i = 0; i < N; i++)
            o[i] = rank * 1000.0 + step + i;
        MPI_Request requests[2];
        MPI_Irecv(i_, N, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, &requests[0]);
        if (moving) {
            MPI_Isend(o, N, MPI_DOUBLE, right, 7, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
        } else {
            MPI_Send(o, N, MPI_DOUBLE, right, 7, MPI_COMM_WORLD);
            MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
        }
        for (int i = 0; i < N; i++)
            if (i_[i] != left * 1000.0 + step + i)
                failures++;
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "lone_receives: results correct\n" : "lone_receives: %d wrong\n", total);
    MPI_Finalize();
    return total != 0;
}
