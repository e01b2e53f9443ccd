/* Halo exchanges from several threads, each on its own communicator: at once
 * (MPI_THREAD_MULTIPLE) or one at a time (MPI_THREAD_SERIALIZED, threads taking turns in the same
 * order on every rank). Each thread exchanges a seeded random pattern (peers including itself and
 * MPI_PROC_NULL, repeated tags, small and large counts, three layouts: contiguous, every other
 * int, and an hvector of contiguous pairs, each side choosing its own; posts in random order) that repeats for PHASE iterations, long enough to be tuned, and then changes.
 * A phase's exchanges complete one way: MPI_Waitall, an MPI_Waitany loop, MPI_Testsome polling,
 * MPI_Wait one by one, or by handing the requests to another thread that calls MPI_Waitall. Every
 * received element, the untouched gaps of non-contiguous buffers, every receive
 * status and every completed handle (MPI_REQUEST_NULL) are checked; an MPI_Allreduce on the
 * thread's communicator follows each exchange.
 *
 * Usage: halo_threads LEVEL SEED THREADS ITERATIONS PHASE    (LEVEL: multiple | serialized)
 * Prints "halo_threads: results correct" on rank 0 when every rank found nothing wrong. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 24
#define SENTINEL (-7)

enum completion { WAITALL, WAITANY, TESTSOME, WAITS, HANDOVER, COMPLETIONS };
static const char *completion_names[] = {"waitall", "waitany", "testsome", "waits", "handover"};

static uint64_t seed;
static int nthreads, iterations, phase_length, serialized, rank, size;

/* Serialized level: thread t runs iteration i at turn i * nthreads + t. */
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed = PTHREAD_COND_INITIALIZER;
static long turn;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(mix(mix(mix(seed ^ a) ^ b) ^ c) ^ d);
}

struct rng { uint64_t state; };
static unsigned next(struct rng *r, unsigned bound)
{
    r->state = mix(r->state);
    return (unsigned)(r->state % bound);
}

/* How a buffer holds a message's ints: contiguous; every other int; or, per four ints, two
 * contiguous pairs with a gap after each (an hvector of a contiguous pair, extent six ints). */
enum layout { CONTIGUOUS, STRIDED, PAIRS, LAYOUTS };

/* Where the layout puts int `e` of a message (buffers hold 2 * count ints). */
static int position(enum layout l, int e)
{
    static const int in_pairs[4] = {0, 1, 3, 4};
    switch (l) {
    case STRIDED: return 2 * e;
    case PAIRS: return e / 4 * 6 + in_pairs[e % 4];
    default: return e;
    }
}

/* One message of a phase's pattern: from `src` to `dst` (-1: MPI_PROC_NULL); `count` ints, a
 * multiple of 4. */
struct message {
    int src, dst, tag, count;
    enum layout send_layout, recv_layout;
};

/* The datatypes of the non-contiguous layouts, made anew each phase. */
struct types {
    MPI_Datatype strided, pairs;
};

static MPI_Datatype type_of(const struct types *t, enum layout l)
{
    return l == STRIDED ? t->strided : l == PAIRS ? t->pairs : MPI_INT;
}

/* The count of the layout's datatype that carries `ints` ints. */
static int elements(enum layout l, int ints)
{
    return l == PAIRS ? ints / 4 : ints;
}

/* One operation this rank posts. */
struct op {
    int message, is_send;
    int *buf;
    long priority;
};

struct worker {
    int id;
    MPI_Comm comm;
    long errors;
    /* the handed-over requests and their statuses, for the completer thread */
    MPI_Request *requests;
    MPI_Status *statuses;
    int count, rc;
    enum completion how;
};

static void fail(struct worker *w, const char *what, int iteration, int index, long got, long want)
{
    if (w->errors++ < 5)
        fprintf(stderr, "halo_threads: rank %d thread %d iteration %d (%s) op %d: %s (got %ld, want %ld)\n",
                rank, w->id, iteration, completion_names[w->how], index, what, got, want);
}

static int value(const struct worker *w, int phase, int message, int iteration, int element)
{
    return (int)(hash4((uint64_t)w->id << 32 | (uint64_t)phase, (uint64_t)message, (uint64_t)iteration,
                       (uint64_t)element) & 0x3fffffff);
}

/* The pattern of phase `phase` of thread `id`, the same on every rank. */
static int pattern(int id, int phase, struct message *m)
{
    struct rng r = {hash4(1, (uint64_t)id, (uint64_t)phase, 0)};
    int n = 1 + (int)next(&r, MAX_MESSAGES);
    for (int i = 0; i < n; i++) {
        m[i].src = (int)next(&r, (unsigned)size);
        m[i].dst = (int)next(&r, (unsigned)size);
        if (next(&r, 16) == 0) m[i].src = -1;
        else if (next(&r, 16) == 0) m[i].dst = -1;
        m[i].tag = (int)next(&r, 3);
        m[i].count = 4 * (next(&r, 8) == 0 ? 500 + (int)next(&r, 5000) : 1 + (int)next(&r, 16));
        m[i].send_layout = (enum layout)next(&r, LAYOUTS);
        m[i].recv_layout = (enum layout)next(&r, LAYOUTS);
    }
    return n;
}

static int by_priority(const void *a, const void *b)
{
    long x = ((const struct op *)a)->priority, y = ((const struct op *)b)->priority;
    return (x > y) - (x < y);
}

/* Same sender, receiver and tag: MPI matches such messages in posting order, so both sides keep
 * their pattern order among them. */
static int same_channel(const struct message *a, const struct message *b)
{
    return a->src == b->src && a->dst == b->dst && a->tag == b->tag;
}

/* This rank's operations of a pattern, in a random posting order (the same every iteration). */
static int operations(int id, int phase, const struct message *m, int n, struct op *ops)
{
    struct rng r = {hash4(2, (uint64_t)id, (uint64_t)phase, (uint64_t)rank)};
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (m[i].src == rank) ops[k++] = (struct op){i, 1, NULL, (long)next(&r, 1000)};
        if (m[i].dst == rank) ops[k++] = (struct op){i, 0, NULL, (long)next(&r, 1000)};
    }
    qsort(ops, (size_t)k, sizeof *ops, by_priority);
    /* Within a channel, put the messages back in pattern order on the slots they occupy. */
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++)
            if (ops[a].is_send == ops[b].is_send && same_channel(&m[ops[a].message], &m[ops[b].message])
                && ops[a].message > ops[b].message) {
                int t = ops[a].message;
                ops[a].message = ops[b].message;
                ops[b].message = t;
            }
    return k;
}

static void *complete_handed_over(void *arg)
{
    struct worker *w = arg;
    w->rc = MPI_Waitall(w->count, w->requests, w->statuses);
    return NULL;
}

static void check_status(struct worker *w, int it, int i, const struct op *o, const struct message *m,
                         const MPI_Status *s)
{
    if (o->is_send) return;
    int want_count = m->src < 0 ? 0 : m->count, got = -1;
    MPI_Get_count(s, MPI_INT, &got);
    if (got != want_count) fail(w, "status count", it, i, got, want_count);
    /* MPICH 4.0.2 itself reports source 0 and tag 0 for a nonblocking receive from MPI_PROC_NULL
     * (the standard says MPI_PROC_NULL and MPI_ANY_TAG): only its count is checked. */
    if (m->src < 0) return;
    if (s->MPI_SOURCE != m->src) fail(w, "status source", it, i, s->MPI_SOURCE, m->src);
    if (s->MPI_TAG != m->tag) fail(w, "status tag", it, i, s->MPI_TAG, m->tag);
}

static void exchange(struct worker *w, int phase, int it, const struct message *m, struct op *ops, int k,
                     const struct types *types, enum completion how)
{
    MPI_Request requests[2 * MAX_MESSAGES];
    MPI_Status statuses[2 * MAX_MESSAGES];
    int done[2 * MAX_MESSAGES] = {0};
    for (int i = 0; i < k; i++) {
        const struct message *msg = &m[ops[i].message];
        for (int e = 0; e < 2 * msg->count; e++) ops[i].buf[e] = SENTINEL;
        if (ops[i].is_send)
            for (int e = 0; e < msg->count; e++)
                ops[i].buf[position(msg->send_layout, e)] = value(w, phase, ops[i].message, it, e);
    }
    for (int i = 0; i < k; i++) {
        const struct message *msg = &m[ops[i].message];
        enum layout l = ops[i].is_send ? msg->send_layout : msg->recv_layout;
        if (ops[i].is_send)
            MPI_Isend(ops[i].buf, elements(l, msg->count), type_of(types, l),
                      msg->dst < 0 ? MPI_PROC_NULL : msg->dst, msg->tag, w->comm, &requests[i]);
        else
            MPI_Irecv(ops[i].buf, elements(l, msg->count), type_of(types, l),
                      msg->src < 0 ? MPI_PROC_NULL : msg->src, msg->tag, w->comm, &requests[i]);
    }
    int rc = MPI_SUCCESS;
    switch (how) {
    case WAITALL:
        rc = MPI_Waitall(k, requests, statuses);
        for (int i = 0; i < k; i++) check_status(w, it, i, &ops[i], &m[ops[i].message], &statuses[i]);
        break;
    case WAITANY:
        for (int n = 0; n < k && rc == MPI_SUCCESS; n++) {
            int index = -1;
            MPI_Status s;
            rc = MPI_Waitany(k, requests, &index, &s);
            if (index < 0 || index >= k || done[index]) {
                fail(w, "waitany index", it, n, index, -1);
                break;
            }
            done[index] = 1;
            check_status(w, it, index, &ops[index], &m[ops[index].message], &s);
        }
        break;
    case TESTSOME: {
        int left = k;
        while (left > 0 && rc == MPI_SUCCESS) {
            int outcount = 0, indices[2 * MAX_MESSAGES];
            rc = MPI_Testsome(k, requests, &outcount, indices, statuses);
            if (outcount == MPI_UNDEFINED) break;
            for (int j = 0; j < outcount; j++) {
                int index = indices[j];
                if (index < 0 || index >= k || done[index]) {
                    fail(w, "testsome index", it, j, index, -1);
                    left = 0;
                    break;
                }
                done[index] = 1;
                left--;
                check_status(w, it, index, &ops[index], &m[ops[index].message], &statuses[j]);
            }
        }
        if (left > 0) fail(w, "testsome left requests incomplete", it, 0, left, 0);
        break;
    }
    case WAITS:
        for (int i = 0; i < k && rc == MPI_SUCCESS; i++) {
            MPI_Status s;
            rc = MPI_Wait(&requests[i], &s);
            check_status(w, it, i, &ops[i], &m[ops[i].message], &s);
        }
        break;
    case HANDOVER: {
        pthread_t completer;
        w->requests = requests;
        w->statuses = statuses;
        w->count = k;
        pthread_create(&completer, NULL, complete_handed_over, w);
        pthread_join(completer, NULL);
        rc = w->rc;
        for (int i = 0; i < k; i++) check_status(w, it, i, &ops[i], &m[ops[i].message], &statuses[i]);
        break;
    }
    default:
        break;
    }
    if (rc != MPI_SUCCESS) fail(w, completion_names[how], it, 0, rc, MPI_SUCCESS);
    for (int i = 0; i < k; i++)
        if (requests[i] != MPI_REQUEST_NULL) fail(w, "handle not MPI_REQUEST_NULL", it, i, 1, 0);
    for (int i = 0; i < k; i++) {
        if (ops[i].is_send) continue;
        const struct message *msg = &m[ops[i].message];
        int *want = malloc(2 * sizeof(int) * (size_t)msg->count), wrong = -1;
        for (int e = 0; e < 2 * msg->count; e++) want[e] = SENTINEL;
        if (msg->src >= 0)
            for (int e = 0; e < msg->count; e++)
                want[position(msg->recv_layout, e)] = value(w, phase, ops[i].message, it, e);
        for (int e = 0; e < 2 * msg->count && wrong < 0; e++)
            if (ops[i].buf[e] != want[e]) wrong = e;
        if (wrong >= 0) fail(w, "received data", it, i, ops[i].buf[wrong], want[wrong]);
        free(want);
    }
}

static void take_turn(long mine)
{
    pthread_mutex_lock(&turn_lock);
    while (turn != mine) pthread_cond_wait(&turn_changed, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
}

static void pass_turn(void)
{
    pthread_mutex_lock(&turn_lock);
    turn++;
    pthread_cond_broadcast(&turn_changed);
    pthread_mutex_unlock(&turn_lock);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct message m[MAX_MESSAGES];
    struct op ops[2 * MAX_MESSAGES];
    int n = 0, k = 0;
    enum completion how = WAITALL;
    struct types types = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
    for (int it = 0; it < iterations; it++) {
        if (serialized) take_turn((long)it * nthreads + w->id);
        int phase = it / phase_length;
        if (it % phase_length == 0) {
            for (int i = 0; i < k; i++) free(ops[i].buf);
            /* New datatypes each phase: the library's state for the old ones must die with them. */
            if (types.strided != MPI_DATATYPE_NULL) {
                MPI_Type_free(&types.strided);
                MPI_Type_free(&types.pairs);
            }
            MPI_Datatype one, pair, two_pairs;
            MPI_Type_vector(1, 1, 2, MPI_INT, &one);
            MPI_Type_create_resized(one, 0, 2 * (MPI_Aint)sizeof(int), &types.strided);
            MPI_Type_contiguous(2, MPI_INT, &pair);
            MPI_Type_create_hvector(2, 1, 3 * (MPI_Aint)sizeof(int), pair, &two_pairs);
            MPI_Type_create_resized(two_pairs, 0, 6 * (MPI_Aint)sizeof(int), &types.pairs);
            MPI_Type_free(&one);
            MPI_Type_free(&pair);
            MPI_Type_free(&two_pairs);
            MPI_Type_commit(&types.strided);
            MPI_Type_commit(&types.pairs);
            n = pattern(w->id, phase, m);
            k = operations(w->id, phase, m, n, ops);
            for (int i = 0; i < k; i++) ops[i].buf = malloc(2 * sizeof(int) * (size_t)m[ops[i].message].count);
            /* Every rank completes the same way, so that the ranks may agree on `neighbor`. */
            struct rng r = {hash4(3, (uint64_t)w->id, (uint64_t)phase, 0)};
            w->how = how = (enum completion)next(&r, COMPLETIONS);
        }
        exchange(w, phase, it, m, ops, k, &types, how);
        long in = it + rank, out = -1, want = (long)size * it + (long)size * (size - 1) / 2;
        MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, w->comm);
        if (out != want) fail(w, "allreduce", it, 0, out, want);
        if (serialized) pass_turn();
    }
    for (int i = 0; i < k; i++) free(ops[i].buf);
    if (types.strided != MPI_DATATYPE_NULL) {
        MPI_Type_free(&types.strided);
        MPI_Type_free(&types.pairs);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6 || (strcmp(argv[1], "multiple") && strcmp(argv[1], "serialized"))) {
        fprintf(stderr, "usage: halo_threads multiple|serialized SEED THREADS ITERATIONS PHASE\n");
        return 2;
    }
    serialized = strcmp(argv[1], "serialized") == 0;
    seed = strtoull(argv[2], NULL, 10);
    nthreads = atoi(argv[3]);
    iterations = atoi(argv[4]);
    phase_length = atoi(argv[5]);
    if (nthreads < 1 || nthreads > 16 || iterations < 1 || phase_length < 1) return 2;
    int required = serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, provided;
    MPI_Init_thread(&argc, &argv, required, &provided);
    if (provided < required) {
        fprintf(stderr, "halo_threads: thread level %d not provided\n", required);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct worker workers[16];
    pthread_t threads[16];
    for (int t = 0; t < nthreads; t++) {
        workers[t] = (struct worker){.id = t};
        MPI_Comm_dup(MPI_COMM_WORLD, &workers[t].comm);
    }
    for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], NULL, work, &workers[t]);
    long errors = 0, total = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(threads[t], NULL);
        errors += workers[t].errors;
        MPI_Comm_free(&workers[t].comm);
    }
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0) printf("halo_threads: results correct\n");
        else printf("halo_threads: %ld errors\n", total);
    }
    MPI_Finalize();
    return total != 0;
}
