/* A user-defined operation's handle reused: a commutative operation is freed after its
 * allreduce site settled (on ring, by injected delays), and a non-commutative one (composing
 * affine maps) is created,
 * which MPI may give the same handle, and reduced at the same site with the same count. Codelets
 * that reorder operands must not run it (ring kept running and gave wrong results).
 * Prints "op_reuse: results correct" and whether the handle came back.
 * usage: op_reuse [iterations per operation (default 200)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 64

static void add(void *in, void *inout, int *len, MPI_Datatype *type)
{
    for (int i = 0; i < *len; i++) ((double *)inout)[i] += ((double *)in)[i];
}

/* Composes affine maps x -> a x + b, stored as pairs (a, b): inout = in after inout, so the
 * result is rank 0's map after rank 1's after ... (exact in doubles for small integers). */
static void compose(void *in, void *inout, int *len, MPI_Datatype *type)
{
    double *f = in, *g = inout;
    for (int i = 0; i + 1 < *len; i += 2) {
        g[i + 1] = f[i] * g[i + 1] + f[i + 1];
        g[i] *= f[i];
    }
}

/* One call site for both operations. */
__attribute__((noinline)) static void reduce(const double *in, double *out, MPI_Op op)
{
    MPI_Allreduce(in, out, N, MPI_DOUBLE, op, MPI_COMM_WORLD); /* SITE:allreduce */
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 200;
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double in[N], out[N];
    MPI_Op sum, ordered;
    MPI_Op_create(add, 1, &sum);
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < N; i++) in[i] = rank * 1000 + it + i;
        reduce(in, out, sum);
        for (int i = 0; i < N; i++)
            if (out[i] != 1000.0 * size * (size - 1) / 2 + (double)size * (it + i)) failures++;
    }
    MPI_Op freed = sum;
    MPI_Op_free(&sum);
    MPI_Op_create(compose, 0, &ordered);
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < N; i += 2) {
            in[i] = 2;
            in[i + 1] = rank + it + i;
        }
        reduce(in, out, ordered);
        for (int i = 0; i < N; i += 2) {
            double a = 1, b = 0; /* rank 0's map after ..., built from the last rank down */
            for (int r = size - 1; r >= 0; r--) {
                b = 2 * b + r + it + i;
                a *= 2;
            }
            if (out[i] != a || out[i + 1] != b) failures++;
        }
    }
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("op_reuse: handle %s\n", ordered == freed ? "reused" : "not reused");
        printf(total == 0 ? "op_reuse: results correct\n" : "op_reuse: %d WRONG RESULTS\n", total);
    }
    MPI_Op_free(&ordered);
    MPI_Finalize();
    return total != 0;
}
