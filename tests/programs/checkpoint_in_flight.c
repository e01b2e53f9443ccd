/* Checkpoints whose reduction is still in flight when the program stops calling: communicators
 * freed a few calls after their first checkpoint (the last one just after the search it started
 * began), and MPI_COMM_WORLD finalized likewise. Every result is checked.
 * usage: checkpoint_in_flight [calls per communicator (default 6)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int allreduces(MPI_Comm comm, int calls, int tag)
{
    int rank, size, failures = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < calls; i++) {
        double in = rank + i + tag, out = 0;
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, comm);
        if (out != size * (size - 1) / 2.0 + (double)size * (i + tag)) failures++;
    }
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 6;
    int rank, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int round = 0; round < 3; round++) {
        MPI_Comm comm;
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        failures += allreduces(comm, calls + 2 * round, round);
        MPI_Comm_free(&comm);
    }
    failures += allreduces(MPI_COMM_WORLD, calls, 10);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "checkpoint_in_flight: results correct\n" : "checkpoint_in_flight: %d WRONG RESULTS\n", total);
    MPI_Finalize();
    return failures != 0;
}
