/* MPI_Alltoall and MPI_Allgatherv in place, where MPI ignores the send count and type: rank 0
 * passes MPI_DATATYPE_NULL and a count of 0, the other ranks MPI_INT and 1, on MPI_COMM_WORLD and
 * on a duplicate. Every rank must count the calls alike (the library once passed rank 0's calls
 * straight to MPI as invalid and counted only the others': their checkpoints waited for rank 0).
 * Prints "in_place_null_sendtype: results correct".
 * usage: in_place_null_sendtype [calls (default 40)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 40;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Datatype sendtype = rank == 0 ? MPI_DATATYPE_NULL : MPI_INT;
    int sendcount = rank == 0 ? 0 : 1;
    int *buf = malloc(size * sizeof(int)), *counts = malloc(size * sizeof(int));
    int *displs = malloc(size * sizeof(int));
    for (int p = 0; p < size; p++) {
        counts[p] = 1;
        displs[p] = size - 1 - p;
    }
    MPI_Comm comms[2] = {MPI_COMM_WORLD, dup};
    for (int i = 0; i < calls; i++) {
        MPI_Comm comm = comms[i % 2];
        for (int p = 0; p < size; p++) buf[p] = rank * 1000 + p * 10 + i;
        MPI_Alltoall(MPI_IN_PLACE, sendcount, sendtype, buf, 1, MPI_INT, comm);
        for (int p = 0; p < size; p++)
            if (buf[p] != p * 1000 + rank * 10 + i) failures++;
        for (int p = 0; p < size; p++) buf[p] = -1;
        buf[displs[rank]] = rank * 7 + i;
        MPI_Allgatherv(MPI_IN_PLACE, sendcount, sendtype, buf, counts, displs, MPI_INT, comm);
        for (int p = 0; p < size; p++)
            if (buf[displs[p]] != p * 7 + i) failures++;
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "in_place_null_sendtype: results correct\n"
                          : "in_place_null_sendtype: %d WRONG RESULTS\n", total);
    MPI_Comm_free(&dup);
    free(buf);
    free(counts);
    free(displs);
    MPI_Finalize();
    return total != 0;
}
