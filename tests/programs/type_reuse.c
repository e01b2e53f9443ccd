/* Rank 0 frees its derived datatype and creates one of another size, which MPI may give the
 * freed one's handle: one alltoall call site, in phases of growing blocks; rank 0 sends and
 * receives one element of a contiguous type of the block's size (made anew every phase), the
 * other ranks the block's count of MPI_INT. A key found by handle bits and counts must not keep
 * the freed type's size, and with it the tuning of the previous phase (the ranks ran different
 * codelets: a hang). Prints "type_reuse: results correct" and how often a handle came back.
 * usage: type_reuse [phases (default 6)] [calls per phase (default 80)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int phases = argc > 1 ? atoi(argv[1]) : 6, calls = argc > 2 ? atoi(argv[2]) : 80;
    int rank, size, failures = 0, reused = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int max = 4 * phases;
    int *send = malloc(max * size * sizeof(int)), *recv = malloc(max * size * sizeof(int));
    MPI_Datatype previous = MPI_DATATYPE_NULL;
    for (int phase = 0; phase < phases; phase++) {
        int block = 4 * (phase + 1), count = block;
        MPI_Datatype type = MPI_INT;
        if (rank == 0) {
            MPI_Type_contiguous(block, MPI_INT, &type);
            MPI_Type_commit(&type);
            if (type == previous) reused++;
            count = 1;
        }
        for (int it = 0; it < calls; it++) {
            for (int i = 0; i < block * size; i++) send[i] = rank * 100000 + i * 10 + it;
            MPI_Alltoall(send, count, type, recv, count, type, MPI_COMM_WORLD); /* SITE:alltoall */
            for (int p = 0; p < size; p++)
                for (int k = 0; k < block; k++)
                    if (recv[block * p + k] != p * 100000 + (block * rank + k) * 10 + it) failures++;
        }
        if (rank == 0) {
            previous = type;
            MPI_Type_free(&type);
        }
    }
    int total = 0, handles = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&reused, &handles, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("type_reuse: %d handles reused\n", handles);
        printf(total == 0 ? "type_reuse: results correct\n" : "type_reuse: %d WRONG RESULTS\n", total);
    }
    free(send); free(recv);
    MPI_Finalize();
    return total != 0;
}
