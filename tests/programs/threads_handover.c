/* Halo exchanges posted by one thread and completed by another (MPI_THREAD_SERIALIZED): the
 * main thread posts a ring exchange (two receives, two sends) and, for the first half of the
 * iterations and every even one after, completes it with MPI_Waitall itself; the odd ones of
 * the second half it hands to a new thread, which calls MPI_Waitall while the main thread waits
 * in pthread_join (no MPI call in between). An MPI_Allreduce follows each exchange, where the
 * ranks may agree on `neighbor`. Every received element and every completed handle is checked.
 * Usage: threads_handover [iterations (default 300)]
 * Prints "threads_handover: results correct" on rank 0 when every rank found nothing wrong. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ELEMENTS 64

static MPI_Request requests[4];
static int failures;

static void *complete(void *unused)
{
    (void)unused;
    if (MPI_Waitall(4, requests, MPI_STATUSES_IGNORE) != MPI_SUCCESS) failures++;
    for (int i = 0; i < 4; i++)
        if (requests[i] != MPI_REQUEST_NULL) failures++;
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_SERIALIZED) {
        printf("threads_handover: MPI provides no MPI_THREAD_SERIALIZED\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iterations = argc > 1 ? atoi(argv[1]) : 300;
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    static double out[2][ELEMENTS], in[2][ELEMENTS];
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < ELEMENTS; i++) {
            out[0][i] = out[1][i] = rank * 1e6 + it * 100 + i;
            in[0][i] = in[1][i] = -1;
        }
        MPI_Isend(out[0], ELEMENTS, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &requests[0]);
        MPI_Isend(out[1], ELEMENTS, MPI_DOUBLE, left, 2, MPI_COMM_WORLD, &requests[1]);
        MPI_Irecv(in[0], ELEMENTS, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &requests[2]);
        MPI_Irecv(in[1], ELEMENTS, MPI_DOUBLE, right, 2, MPI_COMM_WORLD, &requests[3]);
        if (it < iterations / 2 || it % 2 == 0) {
            complete(NULL);
        } else {
            pthread_t helper;
            pthread_create(&helper, NULL, complete, NULL);
            pthread_join(helper, NULL);
        }
        for (int i = 0; i < ELEMENTS; i++)
            if (in[0][i] != left * 1e6 + it * 100 + i || in[1][i] != right * 1e6 + it * 100 + i)
                failures++;
        int one = 1;
        MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total ? "threads_handover: %d WRONG RESULTS\n" : "threads_handover: results correct\n",
               total);
    MPI_Finalize();
    return total != 0;
}
