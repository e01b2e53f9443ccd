/* Halo episodes that post their send first and then make MPI calls that only return once the
 * peer got that send. Under a codelet that holds sends back (irecv_first) each phase deadlocks
 * unless every MPI call posts held-back operations first. Run with 2 ranks; each phase checks
 * the data it received and rank 0 prints "deferral: results correct".
 *
 * Per iteration, rank 0 posts Isend(to 1) first and then, before its own Irecv, waits for rank 1
 * in a way that needs that message: a blocking MPI_Recv, MPI_Test polling on the send request,
 * MPI_Request_get_status polling, or MPI_Iprobe polling for rank 1's reply. Rank 1 receives the
 * halo message with a blocking MPI_Recv, then replies. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define ITERATIONS 12
#define N 64

static int failures;

static void check(const double *got, double expected, const char *phase, int it)
{
    for (int i = 0; i < N; i++)
        if (got[i] != expected + i) {
            fprintf(stderr, "%s iteration %d: element %d is %g, expected %g\n", phase, it, i,
                    got[i], expected + i);
            failures++;
            return;
        }
}

static void wait_for_peer(const char *how, MPI_Request *send)
{
    int flag = 0, reply;
    if (!strcmp(how, "recv")) {
        MPI_Recv(&reply, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
    }
    if (!strcmp(how, "test")) {
        while (!flag)
            MPI_Test(send, &flag, MPI_STATUS_IGNORE);
    } else if (!strcmp(how, "get_status")) {
        while (!flag)
            MPI_Request_get_status(*send, &flag, MPI_STATUS_IGNORE);
    } else if (!strcmp(how, "iprobe")) {
        while (!flag)
            MPI_Iprobe(1, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Recv(&reply, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void phase(const char *how)
{
    int rank;
    double out[N], in[N];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int it = 0; it < ITERATIONS; it++) {
        for (int i = 0; i < N; i++)
            out[i] = rank * 1000 + it * 10 + i;
        if (rank == 0) {
            MPI_Request requests[2];
            MPI_Status statuses[2];
            MPI_Isend(out, N, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, &requests[0]);
            wait_for_peer(how, &requests[0]);
            MPI_Irecv(in, N, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, statuses); /* SITE:deferral_waitall */
            if (requests[0] != MPI_REQUEST_NULL || requests[1] != MPI_REQUEST_NULL) {
                fprintf(stderr, "%s: a completed request is not MPI_REQUEST_NULL\n", how);
                failures++;
            }
            int count;
            MPI_Get_count(&statuses[1], MPI_DOUBLE, &count);
            if (count != N || statuses[1].MPI_SOURCE != 1 || statuses[1].MPI_TAG != 1) {
                fprintf(stderr, "%s: wrong receive status\n", how);
                failures++;
            }
            check(in, 1000 + it * 10, how, it);
        } else if (rank == 1) {
            int reply = it;
            MPI_Recv(in, N, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&reply, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
            MPI_Send(out, N, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
            check(in, it * 10, how, it);
        }
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "deferral: run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    phase("recv");
    phase("test");
    phase("get_status");
    phase("iprobe");
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "deferral: results correct\n" : "deferral: WRONG RESULTS\n");
    MPI_Finalize();
    return total != 0;
}
