/* Randomized differential test of MPI_Allreduce, MPI_Alltoall and MPI_Allgatherv under the
 * preload library, with the lifecycle of handles: every call goes through MPI_* (intercepted,
 * tuned) and is repeated with PMPI_* (not intercepted) on a PMPI duplicate of the same
 * communicator, into a copy of the receive buffer made before the call.
 *
 * Checks per call: both return MPI_SUCCESS; the whole receive allocation, guard zones of
 * GUARD bytes before and after the data included (and gaps between allgatherv blocks), is
 * bitwise equal to the reference's (the data are small integers, so every reduction order gives
 * the same bits); the send buffer is unchanged. Across ranks: every CHECK_EVERY calls the ranks
 * compare a digest of their allreduce and allgatherv results per communicator slot, which must
 * be equal on every rank of the communicator (PMPI, so the library sees nothing of it).
 *
 * What varies, from one seed: calls come from a pool of templates (so that keys repeat and get
 * tuned) drawn on one of three communicator slots (a duplicate of MPI_COMM_WORLD, an even/odd
 * split, a reversed split) that are freed and created again from time to time; counts and
 * operations (predefined on int/long long/double, and user-defined: a commutative sum and a
 * non-commutative composition of affine maps, both freed and created again); datatypes: each
 * rank describes the same type signature its own way (count of the base type, a contiguous
 * type, a vector of pairs) with types it creates, keeps for a while and frees (so handles come
 * back for types of other sizes); MPI_IN_PLACE; allgatherv displacements with gaps, per rank.
 * The same call site serves every communicator, type and size.
 *
 * usage: fuzz_collectives [--seconds S] [--seed N] [--max-calls N] [--min-calls N] (fuzz_common.h)
 * Prints "fuzz: FAIL ..." lines (at most 20) and "fuzz: N calls, M failures, seed S";
 * exits 1 when M > 0. */
#include "fuzz_common.h"

#include <stdio.h>

#define GUARD 64
#define SLOTS 3
#define TEMPLATES 24
#define CHECK_EVERY 64
#define MAX_BLOCK 300
#define KEPT_TYPES 6

static void fail(const char *what, long call)
{
    if (++failures <= 20) printf("fuzz: FAIL rank %d call %ld: %s\n", world_rank, call, what);
}

/* ------------------------------------------------------------------ communicators */

struct slot {
    MPI_Comm comm, reference;
    int rank, size;
    uint64_t digest; /* of this slot's allreduce/allgatherv results since the last check */
};
static struct slot slots[SLOTS];

static void slot_create(int i)
{
    struct slot *s = &slots[i];
    if (i == 0)
        MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    else
        MPI_Comm_split(MPI_COMM_WORLD, i == 1 ? world_rank % 2 : 0, i == 1 ? world_rank : -world_rank,
                       &s->comm);
    PMPI_Comm_dup(s->comm, &s->reference);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    s->digest = 0;
}

static void slot_free(int i)
{
    PMPI_Comm_free(&slots[i].reference);
    MPI_Comm_free(&slots[i].comm);
}

static void digest(struct slot *s, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) s->digest = (s->digest ^ p[i]) * 0x100000001b3ULL;
}

/* ------------------------------------------------------------------ datatypes */

/* Types this rank made and keeps for a while: freeing them later lets MPI hand their handles
 * out again for types of other sizes. */
static MPI_Datatype kept[KEPT_TYPES];
static int n_kept;

static void keep_or_free(MPI_Datatype t)
{
    if (t == MPI_INT || t == MPI_LONG_LONG || t == MPI_DOUBLE) return;
    if (pick(&local, 3) == 0 && n_kept < KEPT_TYPES) {
        kept[n_kept++] = t;
        return;
    }
    MPI_Type_free(&t);
    if (n_kept > 0 && pick(&local, 2) == 0) MPI_Type_free(&kept[--n_kept]);
}

/* `n` ints described this rank's way: *count elements of the returned type; with `whole` one
 * element may be all of them, else elements are single ints (Open MPI 4.1.4's allgatherv picks
 * its algorithm by the send datatype's size, so ranks whose elements differ in size would run
 * different algorithms natively and hang). */
static MPI_Datatype ints(int n, int whole, int *count)
{
    MPI_Datatype t;
    switch (n > 0 ? pick(&local, 3) : 0) {
    case 1:
        MPI_Type_contiguous(whole ? n : 1, MPI_INT, &t);
        *count = whole ? 1 : n;
        break;
    case 2:
        if (whole && n % 2 == 0) {
            MPI_Type_vector(n / 2, 2, 2, MPI_INT, &t); /* pairs, no gaps */
            *count = 1;
        } else {
            MPI_Type_vector(1, 1, 1, MPI_INT, &t);
            *count = n;
        }
        break;
    default:
        *count = n;
        return MPI_INT;
    }
    MPI_Type_commit(&t);
    return t;
}

/* ------------------------------------------------------------------ operations */

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t)
{
    for (int i = 0; i < *len; i++) ((long long *)inout)[i] += ((long long *)in)[i];
}

/* Pairs (a, b) are maps x -> a x + b; inout = in after inout (exact in 64-bit integers for the
 * small values used, wrapping otherwise, which is still associative). */
static void user_compose(void *in, void *inout, int *len, MPI_Datatype *t)
{
    unsigned long long *f = in, *g = inout;
    for (int i = 0; i + 1 < *len; i += 2) {
        g[i + 1] = f[i] * g[i + 1] + f[i + 1];
        g[i] *= f[i];
    }
}

static MPI_Op op_sum, op_compose;

/* ------------------------------------------------------------------ buffers */

/* A buffer of `n` data bytes between guard zones, and its reference twin. */
struct buf {
    unsigned char *mem, *ref;
    size_t n;
};

static struct buf buf_new(size_t n, unsigned char pattern)
{
    struct buf b = {malloc(n + 2 * GUARD), malloc(n + 2 * GUARD), n};
    memset(b.mem, pattern, n + 2 * GUARD);
    return b;
}

static void *data(struct buf *b) { return b->mem + GUARD; }
static void *ref(struct buf *b) { return b->ref + GUARD; }
static void twin(struct buf *b) { memcpy(b->ref, b->mem, b->n + 2 * GUARD); }

static void compare(struct buf *b, const char *what, long call)
{
    if (memcmp(b->mem, b->ref, b->n + 2 * GUARD) != 0) fail(what, call);
}

static void buf_free(struct buf *b)
{
    free(b->mem);
    free(b->ref);
}

static void check_rc(int rc, int ref_rc, const char *what, long call)
{
    if (rc != MPI_SUCCESS || ref_rc != MPI_SUCCESS) fail(what, call);
}

/* ------------------------------------------------------------------ the calls */

struct template {
    int op;    /* 0 allreduce, 1 alltoall, 2 allgatherv */
    int slot;  /* communicator slot */
    int n;     /* elements (allreduce), ints per block (alltoall), max ints per rank (allgatherv) */
    int base;  /* allreduce: 0 int, 1 long long, 2 double */
    int red;   /* allreduce: 0 SUM, 1 MAX, 2 MIN, 3 BAND, 4 user sum, 5 user compose */
    int in_place;
};

/* One call site for everything. */
__attribute__((noinline)) static int call_allreduce(const void *s, void *r, int n, MPI_Datatype t,
                                                     MPI_Op o, MPI_Comm c)
{
    return MPI_Allreduce(s, r, n, t, o, c); /* SITE:allreduce */
}

__attribute__((noinline)) static int call_alltoall(const void *s, int sc, MPI_Datatype st, void *r,
                                                    int rc, MPI_Datatype rt, MPI_Comm c)
{
    return MPI_Alltoall(s, sc, st, r, rc, rt, c); /* SITE:alltoall */
}

__attribute__((noinline)) static int call_allgatherv(const void *s, int sc, MPI_Datatype st, void *r,
                                                      const int *counts, const int *displs,
                                                      MPI_Datatype rt, MPI_Comm c)
{
    return MPI_Allgatherv(s, sc, st, r, counts, displs, rt, c); /* SITE:allgatherv */
}

static void allreduce(const struct template *t, struct slot *s, long call)
{
    static const size_t sizes[] = {sizeof(int), sizeof(long long), sizeof(double)};
    MPI_Datatype type = t->red >= 4 ? MPI_LONG_LONG : t->base == 0 ? MPI_INT : t->base == 1 ? MPI_LONG_LONG : MPI_DOUBLE;
    int base = t->red >= 4 ? 1 : t->base;
    if (t->red == 3 && base == 2) type = MPI_LONG_LONG, base = 1; /* no BAND on doubles */
    MPI_Op op = t->red == 0 ? MPI_SUM : t->red == 1 ? MPI_MAX : t->red == 2 ? MPI_MIN
              : t->red == 3 ? MPI_BAND : t->red == 4 ? op_sum : op_compose;
    int n = t->red == 5 ? t->n & ~1 : t->n;
    size_t bytes = (size_t)n * sizes[base];
    struct buf in = buf_new(bytes, 0), out = buf_new(bytes, 0xa5);
    for (int i = 0; i < n; i++) {
        long long v = t->red == 5 ? (i % 2 ? s->rank + i % 7 : 1 + s->rank % 2)
                                  : (long long)((next(&local) % 2001) - 1000);
        if (base == 0) ((int *)data(&in))[i] = (int)v;
        else if (base == 1) ((long long *)data(&in))[i] = v;
        else ((double *)data(&in))[i] = (double)v;
    }
    twin(&in);
    struct buf *target = t->in_place ? &in : &out;
    twin(&out);
    int rc = call_allreduce(t->in_place ? MPI_IN_PLACE : data(&in), data(target), n, type, op, s->comm);
    int ref_rc = PMPI_Allreduce(t->in_place ? MPI_IN_PLACE : ref(&in), ref(target), n, type, op,
                                s->reference);
    check_rc(rc, ref_rc, "allreduce rc", call);
    compare(target, "allreduce result", call);
    if (!t->in_place) compare(&in, "allreduce send buffer changed", call);
    digest(s, data(target), bytes);
    buf_free(&in);
    buf_free(&out);
}

static void alltoall(const struct template *t, struct slot *s, long call)
{
    int block = t->n, p = s->size;
    size_t bytes = (size_t)block * p * sizeof(int);
    struct buf in = buf_new(bytes, 0), out = buf_new(bytes, 0x5a);
    int *src = t->in_place ? data(&out) : data(&in);
    for (int i = 0; i < block * p; i++) src[i] = world_rank * 1000003 + i;
    twin(&in);
    twin(&out);
    int scount, rcount;
    MPI_Datatype stype = ints(block, 1, &scount), rtype = ints(block, 1, &rcount);
    int rc = call_alltoall(t->in_place ? MPI_IN_PLACE : data(&in), scount, stype, data(&out), rcount,
                           rtype, s->comm);
    int ref_rc = PMPI_Alltoall(t->in_place ? MPI_IN_PLACE : ref(&in), scount, stype, ref(&out),
                               rcount, rtype, s->reference);
    check_rc(rc, ref_rc, "alltoall rc", call);
    compare(&out, "alltoall result", call);
    compare(&in, "alltoall send buffer changed", call);
    keep_or_free(stype);
    keep_or_free(rtype);
    buf_free(&in);
    buf_free(&out);
}

static void allgatherv(const struct template *t, struct slot *s, long call)
{
    int p = s->size;
    int *counts = malloc(p * sizeof(int)), *displs = malloc(p * sizeof(int));
    /* Counts are the same on every rank (shared draw, four variants per template, so that keys
     * repeat); displacements with gaps are each rank's. */
    uint64_t counts_state = (uint64_t)t->n * 7919 + (uint64_t)call % 4;
    int total = 0;
    for (int r = 0; r < p; r++) {
        counts[r] = pick(&counts_state, t->n + 1);
        /* MPICH 4.0.2's allgatherv on one rank ignores the displacement: none there. */
        displs[r] = total + (p > 1 ? pick(&local, 4) : 0);
        total = displs[r] + counts[r];
    }
    size_t bytes = (size_t)total * sizeof(int);
    struct buf in = buf_new((size_t)counts[s->rank] * sizeof(int), 0), out = buf_new(bytes, 0x3c);
    int mine = counts[s->rank];
    int *src = t->in_place ? (int *)data(&out) + displs[s->rank] : data(&in);
    for (int i = 0; i < mine; i++) src[i] = world_rank * 1000003 + i + (int)call;
    twin(&in);
    twin(&out);
    int scount;
    /* The receive side stays MPI_INT: displacements count its extent. */
    MPI_Datatype stype = ints(mine, 0, &scount);
    int rc = call_allgatherv(t->in_place ? MPI_IN_PLACE : data(&in), scount, stype, data(&out), counts,
                             displs, MPI_INT, s->comm);
    int ref_rc = PMPI_Allgatherv(t->in_place ? MPI_IN_PLACE : ref(&in), scount, stype, ref(&out),
                                 counts, displs, MPI_INT, s->reference);
    check_rc(rc, ref_rc, "allgatherv rc", call);
    compare(&out, "allgatherv result", call);
    compare(&in, "allgatherv send buffer changed", call);
    for (int r = 0; r < p; r++) digest(s, (int *)data(&out) + displs[r], (size_t)counts[r] * sizeof(int));
    keep_or_free(stype);
    buf_free(&in);
    buf_free(&out);
    free(counts);
    free(displs);
}

/* Every rank of each slot holds the same digest; and whether to stop. */
static int check_and_stop(const struct run *run)
{
    for (int i = 0; i < SLOTS; i++) {
        long long d[2] = {(long long)(slots[i].digest >> 1), -(long long)(slots[i].digest >> 1)};
        PMPI_Allreduce(MPI_IN_PLACE, d, 2, MPI_LONG_LONG, MPI_MAX, slots[i].reference);
        if (d[0] != -d[1]) fail("ranks disagree on results", calls);
        slots[i].digest = 0;
    }
    return run_over(run);
}

int main(int argc, char **argv)
{
    struct run run = run_start(&argc, &argv);
    for (int i = 0; i < SLOTS; i++) slot_create(i);
    MPI_Op_create(user_sum, 1, &op_sum);
    MPI_Op_create(user_compose, 0, &op_compose);
    struct template templates[TEMPLATES];
    for (int i = 0; i < TEMPLATES; i++) {
        struct template *t = &templates[i];
        t->op = pick(&shared, 3);
        t->slot = pick(&shared, SLOTS);
        t->n = pick(&shared, 4) == 0 ? pick(&shared, 3) : 1 + pick(&shared, t->op == 0 ? 4000 : MAX_BLOCK);
        t->base = pick(&shared, 3);
        t->red = pick(&shared, 6);
        t->in_place = pick(&shared, 4) == 0;
    }
    int stop = 0;
    while (!stop) {
        for (int k = 0; k < CHECK_EVERY; k++, calls++) {
            int lifecycle = pick(&shared, 200);
            if (lifecycle == 0) { /* a communicator freed and made again */
                int i = pick(&shared, SLOTS);
                slot_free(i);
                slot_create(i);
            } else if (lifecycle == 1) { /* user operations freed and made again */
                MPI_Op_free(&op_sum);
                MPI_Op_free(&op_compose);
                if (pick(&shared, 2)) {
                    MPI_Op_create(user_compose, 0, &op_compose);
                    MPI_Op_create(user_sum, 1, &op_sum);
                } else {
                    MPI_Op_create(user_sum, 1, &op_sum);
                    MPI_Op_create(user_compose, 0, &op_compose);
                }
            }
            struct template t = templates[pick(&shared, TEMPLATES)];
            if (pick(&shared, 8) == 0) t.in_place = !t.in_place; /* a variant of the template */
            struct slot *s = &slots[t.slot];
            if (t.op == 0) allreduce(&t, s, calls);
            else if (t.op == 1) alltoall(&t, s, calls);
            else allgatherv(&t, s, calls);
        }
        stop = check_and_stop(&run);
    }
    while (n_kept > 0) MPI_Type_free(&kept[--n_kept]);
    long all_failures = run_failures();
    if (world_rank == 0)
        printf("fuzz: %ld calls, %ld failures, seed %llu\n", calls, all_failures, run.seed);
    for (int i = 0; i < SLOTS; i++) slot_free(i);
    MPI_Op_free(&op_sum);
    MPI_Op_free(&op_compose);
    MPI_Finalize();
    return all_failures != 0;
}
