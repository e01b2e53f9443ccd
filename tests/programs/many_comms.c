/* More communicators than the library keeps private duplicates of (comms::MAX_PRIVATE), and
 * not the same number on every rank: ranks 0 and 1 make PAIRS communicators of the two of them
 * (each then used by MPI_Allreduce calls, which tuning duplicates), then every rank duplicates
 * MPI_COMM_WORLD and uses it. Rank 2 may still make a duplicate of it where ranks 0 and 1 may
 * not: the ranks must agree not to (a rank that made one alone would wait in it). Prints
 * "many_comms: results correct".
 * usage: many_comms [calls per communicator (default 30)] (3 ranks or more) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define PAIRS 150

static int allreduces(MPI_Comm comm, int calls)
{
    int rank, size, failures = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < calls; i++) {
        double in[4] = {rank + i, 1, 2, 3}, out[4];
        MPI_Allreduce(in, out, 4, MPI_DOUBLE, MPI_SUM, comm);
        if (out[0] != size * i + size * (size - 1) / 2.0 || out[1] != size) failures++;
    }
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 30;
    int rank, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm pairs[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pairs[i]);
        if (pairs[i] != MPI_COMM_NULL) failures += allreduces(pairs[i], calls);
    }
    MPI_Comm all;
    MPI_Comm_dup(MPI_COMM_WORLD, &all);
    failures += allreduces(all, calls);
    MPI_Comm_free(&all);
    for (int i = 0; i < PAIRS; i++)
        if (pairs[i] != MPI_COMM_NULL) MPI_Comm_free(&pairs[i]);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "many_comms: results correct\n" : "many_comms: %d WRONG RESULTS\n", total);
    MPI_Finalize();
    return total != 0;
}
