/* A program that uses every communicator context MPI has: it duplicates MPI_COMM_WORLD (under
 * MPI_ERRORS_RETURN) until MPI refuses or MAX_COMMS are made, then runs MPI_Allreduce calls on
 * one of them with the default handler, MPI_ERRORS_ARE_FATAL. Natively they succeed. The
 * library's private duplicate of that communicator cannot be made (no context is left): the
 * failure must not reach the application's fatal handler, and the calls must run natively.
 * Prints "contexts_exhausted: N communicators, MPI refused more: yes|no" (MPICH has about 2000
 * contexts; Open MPI allows more than MAX_COMMS) and "contexts_exhausted: results correct".
 * usage: contexts_exhausted [calls (default 40)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_COMMS 4096

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 40;
    int rank, size, failures = 0, made = 0, refused = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm *comms = malloc(MAX_COMMS * sizeof(MPI_Comm));
    while (made < MAX_COMMS && !refused) {
        if (MPI_Comm_dup(MPI_COMM_WORLD, &comms[made]) == MPI_SUCCESS)
            made++;
        else
            refused = 1;
    }
    MPI_Comm comm = comms[made - 1];
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
    for (int i = 0; i < calls; i++) {
        double in[4] = {rank + i, 1, 2, 3}, out[4];
        MPI_Allreduce(in, out, 4, MPI_DOUBLE, MPI_SUM, comm);
        if (out[0] != size * i + size * (size - 1) / 2.0 || out[1] != size) failures++;
    }
    for (int i = 0; i < made; i++) MPI_Comm_free(&comms[i]);
    free(comms);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("contexts_exhausted: %d communicators, MPI refused more: %s\n", made,
               refused ? "yes" : "no");
        printf(total == 0 ? "contexts_exhausted: results correct\n"
                          : "contexts_exhausted: %d WRONG RESULTS\n", total);
    }
    MPI_Finalize();
    return total != 0;
}
