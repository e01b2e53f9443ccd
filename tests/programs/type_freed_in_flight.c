/* A halo exchange whose derived datatypes are freed while its messages are in flight: each
 * episode makes a strided vector type, posts its receives and sends with it, frees it
 * (MPI_Type_free, which the standard allows before the communication completes: it "will
 * complete normally") and then completes them with MPI_Waitall. A codelet that posts the
 * messages another way (`pack`: as MPI_PACKED bytes) still unpacks each receive at completion
 * and must not use the freed type; episode statistics read at completion must not either.
 * Every episode makes the same layout, so the key repeats and gets tuned (MPI may or may not
 * give the freed type's handle back); an MPI_Allreduce follows each (where ranks may agree on
 * `neighbor` from the episodes they recorded, types freed since). Prints
 * "type_freed_in_flight: results correct".
 * usage: type_freed_in_flight [episodes (default 200)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ELEMENTS 64
#define STRIDE 3

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int episodes = argc > 1 ? atoi(argv[1]) : 200;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    double *out = malloc(2 * ELEMENTS * STRIDE * sizeof(double));
    double *in = malloc(2 * ELEMENTS * STRIDE * sizeof(double));
    for (int e = 0; e < episodes; e++) {
        for (int i = 0; i < 2 * ELEMENTS * STRIDE; i++) {
            out[i] = rank * 1e6 + e * 1e3 + i;
            in[i] = -1.0;
        }
        MPI_Datatype strided;
        MPI_Type_vector(ELEMENTS, 1, STRIDE, MPI_DOUBLE, &strided);
        MPI_Type_commit(&strided);
        MPI_Request requests[4];
        MPI_Irecv(in, 1, strided, left, 1, MPI_COMM_WORLD, &requests[0]);
        MPI_Irecv(in + ELEMENTS * STRIDE, 1, strided, right, 2, MPI_COMM_WORLD, &requests[1]);
        MPI_Isend(out, 1, strided, right, 1, MPI_COMM_WORLD, &requests[2]);
        MPI_Isend(out + ELEMENTS * STRIDE, 1, strided, left, 2, MPI_COMM_WORLD, &requests[3]);
        MPI_Type_free(&strided);
        MPI_Status statuses[4];
        MPI_Waitall(4, requests, statuses);
        for (int i = 0; i < ELEMENTS * STRIDE; i++) {
            /* Strided elements come from the peer; the gaps keep what was there. */
            double from_left = i % STRIDE ? -1.0 : left * 1e6 + e * 1e3 + i;
            double from_right =
                i % STRIDE ? -1.0 : right * 1e6 + e * 1e3 + ELEMENTS * STRIDE + i;
            if (in[i] != from_left) failures++;
            if (in[ELEMENTS * STRIDE + i] != from_right) failures++;
        }
        int wrong = failures, any = 0;
        MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "type_freed_in_flight: results correct\n"
                          : "type_freed_in_flight: %d WRONG RESULTS\n", total);
    free(out);
    free(in);
    MPI_Finalize();
    return total != 0;
}
