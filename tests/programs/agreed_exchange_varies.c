/* A ring exchange, the same messages at every step, with an MPI_Barrier after each step (where
 * the ranks agree on the halo codelet `neighbor`), that rank 1 posts differently now and then in
 * ways its peers cannot see:
 *
 *   free   one step in five it frees its send request (MPI_Request_free) right after posting it,
 *          before it posts its receive, and waits for the receive alone;
 *   types  its sends use a derived datatype (8 contiguous doubles), which one step in seven it
 *          frees and makes again after making another, so that it comes back with another handle.
 *
 * And, on every rank alike:
 *
 *   prefix before each step's exchange a lone send of the exchange's first message, completed by
 *          MPI_Wait and received by MPI_Recv: an exchange of its own, whose message begins the
 *          agreed exchange's.
 *
 * Every rank sends 8 doubles to its right neighbour and receives 8 from its left (tag 0), send
 * first; every received value is checked. Usage: agreed_exchange_varies free|types|prefix. Rank 0
 * prints "agreed_exchange_varies: results correct". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define STEPS 200
#define N 8
#define SPARE_TYPES 64

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int frees = argc > 1 && strcmp(argv[1], "free") == 0;
    int types = argc > 1 && strcmp(argv[1], "types") == 0;
    int prefix = argc > 1 && strcmp(argv[1], "prefix") == 0;
    int left = (rank + size - 1) % size, right = (rank + 1) % size, failures = 0;
    MPI_Datatype eight, spare[SPARE_TYPES];
    int spares = 0;
    MPI_Type_contiguous(N, MPI_DOUBLE, &eight);
    MPI_Type_commit(&eight);
    double out[N], in[N];
    for (int step = 0; step < STEPS; step++) {
        if (types && rank == 1 && step % 7 == 5 && spares < SPARE_TYPES) {
            MPI_Type_free(&eight);
            MPI_Type_contiguous(1, MPI_DOUBLE, &spare[spares++]);
            MPI_Type_contiguous(N, MPI_DOUBLE, &eight);
            MPI_Type_commit(&eight);
        }
        for (int i = 0; i < N; i++) {
            out[i] = rank * 1000 + step * 10 + i;
            in[i] = -1;
        }
        if (prefix) {
            double lone[N];
            MPI_Request request;
            MPI_Isend(out, 1, eight, right, 0, MPI_COMM_WORLD, &request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
            MPI_Recv(lone, N, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < N; i++)
                if (lone[i] != left * 1000 + step * 10 + i) failures++;
        }
        MPI_Request requests[2];
        MPI_Status statuses[2];
        MPI_Isend(out, 1, eight, right, 0, MPI_COMM_WORLD, &requests[0]);
        int freed = frees && rank == 1 && step % 5 == 3;
        if (freed) MPI_Request_free(&requests[0]);
        MPI_Irecv(in, N, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, &requests[1]);
        if (freed)
            MPI_Wait(&requests[1], &statuses[1]);
        else
            MPI_Waitall(2, requests, statuses);
        for (int i = 0; i < N; i++)
            if (in[i] != left * 1000 + step * 10 + i) failures++;
        /* Every receive of this step has completed, so a freed send has arrived: `out` may
         * change. */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Type_free(&eight);
    for (int i = 0; i < spares; i++) MPI_Type_free(&spare[i]);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all) printf("agreed_exchange_varies: %d wrong values\n", all);
    if (rank == 0 && !all) printf("agreed_exchange_varies: results correct\n");
    MPI_Finalize();
    return all != 0;
}
