/* A fixed number of calls of one operation from one line, timed as a whole: the per-call time of
 * native, of each codelet forced and of the tuner (scripts/bench-cluster). All calls of the loop
 * come from one line, so they are one key for the tuner; the tuner's warm-up and search are inside
 * the timed loop, as they would be in an application.
 *
 * usage: loop allreduce|alltoall|allgatherv|halo <bytes> <calls>
 *   allreduce:  a vector of bytes/8 doubles, MPI_SUM
 *   alltoall:   a block of bytes/8 doubles to every rank
 *   allgatherv: a block of bytes/8 doubles from every rank (all counts equal)
 *   halo:       one exchange of a periodic 2-D grid of ranks (MPI_Dims_create): a face of
 *               bytes/8 doubles to and from each of the 4 neighbours, per face MPI_Irecv then
 *               MPI_Isend, completed by one MPI_Waitall; faces along the first dimension are
 *               contiguous, along the second an MPI_Type_vector (every other double), as a
 *               stencil's rows and columns; an MPI_Barrier after every 10th exchange (where the
 *               ranks may agree to the halo codelet `neighbor`; the library does not tune it)
 *
 * Before the loop every pair of ranks exchanges a message (MPI_Sendrecv, which the library does
 * not tune), so that connections a network transport opens lazily are open; then a barrier.
 * Rank 0 prints: MS_PER_CALL <the slowest rank's loop time / calls, in milliseconds>
 * With LOOP_EPISODES=PREFIX each rank also writes every call's time in microseconds to
 * PREFIX.RANK, one per line (a halo's without its barrier; bench/halo-lead.py replays them). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRIDE 2

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: loop allreduce|alltoall|allgatherv|halo <bytes> <calls>\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *op = argv[1];
    long bytes = atol(argv[2]), calls = atol(argv[3]);
    int n = (int)(bytes / 8 > 0 ? bytes / 8 : 1);
    enum { ALLREDUCE, ALLTOALL, ALLGATHERV, HALO } kind;
    if (!strcmp(op, "allreduce")) kind = ALLREDUCE;
    else if (!strcmp(op, "alltoall")) kind = ALLTOALL;
    else if (!strcmp(op, "allgatherv")) kind = ALLGATHERV;
    else if (!strcmp(op, "halo")) kind = HALO;
    else {
        if (rank == 0) fprintf(stderr, "loop: unknown operation %s\n", op);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }

    /* collectives */
    long elements = kind == ALLREDUCE ? n : (long)n * size;
    double *s = NULL, *r = NULL;
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++) {
        counts[i] = n;
        displs[i] = i * n;
    }
    /* halo */
    MPI_Comm cart = MPI_COMM_NULL;
    MPI_Datatype column = MPI_DATATYPE_NULL;
    int lower[2], upper[2];
    double *out[4], *in[4];
    if (kind == HALO) {
        int dims[2] = {0, 0}, periods[2] = {1, 1};
        MPI_Dims_create(size, 2, dims);
        MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
        for (int d = 0; d < 2; d++)
            MPI_Cart_shift(cart, d, 1, &lower[d], &upper[d]);
        MPI_Type_vector(n, 1, STRIDE, MPI_DOUBLE, &column);
        MPI_Type_commit(&column);
        for (int f = 0; f < 4; f++) {
            out[f] = malloc(sizeof(double) * (size_t)n * STRIDE);
            in[f] = malloc(sizeof(double) * (size_t)n * STRIDE);
            for (long i = 0; i < (long)n * STRIDE; i++) out[f][i] = rank + 1e-3 * (double)(i % 1000);
        }
    } else {
        s = malloc(sizeof(double) * elements);
        r = malloc(sizeof(double) * elements);
        for (long i = 0; i < elements; i++) s[i] = rank + 1e-3 * (double)(i % 1000);
    }

    /* open every pair's connection */
    char token = 0, back = 0;
    for (int k = 1; k < size; k++)
        MPI_Sendrecv(&token, 1, MPI_CHAR, (rank + k) % size, 99, &back, 1, MPI_CHAR,
                     (rank - k + size) % size, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);

    /* LOOP_EPISODES=PREFIX: each rank writes each call's time (us) to PREFIX.RANK, one per line */
    const char *episodes = getenv("LOOP_EPISODES");
    double *took = malloc(sizeof(double) * (size_t)(calls > 0 ? calls : 1));
    double start = MPI_Wtime();
    for (long i = 0; i < calls; i++) {
        double call_start = MPI_Wtime();
        switch (kind) {
        case ALLREDUCE:
            MPI_Allreduce(s, r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        case ALLTOALL:
            MPI_Alltoall(s, n, MPI_DOUBLE, r, n, MPI_DOUBLE, MPI_COMM_WORLD);
            break;
        case ALLGATHERV:
            MPI_Allgatherv(s, n, MPI_DOUBLE, r, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
            break;
        case HALO: {
            MPI_Request req[8];
            int q = 0;
            for (int d = 0; d < 2; d++) {
                MPI_Datatype t = d == 0 ? MPI_DOUBLE : column;
                int count = d == 0 ? n : 1;
                /* face 2d: towards lower (tag 2d), face 2d+1: towards upper (tag 2d+1) */
                MPI_Irecv(in[2 * d], count, t, lower[d], 2 * d + 1, cart, &req[q++]);
                MPI_Isend(out[2 * d], count, t, lower[d], 2 * d, cart, &req[q++]);
                MPI_Irecv(in[2 * d + 1], count, t, upper[d], 2 * d, cart, &req[q++]);
                MPI_Isend(out[2 * d + 1], count, t, upper[d], 2 * d + 1, cart, &req[q++]);
            }
            MPI_Waitall(q, req, MPI_STATUSES_IGNORE);
            took[i] = MPI_Wtime() - call_start;
            if (i % 10 == 9) MPI_Barrier(cart);
            break;
        }
        }
        if (kind != HALO) took[i] = MPI_Wtime() - call_start;
    }
    double mine = MPI_Wtime() - start, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (episodes) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", episodes, rank);
        FILE *f = fopen(path, "w");
        if (!f) {
            perror(path);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (long i = 0; i < calls; i++) fprintf(f, "%.1f\n", took[i] * 1e6);
        fclose(f);
    }
    free(took);
    if (rank == 0) printf("MS_PER_CALL %.6f\n", slowest * 1e3 / (double)(calls > 0 ? calls : 1));
    if (kind == HALO) {
        for (int f = 0; f < 4; f++) {
            free(out[f]);
            free(in[f]);
        }
        MPI_Type_free(&column);
        MPI_Comm_free(&cart);
    }
    free(s);
    free(r);
    free(counts);
    free(displs);
    MPI_Finalize();
    return 0;
}
