/* Two exchanges through one helper function whose first post is the same on rank 0 and differs
 * on rank 1, in runs of a few time steps each with an MPI_Barrier after every run (where the
 * ranks may agree on the halo codelet `neighbor`). Rank 0 cannot tell the two apart at their
 * first post: it predicts whichever ran last, so an agreement on one of them would have rank 1
 * run the collective while rank 0, mispredicting, posts natively.
 *
 *   exchange A: every rank receives 8 doubles from its left neighbour and sends 8 to its right
 *               (tag 0), receive first;
 *   exchange B: the same, and rank 1 also sends 4 doubles to rank 0 with tag 1, posted first,
 *               which rank 0 receives last.
 *
 * Every received value is checked. Run with 2 ranks (with more, rank 2 and beyond post the same
 * messages in both exchanges, which no rank can tell apart; an agreement may not cover them).
 * Rank 0 prints
 * "shared_first_post: results correct". */
#include <mpi.h>
#include <stdio.h>

#define RUNS 40
#define STEPS 3
#define N 8

static int rank, size, failures;

static void exchange(int b, int step)
{
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    double out[N], in[N], extra_out[4], extra_in[4];
    MPI_Request requests[3];
    int n = 0;
    for (int i = 0; i < N; i++) {
        out[i] = rank * 1000 + step * 10 + i;
        in[i] = -1;
    }
    for (int i = 0; i < 4; i++) {
        extra_out[i] = 500 + step + i;
        extra_in[i] = -1;
    }
    if (b && rank == 1) MPI_Isend(extra_out, 4, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, &requests[n++]);
    MPI_Irecv(in, N, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, &requests[n++]);
    MPI_Isend(out, N, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, &requests[n++]);
    if (b && rank == 0) MPI_Irecv(extra_in, 4, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, &requests[n++]);
    MPI_Waitall(n, requests, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; i++)
        if (in[i] != left * 1000 + step * 10 + i) failures++;
    if (b && rank == 0)
        for (int i = 0; i < 4; i++)
            if (extra_in[i] != 500 + step + i) failures++;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int step = 0;
    for (int run = 0; run < RUNS; run++) {
        for (int s = 0; s < STEPS; s++) exchange(run % 2, step++);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all) printf("shared_first_post: %d wrong values\n", all);
    if (rank == 0 && !all) printf("shared_first_post: results correct\n");
    MPI_Finalize();
    return all != 0;
}
