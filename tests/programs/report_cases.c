/* Cases for what the report claims (tests/report.rs).
 * usage: report_cases imbalance SLOW FAST   SLOW allreduces the last rank enters 30 ms late (the
 *                                           others wait inside the call), then FAST prompt ones
 *        report_cases queue                 one allreduce searched while another, called in
 *                                           between for a while, waits for its checkpoint
 *        report_cases abort                 a few allreduces, then the last rank calls
 *                                           MPI_Abort(MPI_COMM_WORLD, 3) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size, failures;

static void allreduce(int n)
{
    double in[64], out[64];
    for (int i = 0; i < n; i++) in[i] = rank + i;
    MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* SITE:allreduce */
    for (int i = 0; i < n; i++)
        if (out[i] != size * (size - 1) / 2.0 + (double)size * i) failures++;
}

static void other(void)
{
    double in[16], out[16];
    for (int i = 0; i < 16; i++) in[i] = rank;
    MPI_Allreduce(in, out, 16, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* SITE:waiting */
    if (out[0] != size - 1) failures++;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "imbalance") && argc > 3) {
        int slow = atoi(argv[2]), fast = atoi(argv[3]);
        for (int it = 0; it < slow + fast; it++) {
            if (it < slow && rank == size - 1) usleep(30000);
            allreduce(8);
        }
    } else if (!strcmp(what, "queue")) {
        /* The first allreduce alone is ready first and gets the checkpoint; its search then
         * outlasts the stretch where the other is called too. */
        for (int it = 0; it < 10; it++) allreduce(8);
        for (int it = 0; it < 20; it++) {
            allreduce(8);
            other();
        }
        for (int it = 0; it < 200; it++) allreduce(8);
    } else if (!strcmp(what, "abort")) {
        for (int it = 0; it < 5; it++) allreduce(8);
        if (rank == size - 1) MPI_Abort(MPI_COMM_WORLD, 3);
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        fprintf(stderr, "usage: report_cases imbalance SLOW FAST | queue | abort\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "report_cases: results correct\n" : "report_cases: %d WRONG\n", total);
    MPI_Finalize();
    return failures != 0;
}
