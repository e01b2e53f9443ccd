/* Exits without MPI_Finalize: the report must come from the at-exit fallback. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int v = 1, sum = 0;
    for (int i = 0; i < 3; i++) MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce */
    printf("no_finalize: sum %d\n", sum);
    exit(0);
}
