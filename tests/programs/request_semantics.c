/* What the MPI standard promises about nonblocking requests, checked on repeated exchanges of
 * strided (MPI_Type_vector) data, so that every halo codelet applies: a message shorter than the
 * receive leaves the rest of the buffer unchanged and the status counts what arrived;
 * MPI_Request_get_status reporting completion means the data is in the buffer; a cancelled
 * receive leaves the buffer unchanged; a send freed with MPI_Request_free still arrives; a
 * request polled with MPI_Request_get_status and then completed reports its message both times.
 * A barrier ends each iteration (where ranks may agree on the `neighbor` codelet).
 * Run with 2 ranks; rank 0 prints "request_semantics: results correct". */
#include <mpi.h>
#include <stdio.h>

#define ITERATIONS 6
#define ROWS 8
#define STRIDE 3

static int failures;

static void fail(const char *what, int it)
{
    fprintf(stderr, "iteration %d: %s\n", it, what);
    failures++;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int peer = 1 - rank;
    /* One column of a ROWS x STRIDE matrix. */
    MPI_Datatype column;
    MPI_Type_vector(ROWS, 1, STRIDE, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);
    /* Room for 2 columns: the second starts one column extent ((ROWS-1)*STRIDE+1) later. */
    double out[ROWS * STRIDE], in[2 * ROWS * STRIDE], idle[ROWS * STRIDE];

    for (int it = 0; it < ITERATIONS; it++) {
        for (int i = 0; i < ROWS * STRIDE; i++) {
            out[i] = rank * 100 + it + i;
            idle[i] = -1.0;
        }
        for (int i = 0; i < 2 * ROWS * STRIDE; i++)
            in[i] = -1.0;
        /* A short message: 4 doubles into a receive of 2 columns (16 doubles). */
        MPI_Request requests[3];
        MPI_Status statuses[3];
        MPI_Irecv(in, 2, column, peer, 1, MPI_COMM_WORLD, &requests[0]);
        MPI_Isend(out, 4, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, &requests[1]);
        /* A receive that nothing matches, cancelled below. */
        MPI_Irecv(idle, 1, column, peer, 77, MPI_COMM_WORLD, &requests[2]);
        MPI_Cancel(&requests[2]);
        int flag = 0;
        while (!flag)
            MPI_Request_get_status(requests[0], &flag, MPI_STATUS_IGNORE);
        /* Complete now: the data must be there before MPI_Wait. */
        for (int i = 0; i < 4; i++)
            if (in[i * STRIDE] != peer * 100 + it + i)
                fail("data missing after MPI_Request_get_status", it);
        MPI_Waitall(3, requests, statuses);
        int count;
        MPI_Get_count(&statuses[0], MPI_DOUBLE, &count);
        if (count != 4)
            fail("the status does not count the 4 doubles received", it);
        for (int i = 0; i < 2 * ROWS * STRIDE; i++)
            if ((i % STRIDE != 0 || i >= 4 * STRIDE) && in[i] != -1.0)
                fail("a short message changed the buffer beyond its 4 elements", it);
        int cancelled;
        MPI_Test_cancelled(&statuses[2], &cancelled);
        for (int i = 0; i < ROWS * STRIDE; i++)
            if (idle[i] != -1.0)
                fail("a cancelled receive changed its buffer", it);
        if (!cancelled)
            fail("the unmatched receive was not cancelled", it);

        /* A freed send still arrives. */
        MPI_Request send, recv;
        MPI_Irecv(in, 1, column, peer, 2, MPI_COMM_WORLD, &recv);
        MPI_Isend(out, 1, column, peer, 2, MPI_COMM_WORLD, &send);
        MPI_Request_free(&send);
        if (send != MPI_REQUEST_NULL)
            fail("MPI_Request_free did not set MPI_REQUEST_NULL", it);
        /* Polled to completion, then completed: both report the message. */
        MPI_Status polled, waited;
        for (flag = 0; !flag;)
            MPI_Request_get_status(recv, &flag, &polled);
        MPI_Wait(&recv, &waited);
        for (MPI_Status *s = &polled; s; s = s == &polled ? &waited : NULL) {
            MPI_Get_count(s, column, &count);
            if (s->MPI_SOURCE != peer || s->MPI_TAG != 2 || count != 1)
                fail("the status does not describe the received column", it);
        }
        if (recv != MPI_REQUEST_NULL)
            fail("MPI_Wait did not set MPI_REQUEST_NULL", it);
        for (int i = 0; i < ROWS; i++)
            if (in[i * STRIDE] != peer * 100 + it + i * STRIDE)
                fail("wrong data after a freed send", it);
        /* The freed send's buffer is reused next iteration: make sure it was delivered. */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Type_free(&column);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "request_semantics: results correct\n"
                          : "request_semantics: WRONG RESULTS\n");
    MPI_Finalize();
    return total != 0;
}
