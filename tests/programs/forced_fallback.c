/* A forced codelet whose requirement fails must fall back to native with correct results.
 *
 * Run with COMMTUNE_FORCE=allreduce=<codelet needing a commutative op> (ring, rabenseifner):
 *   - MPI_Allreduce with a user-defined NON-commutative operation (product of 2x2 matrices of
 *     unsigned ints, wrap-around: exactly associative, order matters): the codelet must not run;
 *     native must, in rank order (marker "noncommutative");
 *   - MPI_Allreduce(MPI_SUM) on ints, where the forced codelet does run (marker "commutative").
 * Results are checked against the product/sum computed locally in rank order and against
 * PMPI_Allreduce (not intercepted). Prints "forced_fallback: results correct" or one line per
 * wrong result, and exits 1 on failure.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALLS 3

static void mat_mul(const uint32_t *a, const uint32_t *b, uint32_t *c)
{
    uint32_t r0 = a[0] * b[0] + a[1] * b[2], r1 = a[0] * b[1] + a[1] * b[3];
    uint32_t r2 = a[2] * b[0] + a[3] * b[2], r3 = a[2] * b[1] + a[3] * b[3];
    c[0] = r0;
    c[1] = r1;
    c[2] = r2;
    c[3] = r3;
}

/* inout = in x inout (in: the lower ranks' operand) */
static void mat_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    uint32_t *a = in, *b = inout;
    for (int k = 0; k < *len; k++) mat_mul(a + 4 * k, b + 4 * k, b + 4 * k);
}

static uint32_t value(int rank, int k, int e)
{
    uint64_t x = (uint64_t)rank * 1000003u + (uint64_t)k * 97u + (uint64_t)e * 7919u + 12345u;
    x ^= x >> 13;
    x *= 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(x >> 29);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat);
    MPI_Type_commit(&mat);
    MPI_Op op;
    MPI_Op_create(mat_fn, 0, &op);
    MPI_Comm ref;
    PMPI_Comm_dup(MPI_COMM_WORLD, &ref);

    const int counts[] = {1, 5, 1000};
    for (int c = 0; c < 3; c++) {
        int n = counts[c];
        uint32_t *in = malloc(16 * n), *out = malloc(16 * n), *nat = malloc(16 * n);
        uint32_t *exp = malloc(16 * n);
        for (int k = 0; k < n; k++)
            for (int e = 0; e < 4; e++) in[4 * k + e] = value(rank, k, e);
        for (int k = 0; k < n; k++) {
            uint32_t acc[4] = {1, 0, 0, 1}, m[4];
            for (int r = 0; r < size; r++) {
                for (int e = 0; e < 4; e++) m[e] = value(r, k, e);
                mat_mul(acc, m, acc);
            }
            memcpy(exp + 4 * k, acc, 16);
        }
        for (int call = 0; call < CALLS; call++) {
            memset(out, 0, 16 * n);
            MPI_Allreduce(in, out, n, mat, op, MPI_COMM_WORLD); /* SITE:noncommutative */
            PMPI_Allreduce(in, nat, n, mat, op, ref);
            if (memcmp(out, exp, 16 * n) || memcmp(nat, exp, 16 * n)) {
                printf("forced_fallback: rank %d: non-commutative count %d: wrong result (%s)\n",
                       rank, n, memcmp(nat, exp, 16 * n) ? "native also wrong" : "native right");
                failures++;
            }
        }
        int *iin = malloc(sizeof(int) * n * 4), *iout = malloc(sizeof(int) * n * 4);
        for (int i = 0; i < 4 * n; i++) iin[i] = rank * 31 + i;
        for (int call = 0; call < CALLS; call++) {
            MPI_Allreduce(iin, iout, 4 * n, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* SITE:commutative */
            for (int i = 0; i < 4 * n; i++) {
                int want = 31 * size * (size - 1) / 2 + size * i;
                if (iout[i] != want) {
                    printf("forced_fallback: rank %d: sum count %d element %d: %d, expected %d\n",
                           rank, 4 * n, i, iout[i], want);
                    failures++;
                    break;
                }
            }
        }
        free(in);
        free(out);
        free(nat);
        free(exp);
        free(iin);
        free(iout);
    }
    int total = 0;
    PMPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, ref);
    if (rank == 0 && total == 0) printf("forced_fallback: results correct\n");
    PMPI_Comm_free(&ref);
    MPI_Op_free(&op);
    MPI_Type_free(&mat);
    MPI_Finalize();
    return total ? 1 : 0;
}
