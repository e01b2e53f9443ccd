/* Rank 0 forks after MPI_Init; its child (no MPI) calls exit() only after the parent's
 * MPI_Finalize wrote the report, and must leave the report alone: the library's at-exit fallback
 * runs in the child too (it replaced the job's report with rank 0's own data).
 * Prints "fork_child: child exited". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, v = 1, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < 5; i++) MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce */
    int finalized[2];
    pid_t child = -1;
    if (rank == 0) {
        if (pipe(finalized) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
        fflush(stdout);
        child = fork();
        if (child == 0) {
            char byte;
            close(finalized[1]);
            if (read(finalized[0], &byte, 1) != 1) _exit(1);
            exit(0);
        }
        close(finalized[0]);
    }
    MPI_Finalize();
    if (rank == 0) {
        if (write(finalized[1], "x", 1) != 1) return 1;
        int status = 1;
        waitpid(child, &status, 0);
        printf("fork_child: child exited (%d)\n", status);
    }
    return 0;
}
