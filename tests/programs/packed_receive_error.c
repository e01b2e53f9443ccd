/* A completion call that fails for one of its messages: rank 1 receives two strided messages
 * from rank 0, the second with room for half of what rank 0 sends (MPI_ERR_TRUNCATE), under an
 * error handler that counts its calls and returns (once per failed call, as natively). Pairs of
 * episodes take turns between the ways to complete them: one MPI_Waitall (which returns
 * MPI_ERR_IN_STATUS), MPI_Waitany, MPI_Waitsome, MPI_Wait on each, MPI_Testall, MPI_Testsome,
 * MPI_Testany or MPI_Test on each, until both requests are MPI_REQUEST_NULL. The first message
 * completed without error and its data must be in place, whichever way it was posted (`pack`
 * posts it as MPI_PACKED bytes and unpacks it at completion; `pairwise` completes it in a step
 * before the completion call; `persistent` posts a persistent request of the library's, which
 * must come back as MPI_REQUEST_NULL as the application's own would). Exactly one of the calls
 * fails, and the statuses name the truncated message. In odd episodes rank 0 posts 20 ms late,
 * so that the completion call itself fails (`pairwise` waits 5 ms for a step). After each, rank 1
 * receives one more message from rank 0 with MPI_ANY_SOURCE, which the library posts as it is:
 * MPI may give it the handle of a request the failed call freed. Repeated, so that handles come
 * back. Prints "packed_receive_error: results correct".
 * usage: packed_receive_error [episodes (default 32)] */
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

enum { WAITALL, WAITANY, WAITSOME, WAIT, TESTALL, TESTSOME, TESTANY, TEST, METHODS };
static const char *const method_names[METHODS] = {
    "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome", "MPI_Wait",
    "MPI_Testall", "MPI_Testsome", "MPI_Testany", "MPI_Test"};

/* The error class of `code`. */
static int class_of(int code)
{
    int class = MPI_SUCCESS;
    MPI_Error_class(code, &class);
    return class;
}

/* Checks the status of request `index` after a call that returned MPI_ERR_IN_STATUS: the second
 * message truncated, the first not (or still pending, for a later call). Returns the number of
 * wrong results. */
static int check_status(int index, const MPI_Status *status)
{
    int class = class_of(status->MPI_ERROR);
    return class != MPI_ERR_PENDING && (class == MPI_ERR_TRUNCATE) != (index == 1);
}

/* Completes rank 1's two receives by `method` until both are MPI_REQUEST_NULL; says what went
 * wrong and returns the number of wrong results. */
static int complete(int method, MPI_Request *requests, int episode)
{
    int failures = 0, failed_calls = 0;
    double start = MPI_Wtime();
    while (requests[0] != MPI_REQUEST_NULL || requests[1] != MPI_REQUEST_NULL) {
        MPI_Status statuses[2];
        int rc, flag = 1, index = MPI_UNDEFINED, count = 0, indices[2];
        switch (method) {
        case WAITALL:
            rc = MPI_Waitall(2, requests, statuses);
            count = 2, indices[0] = 0, indices[1] = 1;
            break;
        case TESTALL:
            rc = MPI_Testall(2, requests, &flag, statuses);
            if (flag || rc != MPI_SUCCESS) count = 2, indices[0] = 0, indices[1] = 1;
            break;
        case WAITSOME:
            rc = MPI_Waitsome(2, requests, &count, indices, statuses);
            break;
        case TESTSOME:
            rc = MPI_Testsome(2, requests, &count, indices, statuses);
            break;
        case WAITANY:
            rc = MPI_Waitany(2, requests, &index, &statuses[0]);
            break;
        case TESTANY:
            rc = MPI_Testany(2, requests, &index, &flag, &statuses[0]);
            break;
        default: /* WAIT, TEST: the first request not yet completed */
            index = requests[0] != MPI_REQUEST_NULL ? 0 : 1;
            if (method == WAIT)
                rc = MPI_Wait(&requests[index], &statuses[0]);
            else if ((rc = MPI_Test(&requests[index], &flag, &statuses[0])) == MPI_SUCCESS && !flag)
                index = MPI_UNDEFINED;
            break;
        }
        if (rc != MPI_SUCCESS) failed_calls++;
        if (method == WAITANY || method == TESTANY || method == WAIT || method == TEST) {
            /* A single completion returns the request's error; its status need not hold it. */
            if (index == MPI_UNDEFINED && flag) {
                printf("packed_receive_error: episode %d: %s found nothing to complete\n",
                       episode, method_names[method]);
                return failures + 1;
            }
            if (index != MPI_UNDEFINED && (class_of(rc) == MPI_ERR_TRUNCATE) != (index == 1))
                failures++;
            continue;
        }
        if (count == MPI_UNDEFINED) {
            printf("packed_receive_error: episode %d: %s found nothing to complete\n", episode,
                   method_names[method]);
            return failures + 1;
        }
        if (rc != MPI_SUCCESS && class_of(rc) != MPI_ERR_IN_STATUS) {
            printf("packed_receive_error: episode %d: %s returned class %d\n", episode,
                   method_names[method], class_of(rc));
            failures++;
        }
        /* Without an error, a call need not set the statuses' error fields. */
        for (int k = 0; rc != MPI_SUCCESS && k < count; k++)
            failures += check_status(indices[k], &statuses[k]);
        if (MPI_Wtime() - start > 60) {
            printf("packed_receive_error: episode %d: %s never completed both\n", episode,
                   method_names[method]);
            return failures + 1;
        }
    }
    if (failed_calls != 1) {
        printf("packed_receive_error: episode %d: %s failed %d times\n", episode,
               method_names[method], failed_calls);
        failures++;
    }
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int episodes = argc > 1 ? atoi(argv[1]) : 32;
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
            failures += complete(e / 2 % METHODS, requests, e);
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
