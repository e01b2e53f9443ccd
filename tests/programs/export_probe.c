/* One collective of the MPI library's own (no preload library), for tests/export.rs to tell
 * which algorithm ran without timing it. For allreduce, each rank's results: of a reduction
 * declared commutative that is neither commutative nor associative (each operand order gives
 * another result) and of a built-in sum of doubles of far apart magnitudes (its rounding
 * tells the association). Alltoall and allgatherv results, alike for every algorithm, are
 * checked. What the ranks sent comes from outside: Open MPI's pml monitoring component, or
 * count_sends.so (MPICH), read here through export_probe_sends.
 *
 * Usage: export_probe allreduce|alltoall|allgatherv COUNT
 * Prints on rank 0, for allreduce, "user op: R0 R1 ..." and "sum: R0 R1 ...", each rank's
 * results folded to one number; for the others "ok" (or "wrong result", and fails). With
 * count_sends.so preloaded, also "sends: N0 N1 ...": the messages each rank sent in the
 * built-in sum (allreduce) or in the collective (the others). */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The messages sent so far, when count_sends.so is there to count them. */
static unsigned long (*counter)(void);
static unsigned long sent(void) { return counter ? counter() : 0; }

static void print_sends(unsigned long before, int rank, int size) {
    unsigned long mine = sent() - before, *all = malloc(sizeof(unsigned long) * size);
    MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG, all, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0 && counter) {
        printf("sends:");
        for (int r = 0; r < size; r++) printf(" %lu", all[r]);
        printf("\n");
    }
    free(all);
}

static void order(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    uint64_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = a[i] * 1000003u + b[i] * 7u + 1u;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: export_probe allreduce|alltoall|allgatherv COUNT\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int count = atoi(argv[2]);
    counter = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "export_probe_sends");
    unsigned long before;
    int failed = 0;
    if (strcmp(argv[1], "allreduce") == 0) {
        MPI_Op op;
        MPI_Op_create(order, 1, &op);
        uint64_t *send = malloc(sizeof(uint64_t) * count), *recv = malloc(sizeof(uint64_t) * count);
        for (int i = 0; i < count; i++) send[i] = (uint64_t)rank * 977u + (uint64_t)i + 1u;
        MPI_Allreduce(send, recv, count, MPI_UINT64_T, op, MPI_COMM_WORLD);
        uint64_t mine[2] = {0, 0};
        for (int i = 0; i < count; i++) mine[0] = mine[0] * 31u + recv[i];
        MPI_Op_free(&op);
        /* A built-in sum of doubles of far apart magnitudes: its rounding tells the order
         * too, for algorithms that take built-in operations only. */
        double *dsend = malloc(sizeof(double) * count), *drecv = malloc(sizeof(double) * count);
        const double magnitudes[4] = {1e16, 1.0, -1e16, 1.0};
        for (int i = 0; i < count; i++) dsend[i] = magnitudes[(rank + i) % 4] * (1 + i % 3);
        before = sent();
        MPI_Allreduce(dsend, drecv, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        print_sends(before, rank, size);
        for (int i = 0; i < count; i++) {
            uint64_t bits;
            memcpy(&bits, &drecv[i], sizeof bits);
            mine[1] = mine[1] * 31u + bits;
        }
        uint64_t *all = malloc(sizeof(uint64_t) * 2 * size);
        MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            for (int k = 0; k < 2; k++) {
                printf(k == 0 ? "user op:" : "sum:");
                for (int r = 0; r < size; r++)
                    printf(" %016llx", (unsigned long long)all[2 * r + k]);
                printf("\n");
            }
        }
    } else if (strcmp(argv[1], "alltoall") == 0) {
        int *send = malloc(sizeof(int) * count * size), *recv = malloc(sizeof(int) * count * size);
        for (int i = 0; i < count * size; i++) send[i] = rank * 1000000 + i;
        before = sent();
        MPI_Alltoall(send, count, MPI_INT, recv, count, MPI_INT, MPI_COMM_WORLD);
        print_sends(before, rank, size);
        for (int r = 0; r < size; r++)
            for (int i = 0; i < count; i++)
                failed |= recv[r * count + i] != r * 1000000 + rank * count + i;
    } else if (strcmp(argv[1], "allgatherv") == 0) {
        int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
        for (int r = 0; r < size; r++) {
            counts[r] = count;
            displs[r] = r * count;
        }
        int *send = malloc(sizeof(int) * count), *recv = malloc(sizeof(int) * count * size);
        for (int i = 0; i < count; i++) send[i] = rank * 1000000 + i;
        before = sent();
        MPI_Allgatherv(send, count, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        print_sends(before, rank, size);
        for (int r = 0; r < size; r++)
            for (int i = 0; i < count; i++) failed |= recv[r * count + i] != r * 1000000 + i;
    } else {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int any;
    MPI_Reduce(&failed, &any, 1, MPI_INT, MPI_LOR, 0, MPI_COMM_WORLD);
    if (rank == 0 && strcmp(argv[1], "allreduce") != 0) printf(any ? "wrong result\n" : "ok\n");
    MPI_Finalize();
    return rank == 0 ? any : 0;
}
