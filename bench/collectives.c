/* Time per call of MPI_Allreduce, MPI_Alltoall and MPI_Allgatherv over message sizes.
 *
 * Run under the preload library with COMMTUNE_FORCE to time a codelet, or without to time native
 * (scripts/bench-codelets does both, alternating). Doubles throughout; the size of a message is
 *   allreduce:  the vector (count = bytes / 8, MPI_SUM),
 *   alltoall:   the block sent to each rank,
 *   allgatherv: the block each rank contributes (all equal).
 * For each operation and size: two warm-up calls, calibration (1, 2, 4, ... calls until a tenth
 * of --time is spent) that sets the number of iterations, agreed over ranks, so the timed loop
 * takes about --time seconds, then back-to-back calls. The time per call is the slowest rank's loop time divided by the iterations.
 * Rank 0 prints one line per measurement:  RESULT <op> <bytes> <iterations> <microseconds>
 *
 * Usage: collectives [--ops allreduce,alltoall,allgatherv] [--sizes 8,64,...] [--time S]
 *                    [--min-iters N] [--max-iters N]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

/* One call of `op` at `bytes` (the timed call site of that operation). */
static void call(const char *op, long bytes, double *s, double *r, int *counts, int *displs)
{
    int n = (int)(bytes / 8 > 0 ? bytes / 8 : 1);
    if (!strcmp(op, "allreduce")) {
        MPI_Allreduce(s, r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    } else if (!strcmp(op, "alltoall")) {
        MPI_Alltoall(s, n, MPI_DOUBLE, r, n, MPI_DOUBLE, MPI_COMM_WORLD);
    } else {
        for (int i = 0; i < size; i++) {
            counts[i] = n;
            displs[i] = i * n;
        }
        MPI_Allgatherv(s, n, MPI_DOUBLE, r, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char ops[256] = "allreduce,alltoall,allgatherv";
    char sizes[1024] = "8,32,128,512,2048,8192,32768,131072,524288,2097152,4194304";
    double budget = 0.05;
    long min_iters = 3, max_iters = 100000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ops"))
            snprintf(ops, sizeof ops, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--sizes"))
            snprintf(sizes, sizeof sizes, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--time"))
            budget = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-iters"))
            min_iters = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-iters"))
            max_iters = atol(argv[i + 1]);
        else {
            if (rank == 0) fprintf(stderr, "collectives: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    char opcopy[256];
    snprintf(opcopy, sizeof opcopy, "%s", ops);
    for (char *op = strtok(opcopy, ","); op; op = strtok(NULL, ",")) {
        char sizecopy[1024];
        snprintf(sizecopy, sizeof sizecopy, "%s", sizes);
        char *save = NULL;
        for (char *sz = strtok_r(sizecopy, ",", &save); sz; sz = strtok_r(NULL, ",", &save)) {
            long bytes = atol(sz);
            long n = bytes / 8 > 0 ? bytes / 8 : 1;
            size_t elems = strcmp(op, "allreduce") ? (size_t)n * size : (size_t)n;
            double *s = malloc(sizeof(double) * elems), *r = malloc(sizeof(double) * elems);
            for (size_t i = 0; i < elems; i++) s[i] = rank + 1e-3 * (double)(i % 1000);
            call(op, bytes, s, r, counts, displs);
            call(op, bytes, s, r, counts, displs);
            /* calibration: 1, 2, 4, ... calls until the slowest rank spent a tenth of the
             * budget; every rank runs the same calls and agrees on the slowest estimate */
            double slowest = 0;
            for (long calls = 1;; calls *= 2) {
                PMPI_Barrier(MPI_COMM_WORLD);
                double t = PMPI_Wtime();
                for (long i = 0; i < calls; i++) call(op, bytes, s, r, counts, displs);
                double per_call = (PMPI_Wtime() - t) / calls;
                PMPI_Allreduce(&per_call, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (slowest * calls >= budget / 10 || calls >= max_iters) break;
            }
            long iters = slowest > 0 ? (long)(budget / slowest) : max_iters;
            if (iters < min_iters) iters = min_iters;
            if (iters > max_iters) iters = max_iters;
            PMPI_Barrier(MPI_COMM_WORLD);
            double t = PMPI_Wtime();
            for (long i = 0; i < iters; i++) call(op, bytes, s, r, counts, displs);
            t = PMPI_Wtime() - t;
            PMPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) printf("RESULT %s %ld %ld %.3f\n", op, bytes, iters, slowest / iters * 1e6);
            fflush(stdout);
            free(s);
            free(r);
        }
    }
    free(counts);
    free(displs);
    MPI_Finalize();
    return 0;
}
