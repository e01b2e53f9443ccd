/* Randomized test of halo exchanges under the preload library: episodes of MPI_Isend/MPI_Irecv
 * between the ranks of a communicator, completed every way the standard allows, each checked
 * against what the standard promises. The halo codelets reorder, hold back, batch and repackage
 * an episode's messages; none of that may show.
 *
 * Checks per episode: every received element has the value its sender wrote (the value names
 * the episode, the sender and the message, so a message matched to the wrong receive shows);
 * every other double or int of a receive allocation (a datatype's gaps, the room beyond a short
 * message, guard zones before and after) is unchanged; a send buffer is unchanged, also after
 * the episode; statuses name the sender and the tag, MPI_Get_count and MPI_Get_elements count
 * what was sent; a receive from MPI_PROC_NULL completes at once, empty.
 *
 * What varies, from one seed: episodes come from a pool of templates (so that episodes repeat
 * and get tuned), each on one of three communicator slots (a duplicate of MPI_COMM_WORLD, an
 * even/odd split, a reversed split) that are freed and created again from time to time. A
 * template is a set of messages: a ring where every rank sends to both neighbours, or any
 * senders and receivers, oneself included; tags from a few, so that messages between two ranks
 * share tags and must match in the order they were posted; sizes from empty to beyond the eager
 * limit; doubles or ints. Each rank describes its side of a message its own way (doubles, a
 * contiguous type, vectors with gaps), with derived types it frees and creates again in another
 * order (so handles come back as other types); posts its operations in its own order (sends and
 * receives mixed, the order of messages that share a receiver or sender and tag kept), with
 * receives posted for more than arrives, wildcards (MPI_ANY_SOURCE, MPI_ANY_TAG) where only one
 * message can match, and sends freed with MPI_Request_free; and completes them with one of
 * MPI_Waitall (with or without statuses), MPI_Waitany, MPI_Waitsome, MPI_Testall, MPI_Testany,
 * MPI_Testsome, MPI_Test, MPI_Wait in any order, or polling with MPI_Request_get_status first.
 * In half the runs (by seed) episodes repeat alike, as a stencil's (where tuning and
 * `neighbor` engage); in the others each rank varies them now and then: another order of posts,
 * another way to complete, operations with MPI_PROC_NULL, another MPI call between two posts,
 * its datatypes made again (also freed while its messages are in flight). Buffers stay in place for a template's life, as a stencil's do; templates are replaced
 * from time to time. A template often runs several episodes in a row, as a stencil's time
 * steps, followed by an MPI_Barrier or MPI_Allreduce on its communicator.
 *
 * usage: fuzz_halo [--seconds S] [--seed N] [--max-calls N] [--min-calls N] (fuzz_common.h)
 *                  [--quiet 1] (a quiet run whatever the seed: ranks that vary an exchange
 *                  they agreed on for `neighbor` would hang each other, so runs with
 *                  COMMTUNE_HALO_NEIGHBOR=on stay quiet)
 * Prints "fuzz: FAIL ..." lines (at most 20) and "fuzz: N calls, M failures, seed S" (calls:
 * posts); exits 1 when M > 0. */
#include "fuzz_common.h"

#include <stdio.h>

#define GUARD 8
#define SLOTS 3
#define TEMPLATES 16
#define MAX_MESSAGES 16
#define MAX_OPS (2 * MAX_MESSAGES + 4)
#define TAGS 3
#define CHECK_EVERY 32
#define SENTINEL_D (-7.25)
#define SENTINEL_I (-777)
/* Derived types of doubles, local to each rank: type 0 is MPI_DOUBLE itself. */
#define TYPES 4
/* Doubles of a buffer per element at most (the widest layout: 3 elements in an extent of 9). */
#define WIDEST 3

/* Whether each rank varies its episodes (a noisy run), or they repeat alike on every rank, as a
 * stencil's, where every rank also completes a template the same way (a quiet run). */
static int noisy;

static void fail(long episode, const char *what, int message)
{
    if (++failures <= 20)
        printf("fuzz: FAIL rank %d episode %ld message %d: %s\n", world_rank, episode, message, what);
}

/* ------------------------------------------------------------------ communicators */

struct slot {
    MPI_Comm comm;
    int rank, size;
};
static struct slot slots[SLOTS];
/* The ranks every template of a slot may use: the smallest group of its split. */
static int slot_ranks(int i) { return i == 1 ? (world_size / 2 > 0 ? world_size / 2 : 1) : world_size; }

static void slot_create(int i)
{
    struct slot *s = &slots[i];
    if (i == 0)
        MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    else
        MPI_Comm_split(MPI_COMM_WORLD, i == 1 ? world_rank % 2 : 0, i == 1 ? world_rank : -world_rank,
                       &s->comm);
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
}

/* ------------------------------------------------------------------ datatypes */

/* Each type of doubles: elements per item, its extent in doubles, and where element j of an
 * item lies. 0: MPI_DOUBLE; 1: 3 contiguous; 2: a vector of 2 with a gap (extent 3); 3: a
 * vector of 3 with gaps of 3 (extent 9). */
static const int per_item[TYPES] = {1, 3, 2, 3};
static const int extent[TYPES] = {1, 3, 3, 9};
static int offset_in_item(int type, int j) { return type == 2 ? 2 * j : type == 3 ? 4 * j : j; }
static MPI_Datatype types[TYPES];

/* Frees the derived types and creates them again in a random order, so that a handle the
 * library saw may come back as another type. */
static void types_create(void)
{
    int order[3] = {1, 2, 3};
    for (int i = 2; i > 0; i--) {
        int j = pick(&local, i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    types[0] = MPI_DOUBLE;
    for (int i = 0; i < 3; i++) {
        int t = order[i];
        if (t == 1) MPI_Type_contiguous(3, MPI_DOUBLE, &types[t]);
        else if (t == 2) MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &types[t]);
        else MPI_Type_vector(3, 1, 4, MPI_DOUBLE, &types[t]);
        MPI_Type_commit(&types[t]);
    }
}

static void types_free(void)
{
    for (int t = 1; t < TYPES; t++) MPI_Type_free(&types[t]);
}

/* ------------------------------------------------------------------ templates */

struct message {
    int from, to, tag, elements, ints;
    /* Whether the receive is posted for more than arrives; its wildcards, where only this
     * message can match them. */
    int room, any_source, any_tag;
};

/* One rank's side of a message: its datatype (doubles only), items, and the buffer. */
struct side {
    int type, items, extra; /* extra: items of a receive beyond the message */
    long length;           /* doubles or ints, guards excluded */
    void *buffer;          /* GUARD elements, then the data, then GUARD elements */
};

struct template {
    int slot, n, barrier;
    struct message m[MAX_MESSAGES];
    /* This rank's sides, by message: sends and receives. */
    struct side send[MAX_MESSAGES], recv[MAX_MESSAGES];
    int completion;      /* this rank's usual way to complete */
    uint64_t post_order; /* this rank's usual order of posts (a shuffle's seed) */
    long uses;
};

static int draw_elements(void)
{
    switch (pick(&shared, 20)) {
    case 0: return 0;
    case 1: case 2: return 2000 + pick(&shared, 30000); /* beyond the eager limit */
    case 3: case 4: case 5: case 6: case 7: case 8: return 17 + pick(&shared, 1000);
    default: return 1 + pick(&shared, 16);
    }
}

/* A type of this rank whose items hold `elements` whole. */
static int draw_type(int elements)
{
    for (;;) {
        int t = pick(&local, TYPES);
        if (elements % per_item[t] == 0) return t;
    }
}

static void side_free(struct side *s)
{
    free(s->buffer);
    s->buffer = NULL;
}

static void side_make(struct side *s, const struct message *m, int receive)
{
    s->type = m->ints ? 0 : draw_type(m->elements);
    s->items = m->elements / per_item[s->type];
    s->extra = receive && m->room ? 1 + pick(&local, 3) : 0;
    s->length = (long)(s->items + s->extra) * extent[s->type];
    size_t size = m->ints ? sizeof(int) : sizeof(double);
    s->buffer = malloc((size_t)(s->length + 2 * GUARD) * size);
}

static int count_matching(const struct template *t, int i, int same_from, int same_tag)
{
    int n = 0;
    for (int j = 0; j < t->n; j++)
        n += t->m[j].to == t->m[i].to && (!same_from || t->m[j].from == t->m[i].from) &&
             (!same_tag || t->m[j].tag == t->m[i].tag);
    return n;
}

static void template_make(struct template *t)
{
    t->slot = pick(&shared, SLOTS);
    int ranks = slot_ranks(t->slot);
    t->uses = 0;
    int ints = pick(&shared, 4) == 0;
    /* A stencil's: every rank to both neighbours on a ring; or messages between any ranks,
     * mostly neighbours, oneself included. */
    int ring = ranks > 1 && pick(&shared, 3) == 0;
    t->n = ring ? 2 * ranks : 1 + pick(&shared, MAX_MESSAGES);
    for (int i = 0; i < t->n; i++) {
        struct message *m = &t->m[i];
        m->from = ring ? i / 2 : pick(&shared, ranks);
        if (ring) m->to = (m->from + (i % 2 ? ranks - 1 : 1)) % ranks;
        else m->to = pick(&shared, 3) ? (m->from + 1 + pick(&shared, 2) * (ranks - 2)) % ranks : pick(&shared, ranks);
        m->tag = pick(&shared, TAGS);
        m->elements = draw_elements();
        m->ints = ints;
    }
    t->barrier = pick(&shared, 8) == 0;
    for (int i = 0; i < t->n; i++) {
        struct message *m = &t->m[i];
        /* A ring's messages are a stencil's: exact sizes, no wildcards (as `neighbor` needs). */
        m->room = !ring && pick(&shared, 4) == 0;
        m->any_source = !ring && count_matching(t, i, 0, 1) == 1 && pick(&shared, 4) == 0;
        m->any_tag = !ring && count_matching(t, i, 1, 0) == 1 && pick(&shared, 4) == 0;
        if (m->any_tag && m->any_source && count_matching(t, i, 0, 0) != 1) m->any_source = 0;
        /* A wildcard receive must not match the next episode's messages: the episode ends in a
         * barrier, after every receive of it completed. */
        if (m->any_source || m->any_tag) t->barrier = 1;
    }
    struct slot *s = &slots[t->slot];
    for (int i = 0; i < t->n; i++) {
        struct message *m = &t->m[i];
        t->send[i].buffer = t->recv[i].buffer = NULL;
        if (s->rank == m->from) side_make(&t->send[i], m, 0);
        if (s->rank == m->to) side_make(&t->recv[i], m, 1);
    }
    t->completion = pick(noisy ? &local : &shared, 10);
    t->post_order = next(&local);
}

static void template_free(struct template *t)
{
    for (int i = 0; i < t->n; i++) {
        side_free(&t->send[i]);
        side_free(&t->recv[i]);
    }
}

/* ------------------------------------------------------------------ values */

static double value(long use, int from, int message, int element)
{
    return (double)((use * 7919 + from * 104729 + message * 1299709 + element) % 1000003);
}

/* Whether position p of the side's data holds an element, and which. */
static int element_at(const struct side *s, int elements, long p)
{
    long item = p / extent[s->type], within = p % extent[s->type];
    for (int j = 0; j < per_item[s->type]; j++)
        if (offset_in_item(s->type, j) == within) {
            long e = item * per_item[s->type] + j;
            return e < elements ? (int)e : -1;
        }
    return -1;
}

/* Writes (fill) or checks a side: elements of message `i` of `from` at their places, the
 * sentinel everywhere else (with `elements` 0: everywhere). Returns whether it holds. */
static int side_pattern(const struct side *s, const struct message *m, int elements, long use, int i,
                        int fill)
{
    int ok = 1;
    for (long p = -GUARD; p < s->length + GUARD; p++) {
        int e = p >= 0 && p < s->length ? element_at(s, elements, p) : -1;
        double want = e >= 0 ? value(use, m->from, i, e) : 0;
        if (m->ints) {
            int *x = (int *)s->buffer + GUARD + p, w = e >= 0 ? (int)want : SENTINEL_I;
            if (fill) *x = w;
            else ok &= *x == w;
        } else {
            double *x = (double *)s->buffer + GUARD + p, w = e >= 0 ? want : SENTINEL_D;
            if (fill) *x = w;
            else ok &= *x == w;
        }
    }
    return ok;
}

/* ------------------------------------------------------------------ episodes */

struct op {
    int message, send, proc_null;
    struct side null_side; /* an operation with MPI_PROC_NULL: a small buffer of its own */
};

/* This rank's operations of an episode, in its own order: messages that share a receiver and
 * a sender and a tag keep the template's order on both sides (MPI's matching order). */
static int ops_order(const struct template *t, const struct slot *s, struct op *ops, int reshuffle)
{
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        if (s->rank == t->m[i].to) ops[n++] = (struct op){.message = i, .send = 0};
        if (s->rank == t->m[i].from) ops[n++] = (struct op){.message = i, .send = 1};
    }
    /* The template's order on this rank, the same every episode; sometimes another. */
    uint64_t order = reshuffle ? next(&local) : t->post_order;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next(&order) % (uint64_t)(i + 1));
        struct op x = ops[i];
        ops[i] = ops[j];
        ops[j] = x;
    }
    /* Restore the template's order within each (kind, peer, tag) class. */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const struct message *a = &t->m[ops[i].message], *b = &t->m[ops[j].message];
            int same = ops[i].send == ops[j].send && a->tag == b->tag &&
                       (ops[i].send ? a->to == b->to : a->from == b->from);
            if (same && ops[i].message > ops[j].message) {
                struct op x = ops[i];
                ops[i] = ops[j];
                ops[j] = x;
            }
        }
    return n;
}

static int complete_all(int mode, int n, MPI_Request *requests, MPI_Status *statuses, int *with_status)
{
    *with_status = mode != 1;
    int open = 0;
    for (int i = 0; i < n; i++) open += requests[i] != MPI_REQUEST_NULL;
    switch (mode) {
    case 0: return MPI_Waitall(n, requests, statuses);
    case 1:
/* MPICH's MPI_STATUSES_IGNORE is (MPI_Status *)1, which GCC takes for an array of size 0. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
        return MPI_Waitall(n, requests, MPI_STATUSES_IGNORE);
#pragma GCC diagnostic pop
    case 2:
        while (open-- > 0) {
            int index;
            MPI_Status st;
            if (MPI_Waitany(n, requests, &index, &st) != MPI_SUCCESS || index == MPI_UNDEFINED) return 1;
            statuses[index] = st;
        }
        return 0;
    case 3:
        while (open > 0) {
            int done, indices[MAX_OPS];
            MPI_Status st[MAX_OPS];
            if (MPI_Waitsome(n, requests, &done, indices, st) != MPI_SUCCESS || done == MPI_UNDEFINED) return 1;
            for (int i = 0; i < done; i++) statuses[indices[i]] = st[i];
            open -= done;
        }
        return 0;
    case 4:
        for (int flag = 0; !flag;)
            if (MPI_Testall(n, requests, &flag, statuses) != MPI_SUCCESS) return 1;
        return 0;
    case 5:
        while (open > 0)
            for (int i = 0; i < n; i++) {
                if (requests[i] == MPI_REQUEST_NULL) continue;
                int flag;
                if (MPI_Test(&requests[i], &flag, &statuses[i]) != MPI_SUCCESS) return 1;
                open -= flag;
            }
        return 0;
    case 6: { /* MPI_Wait on each, from a random place on */
        int start = pick(&local, n);
        for (int k = 0; k < n; k++) {
            int i = (start + k) % n;
            if (requests[i] != MPI_REQUEST_NULL && MPI_Wait(&requests[i], &statuses[i]) != MPI_SUCCESS) return 1;
        }
        return 0;
    }
    case 7: /* the first half together, the rest one by one */
        if (MPI_Waitall(n / 2, requests, statuses) != MPI_SUCCESS) return 1;
        for (int i = n / 2; i < n; i++)
            if (requests[i] != MPI_REQUEST_NULL && MPI_Wait(&requests[i], &statuses[i]) != MPI_SUCCESS) return 1;
        return 0;
    case 8:
        while (open > 0) {
            int index, flag, done, indices[MAX_OPS];
            MPI_Status st[MAX_OPS];
            if (pick(&local, 2)) {
                if (MPI_Testany(n, requests, &index, &flag, &st[0]) != MPI_SUCCESS) return 1;
                if (flag && index != MPI_UNDEFINED) {
                    statuses[index] = st[0];
                    open--;
                }
            } else {
                if (MPI_Testsome(n, requests, &done, indices, st) != MPI_SUCCESS) return 1;
                if (done == MPI_UNDEFINED) return 1;
                for (int i = 0; i < done; i++) statuses[indices[i]] = st[i];
                open -= done;
            }
        }
        return 0;
    default: /* polled with MPI_Request_get_status, then completed */
        for (int all = 0; !all;) {
            all = 1;
            for (int i = 0; i < n; i++) {
                int flag;
                if (MPI_Request_get_status(requests[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 1;
                all &= flag;
            }
        }
        return MPI_Waitall(n, requests, statuses);
    }
}

static void episode(struct template *t, long number)
{
    struct slot *s = &slots[t->slot];
    long use = t->uses++;
    struct op ops[MAX_OPS];
    int vary = noisy;
    int n = ops_order(t, s, ops, vary && pick(&local, 8) == 0);
    /* Operations with MPI_PROC_NULL, local to this rank. */
    for (int k = vary && pick(&local, 6) == 0 ? 1 + pick(&local, 2) : 0; k > 0; k--) {
        struct op extra = {.message = -1, .send = pick(&local, 2), .proc_null = 1};
        extra.null_side = (struct side){.type = 0, .items = 4, .length = 4};
        extra.null_side.buffer = malloc((4 + 2 * GUARD) * sizeof(double));
        int at = pick(&local, n + 1);
        memmove(&ops[at + 1], &ops[at], (size_t)(n - at) * sizeof ops[0]);
        ops[at] = extra;
        n++;
    }
    const struct message null_message = {.from = -1};
    MPI_Request requests[MAX_OPS];
    MPI_Status statuses[MAX_OPS];
    int freed[MAX_OPS] = {0};
    for (int k = 0; k < n; k++) {
        struct op *o = &ops[k];
        const struct message *m = o->proc_null ? &null_message : &t->m[o->message];
        struct side *d = o->proc_null ? &o->null_side : o->send ? &t->send[o->message] : &t->recv[o->message];
        side_pattern(d, m, o->send ? m->elements : 0, use, o->message, 1);
        MPI_Datatype type = m->ints ? MPI_INT : types[d->type];
        void *data = (char *)d->buffer + GUARD * (m->ints ? sizeof(int) : sizeof(double));
        if (o->proc_null) {
            if (o->send) MPI_Isend(data, 4, MPI_DOUBLE, MPI_PROC_NULL, 0, s->comm, &requests[k]);
            else MPI_Irecv(data, 4, MPI_DOUBLE, MPI_PROC_NULL, 0, s->comm, &requests[k]);
        } else if (o->send) {
            MPI_Isend(data, d->items, type, m->to, m->tag, s->comm, &requests[k]);
            /* A freed send still arrives; the barrier after the episode says when. Not to
             * oneself: MPICH 4.0 loses a freed send to its own rank that no receive matched yet. */
            if (t->barrier && m->to != s->rank && pick(&local, 8) == 0) {
                MPI_Request_free(&requests[k]);
                freed[k] = 1;
            }
        } else {
            MPI_Irecv(data, d->items + d->extra, type, m->any_source ? MPI_ANY_SOURCE : m->from,
                      m->any_tag ? MPI_ANY_TAG : m->tag, s->comm, &requests[k]);
        }
        calls++;
        if (vary && pick(&local, 16) == 0) { /* another MPI call inside the episode */
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, 32000, s->comm, &flag, MPI_STATUS_IGNORE);
        }
    }
    int mode = vary && pick(&local, 8) == 0 ? pick(&local, 10) : t->completion, with_status = 0;
    /* The standard lets messages complete whose datatypes were freed after their posts. */
    int types_freed = vary && pick(&local, 24) == 0;
    if (types_freed) types_free();

    if (n > 0 && complete_all(mode, n, requests, statuses, &with_status) != 0)
        fail(number, "a completion call failed", -1);
    if (types_freed) types_create();

    if (t->barrier) MPI_Barrier(s->comm);
    for (int k = 0; k < n; k++) {
        struct op *o = &ops[k];
        if (o->proc_null) {
            if (!side_pattern(&o->null_side, &null_message, 0, use, -1, 0))
                fail(number, "an operation with MPI_PROC_NULL changed its buffer", -1);
            if (with_status && !o->send) {
                int count;
                MPI_Get_count(&statuses[k], MPI_DOUBLE, &count);
                int named = statuses[k].MPI_SOURCE == MPI_PROC_NULL && statuses[k].MPI_TAG == MPI_ANY_TAG;
#ifdef MPICH_VERSION
                /* MPICH 4.0 names source 0 and tag 0 in a nonblocking receive's status. */
                named = 1;
#endif
                if (!named || count != 0) fail(number, "a receive from MPI_PROC_NULL has a wrong status", -1);
            }
            free(o->null_side.buffer);
            continue;
        }
        const struct message *m = &t->m[o->message];
        struct side *d = o->send ? &t->send[o->message] : &t->recv[o->message];
        if (!side_pattern(d, m, m->elements, use, o->message, 0))
            fail(number, o->send ? "a send buffer changed" : "wrong data received", o->message);
        if (o->send || !with_status || freed[k]) continue;
        MPI_Datatype type = m->ints ? MPI_INT : types[d->type];
        int count, elements;
        MPI_Get_count(&statuses[k], type, &count);
        MPI_Get_elements(&statuses[k], type, &elements);
        if (statuses[k].MPI_SOURCE != m->from || statuses[k].MPI_TAG != m->tag)
            fail(number, "a status names another sender or tag", o->message);
        if (count != d->items || elements != m->elements)
            fail(number, "a status counts another size", o->message);
    }
}

/* After a run of episodes, `kind` 0: none; 1: MPI_Barrier; else an MPI_Allreduce. */
static void collective(const struct slot *s, int kind, long number)
{
    if (kind == 1) {
        MPI_Barrier(s->comm);
    } else if (kind > 1) {
        int one = 1, size = 0;
        MPI_Allreduce(&one, &size, 1, MPI_INT, MPI_SUM, s->comm);
        if (size != s->size) fail(number, "an MPI_Allreduce between episodes summed wrong", -1);
    }
}

int main(int argc, char **argv)
{
    struct run run = run_start(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    noisy = pick(&shared, 2);
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--quiet") && atoi(argv[i + 1])) noisy = 0;
    for (int i = 0; i < SLOTS; i++) slot_create(i);
    types_create();
    static struct template templates[TEMPLATES];
    for (int i = 0; i < TEMPLATES; i++) template_make(&templates[i]);
    long episodes = 0;
    for (int stop = 0; !stop; stop = run_over(&run)) {
        for (int k = 0; k < CHECK_EVERY; k++) {
            int lifecycle = pick(&shared, 400);
            if (lifecycle == 0) { /* a communicator freed and made again, its templates with it */
                int i = pick(&shared, SLOTS);
                MPI_Comm_free(&slots[i].comm);
                slot_create(i);
            } else if (lifecycle == 1) { /* a template replaced: new messages, new buffers */
                struct template *t = &templates[pick(&shared, TEMPLATES)];
                template_free(t);
                template_make(t);
            }
            if (noisy && pick(&local, 300) == 0) { /* this rank's datatypes freed and made again */
                types_free();
                types_create();
            }
            /* A stencil's time steps: the same exchange several times in a row, then often a
             * collective on its communicator (where ranks may agree on `neighbor`). */
            struct template *t = &templates[pick(&shared, TEMPLATES)];
            for (int steps = pick(&shared, 2) ? 1 : 2 + pick(&shared, 11); steps > 0; steps--)
                episode(t, episodes++);
            collective(&slots[t->slot], pick(&shared, 4), episodes);
        }
    }
    long all_failures = run_failures();
    if (world_rank == 0)
        printf("fuzz: %ld calls, %ld failures, seed %llu (%ld episodes, %s)\n", calls, all_failures, run.seed,
               episodes, noisy ? "noisy" : "quiet");
    for (int i = 0; i < TEMPLATES; i++) template_free(&templates[i]);
    types_free();
    for (int i = 0; i < SLOTS; i++) MPI_Comm_free(&slots[i].comm);
    MPI_Finalize();
    return all_failures != 0;
}
