/* Collectives on an intercommunicator (groups of size-1 ranks and of 1 rank): the library must
 * read the per-rank arrays with the remote group's size and never tune (codelets need an
 * intra-communicator). Checks its own results. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int color = rank < size - 1 ? 0 : 1;
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? size - 1 : 0, 7, &inter);
    int lrank, rsize;
    MPI_Comm_rank(inter, &lrank);
    MPI_Comm_remote_size(inter, &rsize);
    /* World rank of remote process j. */
    int remote0 = color == 0 ? size - 1 : 0;
    int *send = malloc(rsize * sizeof(int)), *recv = malloc(rsize * sizeof(int));
    int *counts = malloc(rsize * sizeof(int)), *displs = malloc(rsize * sizeof(int));
    for (int it = 0; it < 20; it++) {
        int v = rank + 1 + it, sum = 0, expected = 0;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, inter);
        for (int j = 0; j < rsize; j++) expected += remote0 + j + 1 + it;
        if (sum != expected) failures++;
        for (int j = 0; j < rsize; j++) send[j] = rank * 100 + j + it;
        MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, inter);
        for (int j = 0; j < rsize; j++)
            if (recv[j] != (remote0 + j) * 100 + lrank + it) failures++;
        for (int j = 0; j < rsize; j++) {
            counts[j] = 1;
            displs[j] = rsize - 1 - j;
        }
        int mine = rank + it;
        MPI_Allgatherv(&mine, 1, MPI_INT, recv, counts, displs, MPI_INT, inter);
        for (int j = 0; j < rsize; j++)
            if (recv[rsize - 1 - j] != remote0 + j + it) failures++;
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "intercomm: results correct\n" : "intercomm: %d WRONG RESULTS\n", total);
    free(send); free(recv); free(counts); free(displs);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    MPI_Finalize();
    return failures != 0;
}
