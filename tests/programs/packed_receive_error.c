/* A completion call that fails for one of its messages: rank 1 receives two strided messages
 * from rank 0 in one MPI_Waitall, the second with room for half of what rank 0 sends
 * (MPI_ERR_TRUNCATE), under an error handler that counts its calls and returns (once per failed
 * MPI_Waitall, as natively). MPI_Waitall returns MPI_ERR_IN_STATUS; the first message
 * completed without error and its data must be in place, whichever way it was posted (`pack`
 * posts it as MPI_PACKED bytes and unpacks it at completion; `pairwise` completes it in a step
 * before MPI_Waitall). In odd episodes rank 0 posts 20 ms late, so that MPI_Waitall itself
 * fails (`pairwise` waits 5 ms for a step). After each, rank 1 receives one more message from
 * rank 0 with MPI_ANY_SOURCE, which the library posts as it is: MPI may give it the handle of a
 * request the failed call freed. Repeated, so that handles come back. Prints
 * "packed_receive_error: results correct".
 * usage: packed_receive_error [episodes (default 20)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ELEMENTS 32
#define STRIDE 2

static int handled;

static void count_calls(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    (void)code;
    handled++;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int episodes = argc > 1 ? atoi(argv[1]) : 20;
    int rank, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Errhandler counting;
    MPI_Comm_create_errhandler(count_calls, &counting);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, counting);
    MPI_Datatype strided;
    MPI_Type_vector(ELEMENTS, 1, STRIDE, MPI_DOUBLE, &strided);
    MPI_Type_commit(&strided);
    double *first = malloc(2 * ELEMENTS * STRIDE * sizeof(double));
    double *second = malloc(2 * ELEMENTS * STRIDE * sizeof(double));
    for (int e = 0; e < episodes; e++) {
        MPI_Request requests[2];
        MPI_Status statuses[2];
        if (rank == 0) {
            for (int i = 0; i < 2 * ELEMENTS * STRIDE; i++) first[i] = second[i] = e * 1e3 + i;
            if (e % 2) usleep(20000);
            MPI_Isend(first, 1, strided, 1, 1, MPI_COMM_WORLD, &requests[0]);
            MPI_Isend(second, 2, strided, 1, 2, MPI_COMM_WORLD, &requests[1]);
            if (MPI_Waitall(2, requests, statuses) != MPI_SUCCESS) failures++;
            double one = e;
            MPI_Send(&one, 1, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD);
        } else if (rank == 1) {
            for (int i = 0; i < 2 * ELEMENTS * STRIDE; i++) first[i] = second[i] = -1.0;
            MPI_Irecv(first, 1, strided, 0, 1, MPI_COMM_WORLD, &requests[0]);
            MPI_Irecv(second, 1, strided, 0, 2, MPI_COMM_WORLD, &requests[1]);
            int rc = MPI_Waitall(2, requests, statuses), class = MPI_SUCCESS;
            MPI_Error_class(rc, &class);
            if (class != MPI_ERR_IN_STATUS) {
                printf("packed_receive_error: episode %d: MPI_Waitall returned class %d\n", e, class);
                failures++;
            }
            if (statuses[0].MPI_ERROR != MPI_SUCCESS) failures++;
            MPI_Error_class(statuses[1].MPI_ERROR, &class);
            if (class != MPI_ERR_TRUNCATE) failures++;
            if (requests[0] != MPI_REQUEST_NULL || requests[1] != MPI_REQUEST_NULL) failures++;
            for (int i = 0; i < ELEMENTS * STRIDE; i++)
                if (first[i] != (i % STRIDE ? -1.0 : e * 1e3 + i)) failures++;
            double one = -1;
            MPI_Request any;
            MPI_Irecv(&one, 1, MPI_DOUBLE, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &any);
            if (MPI_Wait(&any, MPI_STATUS_IGNORE) != MPI_SUCCESS || any != MPI_REQUEST_NULL || one != e)
                failures++;
        }
    }
    if (handled != (rank == 1 ? episodes : 0)) {
        printf("packed_receive_error: rank %d: the error handler ran %d times\n", rank, handled);
        failures++;
    }
    int total = 0;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&counting);
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "packed_receive_error: results correct\n"
                          : "packed_receive_error: %d WRONG RESULTS\n", total);
    MPI_Type_free(&strided);
    free(first);
    free(second);
    MPI_Finalize();
    return total != 0;
}
