/* Two threads of rank 0 send on one channel (peer 1, tag 7, MPI_COMM_WORLD) in an order the
 * program sets: thread A posts its send, then thread B posts its own and completes it, then A
 * posts a receive (of rank 1's answer) and completes both with MPI_Waitall. MPI matches a
 * channel's messages in the order the program posted them, so rank 1's two receives on the
 * channel get A's message, then B's. A halo codelet that holds A's send back until A's receive
 * (`irecv_first`) must not let B's message overtake it. MPI_THREAD_MULTIPLE, 2 ranks or more
 * (ranks above 1 only take part in the final reduction).
 * Prints "threads_channel_order: results correct".
 * usage: threads_channel_order [rounds (default 40)] */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 32
#define TAG 7
#define ANSWER 8

static pthread_barrier_t in_order;
static int rounds;

static void fill(int *buf, int who, int round)
{
    for (int i = 0; i < N; i++) buf[i] = who * 100000 + round * 100 + i;
}

static void *thread_b(void *unused)
{
    (void)unused;
    int b[N];
    for (int r = 0; r < rounds; r++) {
        fill(b, 2, r);
        MPI_Request request;
        pthread_barrier_wait(&in_order); /* A's send is posted */
        MPI_Isend(b, N, MPI_INT, 1, TAG, MPI_COMM_WORLD, &request);
        pthread_barrier_wait(&in_order); /* B's send is posted */
        MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, rank, failures = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rounds = argc > 1 ? atoi(argv[1]) : 40;
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("threads_channel_order: MPI_THREAD_MULTIPLE not provided\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        pthread_t b;
        pthread_barrier_init(&in_order, NULL, 2);
        pthread_create(&b, NULL, thread_b, NULL);
        int a[N], answer[N];
        MPI_Status statuses[2];
        for (int r = 0; r < rounds; r++) {
            fill(a, 1, r);
            MPI_Request requests[2];
            MPI_Isend(a, N, MPI_INT, 1, TAG, MPI_COMM_WORLD, &requests[0]);
            pthread_barrier_wait(&in_order);
            pthread_barrier_wait(&in_order);
            MPI_Irecv(answer, N, MPI_INT, 1, ANSWER, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, statuses);
            for (int i = 0; i < N; i++)
                if (answer[i] != 3 * 100000 + r * 100 + i) failures++;
        }
        pthread_join(b, NULL);
        pthread_barrier_destroy(&in_order);
    } else if (rank == 1) {
        int first[N], second[N], answer[N];
        for (int r = 0; r < rounds; r++) {
            MPI_Recv(first, N, MPI_INT, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Recv(second, N, MPI_INT, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < N; i++) {
                if (first[i] != 1 * 100000 + r * 100 + i) failures++;
                if (second[i] != 2 * 100000 + r * 100 + i) failures++;
            }
            fill(answer, 3, r);
            MPI_Send(answer, N, MPI_INT, 0, ANSWER, MPI_COMM_WORLD);
        }
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "threads_channel_order: results correct\n"
                          : "threads_channel_order: %d WRONG RESULTS\n", total);
    MPI_Finalize();
    return total != 0;
}
