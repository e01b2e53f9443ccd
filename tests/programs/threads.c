/* MPI_THREAD_MULTIPLE: two threads, each with its own communicator, call MPI concurrently. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#define ITERATIONS 50

struct worker {
    MPI_Comm comm;
    int failures;
};

static void *first(void *arg)
{
    struct worker *w = arg;
    int rank, size;
    MPI_Comm_rank(w->comm, &rank);
    MPI_Comm_size(w->comm, &size);
    for (int it = 0; it < ITERATIONS; it++) {
        long in = rank + it, out = 0;
        MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, w->comm); /* SITE:thread_first */
        if (out != (long)size * (size - 1) / 2 + (long)size * it) w->failures++;
    }
    return NULL;
}

static void *second(void *arg)
{
    struct worker *w = arg;
    int rank, size;
    MPI_Comm_rank(w->comm, &rank);
    MPI_Comm_size(w->comm, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int it = 0; it < ITERATIONS; it++) {
        double in[2] = {rank, it}, out[2];
        MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_MAX, w->comm); /* SITE:thread_second */
        if (out[0] != size - 1 || out[1] != it) w->failures++;
        int send = rank * 100 + it, recv = -1;
        MPI_Request req[2];
        MPI_Irecv(&recv, 1, MPI_INT, left, 5, w->comm, &req[0]);
        MPI_Isend(&send, 1, MPI_INT, right, 5, w->comm, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE); /* SITE:thread_halo */
        if (recv != left * 100 + it) w->failures++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "threads: MPI_THREAD_MULTIPLE not provided\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    struct worker a = {MPI_COMM_NULL, 0}, b = {MPI_COMM_NULL, 0};
    MPI_Comm_dup(MPI_COMM_WORLD, &a.comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &b.comm);
    pthread_t ta, tb;
    pthread_create(&ta, NULL, first, &a);
    pthread_create(&tb, NULL, second, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    int failures = a.failures + b.failures, total = 0, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:main_check */
    if (rank == 0) printf(total == 0 ? "threads: results correct\n" : "threads: %d WRONG RESULTS\n", total);
    MPI_Comm_free(&a.comm);
    MPI_Comm_free(&b.comm);
    MPI_Finalize();
    return total != 0;
}
