/* The calibration program of `commtune calibrate` (embedded in the CLI, compiled on demand with
 * the MPI's compiler wrapper, run under the preload library).
 *
 * Usage: calibrate CALLS PINGPONG POINT...
 *   CALLS     calls per point: enough for the library's search (COMMTUNE_SEARCH=brute) to
 *             measure every codelet, decide and pass its self-check
 *   PINGPONG  comma list of message sizes for the ping-pong between rank 0 and the last rank,
 *             or `-` for none
 *   POINT     op:bytes, op one of allreduce, alltoall, allgatherv; bytes per call as the
 *             library counts them (allreduce: the vector, a multiple of 8; alltoall and
 *             allgatherv: everything a rank receives, a multiple of the number of ranks)
 *
 * Each point runs on a communicator of its own (a duplicate of MPI_COMM_WORLD, from one call
 * site per operation): the library tunes per communicator and size class, so a point whose
 * size shares a class with an earlier one still gets a search of its own. The duplicates are
 * not freed: the library writes its history entries at MPI_Finalize from the keys still there.
 *
 * Rank 0 prints, flushed line by line:
 *   ranks N
 *   pingpong BYTES ONE_WAY_US ERROR_US
 *   point OP BYTES SECONDS          (after each point, all ranks done)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *why, const char *what)
{
    if (rank == 0)
        fprintf(stderr, "calibrate: %s: %s\n", why, what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Ping-pong between rank 0 and the last rank: one-way time per message (half a round trip),
 * the mean over blocks after a warm-up block, and its standard error. */
static void pingpong(long bytes, char *buffer)
{
    enum { BLOCKS = 8 };
    int peer = rank == 0 ? size - 1 : 0;
    int active = rank == 0 || rank == size - 1;
    /* About 2 ms of traffic per block at 1 GB/s, at least 4 round trips. */
    int reps = (int)(2000000 / (bytes + 1000));
    if (reps < 4)
        reps = 4;
    if (reps > 200)
        reps = 200;
    double block[BLOCKS + 1];
    for (int b = 0; b <= BLOCKS; b++) {
        double start = MPI_Wtime();
        for (int i = 0; active && i < reps; i++) {
            if (rank == 0) {
                MPI_Send(buffer, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                MPI_Recv(buffer, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buffer, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buffer, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            }
        }
        block[b] = (MPI_Wtime() - start) / reps / 2 * 1e6;
    }
    if (rank == 0) {
        double mean = 0, var = 0;
        for (int b = 1; b <= BLOCKS; b++)
            mean += block[b] / BLOCKS;
        for (int b = 1; b <= BLOCKS; b++)
            var += (block[b] - mean) * (block[b] - mean) / (BLOCKS - 1);
        printf("pingpong %ld %.4f %.4f\n", bytes, mean, sqrt(var / BLOCKS));
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* One point: CALLS calls of `op` moving `bytes` per call on a fresh communicator. */
static void point(const char *op, long bytes, long calls)
{
    long block = !strcmp(op, "allreduce") ? 8 : size;
    if (bytes <= 0 || bytes % block != 0)
        fail("bytes must be a positive multiple of 8 (allreduce) or of the ranks", op);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    char *send = calloc((size_t)bytes, 1), *recv = calloc((size_t)bytes, 1);
    int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
    if (!send || !recv || !counts || !displs)
        fail("out of memory", op);
    int per_rank = (int)(bytes / size);
    for (int i = 0; i < size; i++) {
        counts[i] = per_rank;
        displs[i] = i * per_rank;
    }
    MPI_Barrier(comm);
    double start = MPI_Wtime();
    if (!strcmp(op, "allreduce")) {
        for (long i = 0; i < calls; i++)
            MPI_Allreduce(send, recv, (int)(bytes / 8), MPI_DOUBLE, MPI_SUM, comm);
    } else if (!strcmp(op, "alltoall")) {
        for (long i = 0; i < calls; i++)
            MPI_Alltoall(send, per_rank, MPI_BYTE, recv, per_rank, MPI_BYTE, comm);
    } else if (!strcmp(op, "allgatherv")) {
        for (long i = 0; i < calls; i++)
            MPI_Allgatherv(send, per_rank, MPI_BYTE, recv, counts, displs, MPI_BYTE, comm);
    } else {
        fail("unknown operation", op);
    }
    MPI_Barrier(comm);
    if (rank == 0) {
        printf("point %s %ld %.6f\n", op, bytes, MPI_Wtime() - start);
        fflush(stdout);
    }
    free(send);
    free(recv);
    free(counts);
    free(displs);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3)
        fail("usage", "calibrate CALLS PINGPONG POINT...");
    long calls = atol(argv[1]);
    if (calls < 1)
        fail("CALLS must be a positive integer", argv[1]);
    if (rank == 0) {
        printf("ranks %d\n", size);
        fflush(stdout);
    }
    if (strcmp(argv[2], "-") != 0 && size > 1) {
        char *list = strdup(argv[2]);
        long largest = 0;
        for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
            largest = atol(s) > largest ? atol(s) : largest;
        free(list);
        char *buffer = calloc((size_t)largest + 1, 1);
        list = strdup(argv[2]);
        for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
            pingpong(atol(s), buffer);
        free(list);
        free(buffer);
    }
    for (int i = 3; i < argc; i++) {
        char op[32];
        long bytes;
        if (sscanf(argv[i], "%31[a-z]:%ld", op, &bytes) != 2)
            fail("a point is op:bytes", argv[i]);
        point(op, bytes, calls);
    }
    MPI_Finalize();
    return 0;
}
