/* Which algorithm did the MPI library's MPI_Allreduce run? A reduction that is declared
 * commutative but is neither commutative nor associative makes every reduction order give a
 * different result, so each rank's result is a fingerprint of the algorithm (no timing).
 * Alltoall and allgatherv (whose results every algorithm must get alike) are checked for
 * correctness, so that a rules file that breaks them fails the job.
 *
 * Usage: export_probe allreduce|alltoall|allgatherv COUNT
 * Prints on rank 0: "fingerprint: R0 R1 ..." (allreduce) or "ok" (the others). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int failed = 0;
    if (strcmp(argv[1], "allreduce") == 0) {
        MPI_Op op;
        MPI_Op_create(order, 1, &op);
        uint64_t *send = malloc(sizeof(uint64_t) * count), *recv = malloc(sizeof(uint64_t) * count);
        for (int i = 0; i < count; i++) send[i] = (uint64_t)rank * 977u + (uint64_t)i + 1u;
        MPI_Allreduce(send, recv, count, MPI_UINT64_T, op, MPI_COMM_WORLD);
        uint64_t mine = 0;
        for (int i = 0; i < count; i++) mine = mine * 31u + recv[i];
        MPI_Op_free(&op);
        /* A built-in sum of doubles of far apart magnitudes: its rounding tells the order
         * too, for algorithms that take built-in operations only. */
        double *dsend = malloc(sizeof(double) * count), *drecv = malloc(sizeof(double) * count);
        for (int i = 0; i < count; i++)
            dsend[i] = ((rank + i) % 3 == 0 ? 1e16 : 1.0) * (rank % 2 ? -1.0 : 1.0) + 0.25 * (rank + 1);
        MPI_Allreduce(dsend, drecv, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < count; i++) {
            uint64_t bits;
            memcpy(&bits, &drecv[i], sizeof bits);
            mine = mine * 31u + bits;
        }
        uint64_t *all = malloc(sizeof(uint64_t) * size);
        MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("fingerprint:");
            for (int r = 0; r < size; r++) printf(" %016llx", (unsigned long long)all[r]);
            printf("\n");
        }
    } else if (strcmp(argv[1], "alltoall") == 0) {
        int *send = malloc(sizeof(int) * count * size), *recv = malloc(sizeof(int) * count * size);
        for (int i = 0; i < count * size; i++) send[i] = rank * 1000000 + i;
        MPI_Alltoall(send, count, MPI_INT, recv, count, MPI_INT, MPI_COMM_WORLD);
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
        MPI_Allgatherv(send, count, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
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
