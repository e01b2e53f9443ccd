/* Makes a known number of each intercepted call from marked lines and checks its own results.
 * The test reads the `SITE:` markers to know which source line each report site must name.
 * With -DLARGE_COUNT (MPI-4) the same calls go through the MPI_Count (`_c`) entry points. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef LARGE_COUNT
typedef MPI_Count count_t;
typedef MPI_Aint displ_t;
#define ALLREDUCE MPI_Allreduce_c
#define ALLTOALL MPI_Alltoall_c
#define ALLGATHERV MPI_Allgatherv_c
#define ISEND MPI_Isend_c
#define IRECV MPI_Irecv_c
#else
typedef int count_t;
typedef int displ_t;
#define ALLREDUCE MPI_Allreduce
#define ALLTOALL MPI_Alltoall
#define ALLGATHERV MPI_Allgatherv
#define ISEND MPI_Isend
#define IRECV MPI_Irecv
#endif

static int failures = 0;

static void check(int ok, const char *what)
{
    if (!ok) {
        failures++;
        fprintf(stderr, "known_calls: wrong result in %s\n", what);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    for (int it = 0; it < 10; it++) {
        double in[4] = {rank, 1, 2, it}, out[4];
        ALLREDUCE(in, out, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce_vec */
        check(out[0] == size * (size - 1) / 2.0 && out[1] == size && out[3] == it * size, "allreduce");
    }
    for (int it = 0; it < 5; it++) {
        int v = rank + it;
        ALLREDUCE(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); /* SITE:allreduce_inplace */
        check(v == size - 1 + it, "allreduce in place");
    }

    int *send = malloc(2 * size * sizeof(int)), *recv = malloc(2 * size * sizeof(int));
    for (int it = 0; it < 3; it++) {
        for (int i = 0; i < 2 * size; i++) send[i] = 1000 * rank + i;
        ALLTOALL(send, 2, MPI_INT, recv, 2, MPI_INT, MPI_COMM_WORLD); /* SITE:alltoall */
        for (int p = 0; p < size; p++)
            check(recv[2 * p] == 1000 * p + 2 * rank && recv[2 * p + 1] == 1000 * p + 2 * rank + 1, "alltoall");
    }

    /* Rank i contributes i+1 ints. */
    count_t *counts = malloc(size * sizeof(count_t));
    displ_t *displs = malloc(size * sizeof(displ_t));
    int total = 0;
    for (int p = 0; p < size; p++) {
        counts[p] = p + 1;
        displs[p] = total;
        total += p + 1;
    }
    int *mine = malloc((rank + 1) * sizeof(int)), *all = malloc(total * sizeof(int));
    for (int it = 0; it < 7; it++) {
        for (int i = 0; i <= rank; i++) mine[i] = 100 * rank + i + it;
        ALLGATHERV(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD); /* SITE:allgatherv */
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= p; i++) check(all[displs[p] + i] == 100 * p + i + it, "allgatherv");
    }

    /* Ring halo: 8 doubles to the right, 8 from the left. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double out8[8], in8[8];
    for (int it = 0; it < 6; it++) {
        MPI_Request req[2];
        for (int i = 0; i < 8; i++) out8[i] = rank * 10 + i + it;
        IRECV(in8, 8, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, &req[0]);
        ISEND(out8, 8, MPI_DOUBLE, right, 7, MPI_COMM_WORLD, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE); /* SITE:halo_waitall */
        check(in8[3] == left * 10 + 3 + it, "halo waitall");
    }
    /* The same exchange completed by two MPI_Wait calls: the episode ends at the second. */
    for (int it = 0; it < 4; it++) {
        MPI_Request rreq, sreq;
        IRECV(in8, 8, MPI_DOUBLE, left, 8, MPI_COMM_WORLD, &rreq);
        ISEND(out8, 8, MPI_DOUBLE, right, 8, MPI_COMM_WORLD, &sreq);
        MPI_Wait(&rreq, MPI_STATUS_IGNORE);
        MPI_Wait(&sreq, MPI_STATUS_IGNORE); /* SITE:halo_wait */
        check(in8[0] == left * 10 + 5, "halo wait");
    }

    free(send); free(recv); free(counts); free(displs); free(mine); free(all);
    int all_failures = 0;
    MPI_Reduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(all_failures == 0 ? "known_calls: results correct\n" : "known_calls: %d WRONG RESULTS\n", all_failures);
    MPI_Finalize();
    return failures != 0;
}
