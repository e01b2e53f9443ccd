/* The bundled example: a 2-D Jacobi stencil on a 2-D process grid, the kind of program commtune
 * is for. Each iteration exchanges halos with up to four neighbours (MPI_Isend/MPI_Irecv +
 * MPI_Waitall; rows are contiguous, columns an MPI_Type_vector), every 10 iterations the residual
 * is summed with MPI_Allreduce, and every 50 a load summary is exchanged with MPI_Alltoall and
 * row samples of varying length are collected with MPI_Allgatherv. The program checks what it
 * can and prints a checksum that does not depend on the number of ranks' timing.
 *
 * usage: stencil [points per rank side (default 128)] [iterations (default 200)] */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define AT(i, j) ((i) * (n + 2) + (j))

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 128;
    int iterations = argc > 2 ? atoi(argv[2]) : 200;
    int size, rank, dims[2] = {0, 0}, periods[2] = {0, 0};
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &grid);
    MPI_Comm_rank(grid, &rank);
    int north, south, west, east;
    MPI_Cart_shift(grid, 0, 1, &north, &south);
    MPI_Cart_shift(grid, 1, 1, &west, &east);

    MPI_Datatype column;
    MPI_Type_vector(n, 1, n + 2, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);

    double *u = calloc((n + 2) * (n + 2), sizeof(double));
    double *v = calloc((n + 2) * (n + 2), sizeof(double));
    int coords[2];
    MPI_Cart_coords(grid, rank, 2, coords);
    if (coords[0] == 0) /* hot top boundary of the global domain */
        for (int j = 0; j < n + 2; j++) u[AT(0, j)] = v[AT(0, j)] = 100.0;

    int failures = 0;
    double residual = 0.0;
    double *load = malloc(size * sizeof(double)), *loads = malloc(size * sizeof(double));
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), total = 0;
    for (int p = 0; p < size; p++) {
        counts[p] = p + 1;
        displs[p] = total;
        total += p + 1;
    }
    double *samples = malloc(total * sizeof(double)), mine[64];

    for (int it = 1; it <= iterations; it++) {
        MPI_Request req[8];
        MPI_Irecv(&u[AT(0, 1)], n, MPI_DOUBLE, north, 0, grid, &req[0]);
        MPI_Irecv(&u[AT(n + 1, 1)], n, MPI_DOUBLE, south, 1, grid, &req[1]);
        MPI_Irecv(&u[AT(1, 0)], 1, column, west, 2, grid, &req[2]);
        MPI_Irecv(&u[AT(1, n + 1)], 1, column, east, 3, grid, &req[3]);
        MPI_Isend(&u[AT(1, 1)], n, MPI_DOUBLE, north, 1, grid, &req[4]);
        MPI_Isend(&u[AT(n, 1)], n, MPI_DOUBLE, south, 0, grid, &req[5]);
        MPI_Isend(&u[AT(1, 1)], 1, column, west, 3, grid, &req[6]);
        MPI_Isend(&u[AT(1, n)], 1, column, east, 2, grid, &req[7]);
        MPI_Waitall(8, req, MPI_STATUSES_IGNORE);

        double local = 0.0;
        for (int i = 1; i <= n; i++)
            for (int j = 1; j <= n; j++) {
                v[AT(i, j)] = 0.25 * (u[AT(i - 1, j)] + u[AT(i + 1, j)] + u[AT(i, j - 1)] + u[AT(i, j + 1)]);
                local += fabs(v[AT(i, j)] - u[AT(i, j)]);
            }
        for (int i = 1; i <= n; i++)
            for (int j = 1; j <= n; j++) u[AT(i, j)] = v[AT(i, j)];

        if (it % 10 == 0) MPI_Allreduce(&local, &residual, 1, MPI_DOUBLE, MPI_SUM, grid);

        if (it % 50 == 0) {
            for (int p = 0; p < size; p++) load[p] = rank * 1000.0 + p + local;
            MPI_Alltoall(load, 1, MPI_DOUBLE, loads, 1, MPI_DOUBLE, grid);
            for (int p = 0; p < size; p++)
                if (loads[p] - p * 1000.0 - rank < 0) failures++;
            for (int k = 0; k <= rank && k < 64; k++) mine[k] = rank + k * 0.5;
            MPI_Allgatherv(mine, rank + 1, MPI_DOUBLE, samples, counts, displs, MPI_DOUBLE, grid);
            for (int p = 0; p < size; p++)
                if (samples[displs[p]] != p) failures++;
        }
    }

    double sum = 0.0, checksum = 0.0;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= n; j++) sum += u[AT(i, j)];
    MPI_Reduce(&sum, &checksum, 1, MPI_DOUBLE, MPI_SUM, 0, grid);
    int all_failures = 0;
    MPI_Reduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, 0, grid);
    if (rank == 0) {
        printf("stencil: %d ranks (%dx%d), %dx%d points each, %d iterations\n", size, dims[0], dims[1], n, n, iterations);
        printf("stencil: checksum %.10e, residual %.6e, %s\n", checksum, residual,
               all_failures == 0 ? "checks passed" : "CHECKS FAILED");
    }
    MPI_Type_free(&column);
    MPI_Comm_free(&grid);
    free(u); free(v); free(load); free(loads); free(counts); free(displs); free(samples);
    MPI_Finalize();
    return all_failures != 0;
}
