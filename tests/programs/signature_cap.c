/* Rank 0 alone passes the per-site signature limit of the report (1024): one alltoall call site
 * whose blocks rank 0 describes in two ways (count ints, or one contiguous type of that size:
 * two signatures for the standard's one), the other ranks in one. First one block size is
 * tuned; then 600 other sizes (rank 0: 1200 signatures, the others 600); then the first size
 * again, where rank 0 now describes its block the new way, past its limit. That call must still
 * run what the tuned key runs on the other ranks (it ran native on rank 0 alone: a hang).
 * Prints "signature_cap: results correct". usage: signature_cap [sizes (default 600)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define TUNED 4096 /* ints per block of the tuned size: far from the others */

static int rank, size;
static int *send, *recv;

/* One alltoall of `block` ints per rank; rank 0 uses a contiguous type when `derived`. */
__attribute__((noinline)) static int exchange(int block, int derived, int it)
{
    MPI_Datatype type = MPI_INT;
    int count = block;
    if (rank == 0 && derived) {
        MPI_Type_contiguous(block, MPI_INT, &type);
        MPI_Type_commit(&type);
        count = 1;
    }
    for (int i = 0; i < block * size; i++) send[i] = rank * 1000003 + i + it;
    MPI_Alltoall(send, count, type, recv, count, type, MPI_COMM_WORLD); /* SITE:alltoall */
    int failures = 0;
    for (int p = 0; p < size; p++)
        for (int k = 0; k < block; k++)
            if (recv[block * p + k] != p * 1000003 + block * rank + k + it) failures++;
    if (type != MPI_INT) MPI_Type_free(&type);
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int sizes = argc > 1 ? atoi(argv[1]) : 600, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    send = malloc(TUNED * size * sizeof(int));
    recv = malloc(TUNED * size * sizeof(int));
    for (int it = 0; it < 150; it++) failures += exchange(TUNED, 0, it);
    for (int block = 1; block <= sizes; block++) {
        failures += exchange(block, 0, block);
        failures += exchange(block, 1, block);
    }
    for (int it = 0; it < 50; it++) failures += exchange(TUNED, 1, it);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "signature_cap: results correct\n" : "signature_cap: %d WRONG RESULTS\n", total);
    free(send); free(recv);
    MPI_Finalize();
    return total != 0;
}
