/* Ranks 0 and 2 exchange with both other ranks in one episode; rank 1 exchanges with rank 2 in
 * one episode and with rank 0 in the next. Natively fine; a codelet that waits for one peer at a
 * time in a global order (pairwise: pair (0,1), then (0,2), then (1,2)) would have rank 0 wait for
 * rank 1, rank 1 for rank 2 and rank 2 for rank 0, unless its waits give up and post the rest.
 * Run with 3 ranks; rank 0 prints "split_episodes: results correct". */
#include <mpi.h>
#include <stdio.h>

#define N 256
#define ITERATIONS 8

static int failures;

static void exchange(int peer, double *out, double *in, MPI_Request *requests)
{
    MPI_Irecv(in, N, MPI_DOUBLE, peer, 5, MPI_COMM_WORLD, &requests[0]);
    MPI_Isend(out, N, MPI_DOUBLE, peer, 5, MPI_COMM_WORLD, &requests[1]);
}

static void check(const double *in, int peer, int it)
{
    for (int i = 0; i < N; i++)
        if (in[i] != peer * 1000 + it + i) {
            failures++;
            return;
        }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 3)
        MPI_Abort(MPI_COMM_WORLD, 1);
    double out[N], in_a[N], in_b[N];
    for (int it = 0; it < ITERATIONS; it++) {
        for (int i = 0; i < N; i++)
            out[i] = rank * 1000 + it + i;
        MPI_Request requests[4];
        if (rank == 1) {
            exchange(2, out, in_b, requests);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            exchange(0, out, in_a, requests);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            check(in_b, 2, it);
            check(in_a, 0, it);
        } else {
            int first = rank == 0 ? 1 : 0, second = rank == 0 ? 2 : 1;
            exchange(first, out, in_a, requests);
            exchange(second, out, in_b, requests + 2);
            MPI_Waitall(4, requests, MPI_STATUSES_IGNORE); /* SITE:both */
            check(in_a, first, it);
            check(in_b, second, it);
        }
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "split_episodes: results correct\n" : "split_episodes: WRONG RESULTS\n");
    MPI_Finalize();
    return total != 0;
}
