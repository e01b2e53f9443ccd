/* Differential correctness of MPI_Allreduce, MPI_Alltoall and MPI_Allgatherv.
 *
 * Run under the preload library with one COMMTUNE_FORCE setting at a time: every tested call
 * goes through MPI_* (intercepted: the forced codelet runs it when the call meets its
 * requirements) and is compared with the native result of the same call made with PMPI_* (not
 * intercepted) on a PMPI duplicate of the same communicator.
 *
 * Checks per case:
 *   - the call returns MPI_SUCCESS;
 *   - the send buffer is never written (compared with a saved copy after the call);
 *   - receive buffers are filled with a sentinel byte first: bytes that are not part of the
 *     result (gaps of derived datatypes, padding of pair types, space between allgatherv
 *     displacements, margins before and after the result) must still hold it afterwards;
 *   - integer, logical, bitwise, MAXLOC/MINLOC, MAX/MIN and user-defined integer results are
 *     bitwise equal to native; alltoall/allgatherv results are bitwise equal to native and to
 *     the data the program itself expects (it knows what every rank sent);
 *   - floating-point SUM/PROD results (float, double, long double, C complex types, user SUM on
 *     derived double types) are within a tolerance of native: |r - n| <= 8 * p * eps * scale +
 *     p * min_normal per component, where p is the communicator size, eps the type's epsilon and
 *     scale = sum over ranks of |x| for SUM, product over ranks of |x| (|re|+|im| >= |z| for
 *     complex) for PROD.
 *     Any summation or multiplication order is within (p-1) * eps * scale of the exact value to
 *     first order, so two orders differ by at most 2 (p-1) eps scale (complex products about
 *     2 sqrt(2) times that); the factor 8 leaves room. Long double compares its 10 significant
 *     bytes (x87 80-bit format), never the 6 padding bytes;
 *   - allreduce and allgatherv results are bitwise identical on every rank of the communicator:
 *     each rank keeps a 64-bit FNV-1a digest of the significant result bytes of every case, and
 *     the digests are gathered with PMPI_Allgather once per communicator at the end (one
 *     collective instead of one per case: MPICH oversubscribed takes milliseconds per collective).
 *   - the user-defined non-commutative operation (2x2 matrix product, unsigned wrap-around,
 *     exactly associative) is also checked against the product computed locally in rank order.
 *
 * The standard allows predefined operations only on predefined datatypes (both MPIs here reject
 * MPI_SUM on a derived type), so derived datatypes are reduced with a user-defined commutative
 * SUM that follows the type map (int and double bases).
 *
 * Matrix: fixed cases (every valid predefined C datatype for every predefined op, user ops,
 * derived types, counts 0/1/odd/large, in place, four communicators: MPI_COMM_WORLD, a dup, an
 * even/odd split and a reversed split with key = -rank), then random cases from a fixed seed
 * (the same sequence on every rank). Data depend on the world rank of the process, so a codelet
 * that uses world ranks instead of communicator ranks produces wrong results.
 *
 * Known native MPI bugs the matrix steps around (each explained where it is handled):
 *   Open MPI 4.1.4's ring allreduce overruns its buffer for a datatype with a hole in front
 *   (true_lb > 0): such reductions stay at <= FRONT_HOLE_MAX_COUNT items;
 *   MPICH 4.0.2's allgatherv on a one-rank communicator ignores displs: detected at start, those
 *   cases use displacement 0. Long double padding bytes are never compared (MPICH moves them in
 *   some collectives and not in others).
 *
 * Usage: differential [--quick] [--large BYTES] [--random N] [--seed S] [--only ID] [--verbose]
 *   --quick     a reduced fixed matrix (for MPICH oversubscribed, which busy-polls)
 *   --large     bytes of the "large" cases (default 1258291, 1.2 MiB; must stay > 1 MiB)
 *   --random    random allreduce cases (default 150; half as many for alltoall and allgatherv)
 *   --only      run only case ID (the number in a failure line), to reproduce it
 *   --verbose   print every case and its duration (rank 0)
 * Prints one line per failure ("differential: FAIL ...") and a final line
 * "differential: N cases, M failures"; exits 1 when M > 0.
 *
 * Call sites seen by the preload library: one line each, marked with a "SITE:" comment that the
 * tests look up (allreduce for commutative operations, allreduce_noncommutative, alltoall,
 * allgatherv).
 */
#include <mpi.h>

#include <complex.h>
#include <float.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD 64 /* margin before every buffer's data */
#define TAIL 64 /* margin after */
#define NCOMMS 4
#define MAX_LINES_PER_CASE 3

enum { CLS_SENT = 0, CLS_CMP = 1, CLS_DONTCARE = 2 };

static int world_rank, world_size;
static int quick, verbose, n_random = 150;
static long only = -1; /* --only ID: run just that case (to reproduce a failure) */
static long large_bytes = 1258291;
static uint64_t seed0 = 20240611;

/* ------------------------------------------------------------------ random numbers */

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c)
{
    return splitmix(a ^ splitmix(b ^ splitmix(c + 0x1234567)));
}

/* The random word of element i of world rank wr's data in the case of seed `seed`. */
static uint64_t elem_hash(uint64_t seed, int wr, long i)
{
    return splitmix(seed ^ ((uint64_t)wr * 0xd6e8feb86659fd93ULL) ^
                    ((uint64_t)i * 0x9e3779b97f4a7c15ULL));
}

/* The case sequence: the same on every rank. */
static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state += 0x9e3779b97f4a7c15ULL;
    return splitmix(rng_state);
}

static void fill_stream(unsigned char *dst, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = splitmix(key + i);
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(dst + i, &w, k);
    }
}

/* ------------------------------------------------------------------ bookkeeping */

static unsigned char *case_failed;
static char **case_desc;
static long n_cases, cap_cases;
static int lines_this_case;

static long case_begin(const char *fmt, ...)
{
    if (n_cases == cap_cases) {
        cap_cases = cap_cases ? 2 * cap_cases : 1024;
        case_failed = realloc(case_failed, cap_cases);
        case_desc = realloc(case_desc, cap_cases * sizeof(char *));
    }
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    case_failed[n_cases] = 0;
    case_desc[n_cases] = strdup(text);
    lines_this_case = 0;
    if (verbose && world_rank == 0) {
        static double last;
        double now = PMPI_Wtime();
        if (n_cases > 0) printf("differential: case %ld took %.1f ms\n", n_cases - 1, (now - last) * 1e3);
        last = now;
        printf("differential: case %ld: %s\n", n_cases, text);
        fflush(stdout);
    }
    return n_cases++;
}

static void failf(long id, const char *fmt, ...)
{
    case_failed[id] = 1;
    if (lines_this_case++ >= MAX_LINES_PER_CASE) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("differential: FAIL case %ld [%s] world rank %d: %s\n", id, case_desc[id], world_rank,
           text);
    fflush(stdout);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "differential: out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static unsigned char *filled(size_t n, unsigned char byte)
{
    unsigned char *p = xmalloc(n);
    memset(p, byte, n);
    return p;
}

static unsigned char *copy_of(const unsigned char *src, size_t n)
{
    unsigned char *p = xmalloc(n);
    memcpy(p, src, n);
    return p;
}

static unsigned char sentinel(long id)
{
    static const unsigned char s[] = {0xA5, 0x5A, 0xC3, 0x3C, 0x96, 0x69};
    return s[id % 6];
}

/* ------------------------------------------------------------------ communicators */

typedef struct {
    const char *name;
    MPI_Comm comm; /* tested calls */
    MPI_Comm ref;  /* PMPI duplicate: native reference calls and digest exchange */
    int size, rank;
    int *world_of; /* communicator rank -> world rank */
    uint64_t *digest;
    long *digest_case;
    long n_digest, cap_digest;
} CommInfo;

static CommInfo comms[NCOMMS];

static void comm_setup(CommInfo *c, const char *name, MPI_Comm comm)
{
    c->name = name;
    c->comm = comm;
    PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    PMPI_Comm_dup(comm, &c->ref);
    PMPI_Comm_size(comm, &c->size);
    PMPI_Comm_rank(comm, &c->rank);
    c->world_of = xmalloc(sizeof(int) * c->size);
    MPI_Group g, wg;
    PMPI_Comm_group(comm, &g);
    PMPI_Comm_group(MPI_COMM_WORLD, &wg);
    int *ranks = xmalloc(sizeof(int) * c->size);
    for (int i = 0; i < c->size; i++) ranks[i] = i;
    PMPI_Group_translate_ranks(g, c->size, ranks, wg, c->world_of);
    free(ranks);
    PMPI_Group_free(&g);
    PMPI_Group_free(&wg);
}

static void add_digest(CommInfo *c, long id, uint64_t d)
{
    if (c->n_digest == c->cap_digest) {
        c->cap_digest = c->cap_digest ? 2 * c->cap_digest : 256;
        c->digest = realloc(c->digest, c->cap_digest * sizeof(uint64_t));
        c->digest_case = realloc(c->digest_case, c->cap_digest * sizeof(long));
    }
    c->digest[c->n_digest] = d;
    c->digest_case[c->n_digest++] = id;
}

/* FNV-1a over the bytes of class CLS_CMP. */
static uint64_t digest_of(const unsigned char *buf, const unsigned char *cls, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        if (cls[i] != CLS_CMP) continue;
        h ^= buf[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* ------------------------------------------------------------------ byte classes */

/* Marks CLS_CMP the bytes that (count, dt) at offset `off` of a buffer covers (its type map),
 * found by unpacking all-ones into zeros and all-zeros into ones. Every datatype here has
 * lb = 0 and its data within [0, count * extent). */
static void mark_map(unsigned char *cls, size_t len, size_t off, long count, MPI_Datatype dt)
{
    if (count == 0) return;
    int tsize;
    PMPI_Type_size(dt, &tsize);
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(dt, &lb, &ext);
    size_t n = (size_t)tsize * (size_t)count, span = (size_t)ext * (size_t)count;
    if (off + span > len) {
        fprintf(stderr, "differential: internal error: block beyond its buffer\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *a = filled(span, 0x00), *b = filled(span, 0xFF);
    unsigned char *ones = filled(n, 0xFF), *zeros = filled(n, 0x00);
    int pos = 0;
    PMPI_Unpack(ones, (int)n, &pos, a, (int)count, dt, MPI_COMM_SELF);
    pos = 0;
    PMPI_Unpack(zeros, (int)n, &pos, b, (int)count, dt, MPI_COMM_SELF);
    for (size_t i = 0; i < span; i++)
        if (a[i] == 0xFF && b[i] == 0x00) cls[off + i] = CLS_CMP;
    free(a);
    free(b);
    free(ones);
    free(zeros);
}

/* Unpacks a packed stream of (count, dt) data into buf + off. */
static void unpack_to(unsigned char *buf, size_t off, const unsigned char *stream, long count,
                      MPI_Datatype dt)
{
    if (count == 0) return;
    int tsize, pos = 0;
    PMPI_Type_size(dt, &tsize);
    PMPI_Unpack(stream, tsize * (int)count, &pos, buf + off, (int)count, dt, MPI_COMM_SELF);
}

static MPI_Aint extent_of(MPI_Datatype dt)
{
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(dt, &lb, &ext);
    return ext;
}

static int size_of(MPI_Datatype dt)
{
    int s;
    PMPI_Type_size(dt, &s);
    return s;
}

/* Reports bytes of class CLS_SENT that lost the sentinel. */
static int check_sentinel(long id, const char *who, const unsigned char *buf,
                          const unsigned char *cls, size_t len, unsigned char s)
{
    for (size_t i = 0; i < len; i++) {
        if (cls[i] == CLS_SENT && buf[i] != s) {
            failf(id, "%s: byte %ld relative to recvbuf is outside the result but was written "
                      "(0x%02x, sentinel 0x%02x)",
                  who, (long)i - HEAD, buf[i], s);
            return 1;
        }
    }
    return 0;
}

/* Reports the first CLS_CMP byte where a and b differ; `ext` locates the element. */
static int compare_bytes(long id, const char *what, const unsigned char *a, const unsigned char *b,
                         const unsigned char *cls, size_t len, MPI_Aint ext)
{
    for (size_t i = 0; i < len; i++) {
        if (cls[i] == CLS_CMP && a[i] != b[i]) {
            long rel = (long)i - HEAD;
            failf(id, "%s: first difference at byte %ld (element %ld of extent %ld): 0x%02x vs 0x%02x",
                  what, rel, ext > 0 ? rel / (long)ext : 0L, (long)ext, a[i], b[i]);
            return 1;
        }
    }
    return 0;
}

static int check_send_unchanged(long id, const unsigned char *buf, const unsigned char *saved,
                                size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != saved[i]) {
            failf(id, "send buffer written at byte %ld relative to sendbuf (0x%02x, was 0x%02x)",
                  (long)i - HEAD, buf[i], saved[i]);
            return 1;
        }
    }
    return 0;
}

/* x87 long double: the 6 bytes after the 10 significant ones are padding, which MPI may or may
 * not move (MPICH's gatherv/bcast leave them, its allgatherv copies them): not part of any
 * result. Marks them CLS_DONTCARE in `n` contiguous 16-byte elements from `off`. */
static void ldouble_padding_dontcare(unsigned char *cls, size_t off, long n)
{
    if (sizeof(long double) != 16 || LDBL_MANT_DIG != 64) return;
    for (long e = 0; e < n; e++)
        for (int b = 10; b < 16; b++)
            if (cls[off + (size_t)e * 16 + b] == CLS_CMP) cls[off + (size_t)e * 16 + b] = CLS_DONTCARE;
}

/* ------------------------------------------------------------------ predefined types */

enum { K_INT, K_FLOAT, K_COMPLEX, K_BOOL, K_BYTE, K_PAIR };
enum { OPC_SUM, OPC_PROD, OPC_MINMAX, OPC_LOGIC, OPC_BIT, OPC_LOC, OPC_USER };

typedef struct {
    const char *name;
    MPI_Datatype dt;
    int kind;
    int size;  /* C size of one element */
    int fsize; /* float component size (K_FLOAT, K_COMPLEX, float-valued pairs) */
    int vkind; /* pairs: K_INT or K_FLOAT value */
    int vsize; /* pairs: value size */
    int ioff;  /* pairs: offset of the int index */
} TypeInfo;

#define MAX_TYPES 48
static TypeInfo types[MAX_TYPES];
static int n_types;

static TypeInfo *add_type(const char *name, MPI_Datatype dt, int kind, int size)
{
    TypeInfo *t = &types[n_types++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dt = dt;
    t->kind = kind;
    t->size = size;
    if (kind == K_FLOAT) t->fsize = size;
    if (kind == K_COMPLEX) t->fsize = size / 2;
    return t;
}

#define PAIR(NAME, DT, VT, VKIND)                                                                  \
    do {                                                                                           \
        struct p {                                                                                 \
            VT v;                                                                                  \
            int i;                                                                                 \
        };                                                                                         \
        TypeInfo *t = add_type(NAME, DT, K_PAIR, sizeof(struct p));                                \
        t->vkind = VKIND;                                                                          \
        t->vsize = sizeof(VT);                                                                     \
        t->fsize = VKIND == K_FLOAT ? (int)sizeof(VT) : 0;                                         \
        t->ioff = offsetof(struct p, i);                                                           \
    } while (0)

static void init_types(void)
{
    add_type("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, K_INT, sizeof(signed char));
    add_type("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, K_INT, sizeof(unsigned char));
    add_type("MPI_SHORT", MPI_SHORT, K_INT, sizeof(short));
    add_type("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, K_INT, sizeof(unsigned short));
    add_type("MPI_INT", MPI_INT, K_INT, sizeof(int));
    add_type("MPI_UNSIGNED", MPI_UNSIGNED, K_INT, sizeof(unsigned));
    add_type("MPI_LONG", MPI_LONG, K_INT, sizeof(long));
    add_type("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, K_INT, sizeof(unsigned long));
    add_type("MPI_LONG_LONG", MPI_LONG_LONG, K_INT, sizeof(long long));
    add_type("MPI_LONG_LONG_INT", MPI_LONG_LONG_INT, K_INT, sizeof(long long));
    add_type("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, K_INT, sizeof(unsigned long long));
    add_type("MPI_INT8_T", MPI_INT8_T, K_INT, 1);
    add_type("MPI_INT16_T", MPI_INT16_T, K_INT, 2);
    add_type("MPI_INT32_T", MPI_INT32_T, K_INT, 4);
    add_type("MPI_INT64_T", MPI_INT64_T, K_INT, 8);
    add_type("MPI_UINT8_T", MPI_UINT8_T, K_INT, 1);
    add_type("MPI_UINT16_T", MPI_UINT16_T, K_INT, 2);
    add_type("MPI_UINT32_T", MPI_UINT32_T, K_INT, 4);
    add_type("MPI_UINT64_T", MPI_UINT64_T, K_INT, 8);
    add_type("MPI_AINT", MPI_AINT, K_INT, sizeof(MPI_Aint));
    add_type("MPI_OFFSET", MPI_OFFSET, K_INT, sizeof(MPI_Offset));
    add_type("MPI_COUNT", MPI_COUNT, K_INT, sizeof(MPI_Count));
    add_type("MPI_FLOAT", MPI_FLOAT, K_FLOAT, sizeof(float));
    add_type("MPI_DOUBLE", MPI_DOUBLE, K_FLOAT, sizeof(double));
    add_type("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, K_FLOAT, sizeof(long double));
    add_type("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, K_COMPLEX, sizeof(float _Complex));
    add_type("MPI_C_COMPLEX", MPI_C_COMPLEX, K_COMPLEX, sizeof(float _Complex));
    add_type("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, K_COMPLEX, sizeof(double _Complex));
    add_type("MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, K_COMPLEX,
             sizeof(long double _Complex));
    add_type("MPI_C_BOOL", MPI_C_BOOL, K_BOOL, sizeof(bool));
    add_type("MPI_BYTE", MPI_BYTE, K_BYTE, 1);
    PAIR("MPI_FLOAT_INT", MPI_FLOAT_INT, float, K_FLOAT);
    PAIR("MPI_DOUBLE_INT", MPI_DOUBLE_INT, double, K_FLOAT);
    PAIR("MPI_LONG_INT", MPI_LONG_INT, long, K_INT);
    PAIR("MPI_2INT", MPI_2INT, int, K_INT);
    PAIR("MPI_SHORT_INT", MPI_SHORT_INT, short, K_INT);
    PAIR("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, long double, K_FLOAT);
}

static TypeInfo *type_named(const char *name)
{
    for (int i = 0; i < n_types; i++)
        if (!strcmp(types[i].name, name)) return &types[i];
    fprintf(stderr, "differential: no type %s\n", name);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return NULL;
}

/* Significant bytes of a float component (x87 long double: 10 of 16). */
static int float_sig(int fsize)
{
    return fsize == (int)sizeof(long double) && LDBL_MANT_DIG == 64 ? 10 : fsize;
}

static void put_float(unsigned char *dst, int fsize, long double x)
{
    if (fsize == 4) {
        float f = (float)x;
        memcpy(dst, &f, 4);
    } else if (fsize == 8) {
        double d = (double)x;
        memcpy(dst, &d, 8);
    } else {
        long double l = x;
        memcpy(dst, &l, sizeof l);
    }
}

static long double get_float(const unsigned char *src, int fsize)
{
    if (fsize == 4) {
        float f;
        memcpy(&f, src, 4);
        return f;
    }
    if (fsize == 8) {
        double d;
        memcpy(&d, src, 8);
        return d;
    }
    long double l;
    memcpy(&l, src, sizeof l);
    return l;
}

static long double float_eps(int fsize)
{
    return fsize == 4 ? FLT_EPSILON : fsize == 8 ? DBL_EPSILON : LDBL_EPSILON;
}

static long double float_min(int fsize)
{
    return fsize == 4 ? FLT_MIN : fsize == 8 ? DBL_MIN : LDBL_MIN;
}

/* A floating-point value for an operation class. */
static long double absl_(long double x) { return x < 0 ? -x : x; }

static long double fvalue(int opc, uint64_t h)
{
    long double u = (long double)(h >> 11) * 0x1p-53L;
    switch (opc) {
    case OPC_PROD: return (0.5L + 1.5L * u) * ((h & 1) ? -1.0L : 1.0L);
    case OPC_SUM:
        /* magnitudes from 1/8 to 16; extra bits below double precision for long double */
        return (2.0L * u - 1.0L) * (long double)(1 << (h & 7)) * 0.125L +
               (long double)((h >> 3) & 0xff) * 0x1p-70L;
    default: return 2.0L * u - 1.0L;
    }
}

/* Element i of world rank `wr`'s input for a predefined type. */
static void gen_elem(const TypeInfo *t, int opc, uint64_t seed, int wr, long i, unsigned char *dst)
{
    uint64_t h = elem_hash(seed, wr, i);
    switch (t->kind) {
    case K_INT: {
        uint64_t v = h;
        if (opc == OPC_PROD) v |= 1;
        if (opc == OPC_LOGIC) v = (h % 4 == 0) ? 0 : ((h >> 8) | 1);
        memcpy(dst, &v, t->size); /* little-endian: the low bytes */
        break;
    }
    case K_BOOL: {
        bool b = h & 1;
        memcpy(dst, &b, sizeof b);
        break;
    }
    case K_BYTE: dst[0] = (unsigned char)h; break;
    case K_FLOAT: put_float(dst, t->fsize, fvalue(opc, h)); break;
    case K_COMPLEX:
        put_float(dst, t->fsize, fvalue(opc, h));
        put_float(dst + t->fsize, t->fsize, fvalue(opc, splitmix(h)));
        break;
    case K_PAIR: {
        /* few distinct values: ties are frequent, the smallest index must win */
        long v = (long)(h % 4) - 1;
        if (t->vkind == K_FLOAT)
            put_float(dst, t->vsize, (long double)v + 0.5L);
        else {
            int64_t w = v;
            memcpy(dst, &w, t->vsize);
        }
        int idx = (int)((h >> 32) % 1000) - 500;
        memcpy(dst + t->ioff, &idx, sizeof idx);
        break;
    }
    }
}

/* ------------------------------------------------------------------ derived types */

enum { B_INT32, B_UINT32, B_DOUBLE };

typedef struct {
    const char *name;
    MPI_Datatype dt;
    int base;
    int n;              /* base elements per item */
    MPI_Aint off[8];    /* their offsets in the item */
    MPI_Aint extent;
} Derived;

static Derived dv_vec_int, dv_vec_dbl, dv_idx_int, dv_struct_dd, dv_front_int, dv_mat, dv_matgap,
    dv_int6;
static Derived *derived_all[] = {&dv_vec_int,  &dv_vec_dbl, &dv_idx_int, &dv_struct_dd,
                                 &dv_front_int, &dv_mat,     &dv_matgap,  &dv_int6};
#define N_DERIVED (int)(sizeof derived_all / sizeof derived_all[0])

static void derived_done(Derived *d, const char *name, MPI_Datatype dt, int base, int n,
                         const MPI_Aint *off, MPI_Aint extent)
{
    PMPI_Type_commit(&dt);
    d->name = name;
    d->dt = dt;
    d->base = base;
    d->n = n;
    memcpy(d->off, off, n * sizeof(MPI_Aint));
    d->extent = extent;
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(dt, &lb, &ext);
    if (lb != 0 || ext != extent) {
        fprintf(stderr, "differential: %s has lb %ld extent %ld, expected 0 and %ld\n", name,
                (long)lb, (long)ext, (long)extent);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

struct gap_struct {
    double a;
    int pad; /* never part of the datatype */
    double b;
};

static void init_derived(void)
{
    MPI_Datatype t, u;
    /* 3 blocks of 2 ints, stride 3: gaps inside, extent 8 ints */
    PMPI_Type_vector(3, 2, 3, MPI_INT, &t);
    derived_done(&dv_vec_int, "vector(3,2,3,int)", t, B_INT32, 6,
                 (MPI_Aint[]){0, 4, 12, 16, 24, 28}, 32);
    /* 2 doubles at stride 3, resized to 4 doubles: gaps inside and at the end */
    PMPI_Type_vector(2, 1, 3, MPI_DOUBLE, &u);
    PMPI_Type_create_resized(u, 0, 32, &t);
    PMPI_Type_free(&u);
    derived_done(&dv_vec_dbl, "resized(vector(2,1,3,double),32)", t, B_DOUBLE, 2,
                 (MPI_Aint[]){0, 24}, 32);
    /* indexed: ints at 0, 2, 3, 6 */
    PMPI_Type_indexed(3, (int[]){1, 2, 1}, (int[]){0, 2, 6}, MPI_INT, &t);
    derived_done(&dv_idx_int, "indexed({1,2,1},{0,2,6},int)", t, B_INT32, 4,
                 (MPI_Aint[]){0, 8, 12, 24}, 28);
    /* struct {double a; int pad; double b} using a and b only */
    PMPI_Type_create_struct(2, (int[]){1, 1},
                            (MPI_Aint[]){offsetof(struct gap_struct, a),
                                         offsetof(struct gap_struct, b)},
                            (MPI_Datatype[]){MPI_DOUBLE, MPI_DOUBLE}, &u);
    PMPI_Type_create_resized(u, 0, sizeof(struct gap_struct), &t);
    PMPI_Type_free(&u);
    derived_done(&dv_struct_dd, "struct{double a;int pad;double b}", t, B_DOUBLE, 2,
                 (MPI_Aint[]){offsetof(struct gap_struct, a), offsetof(struct gap_struct, b)},
                 sizeof(struct gap_struct));
    /* 2 ints at byte 8 of a 24-byte item: a hole in front (true lb 8) and behind */
    PMPI_Type_create_struct(1, (int[]){2}, (MPI_Aint[]){8}, (MPI_Datatype[]){MPI_INT}, &u);
    PMPI_Type_create_resized(u, 0, 24, &t);
    PMPI_Type_free(&u);
    derived_done(&dv_front_int, "resized(struct{hole;int[2]},24)", t, B_INT32, 2,
                 (MPI_Aint[]){8, 12}, 24);
    /* 2x2 matrices of unsigned: contiguous, and with a gap inside and at the end */
    PMPI_Type_contiguous(4, MPI_UNSIGNED, &t);
    derived_done(&dv_mat, "mat2x2(unsigned)", t, B_UINT32, 4, (MPI_Aint[]){0, 4, 8, 12}, 16);
    PMPI_Type_indexed(2, (int[]){2, 2}, (int[]){0, 3}, MPI_UNSIGNED, &u);
    PMPI_Type_create_resized(u, 0, 24, &t);
    PMPI_Type_free(&u);
    derived_done(&dv_matgap, "resized(indexed mat2x2 with gaps,24)", t, B_UINT32, 4,
                 (MPI_Aint[]){0, 4, 12, 16}, 24);
    PMPI_Type_contiguous(6, MPI_INT, &t);
    derived_done(&dv_int6, "contiguous(6,int)", t, B_INT32, 6,
                 (MPI_Aint[]){0, 4, 8, 12, 16, 20}, 24);
}

static const Derived *derived_of(MPI_Datatype dt)
{
    for (int i = 0; i < N_DERIVED; i++)
        if (derived_all[i]->dt == dt) return derived_all[i];
    return NULL;
}

static int base_size(int base) { return base == B_DOUBLE ? 8 : 4; }

/* Base element j of world rank `wr`'s stream for a derived-type reduction. */
static void gen_base(int base, uint64_t seed, int wr, long j, unsigned char *dst)
{
    uint64_t h = elem_hash(seed, wr, j);
    if (base == B_DOUBLE) {
        double d = (double)fvalue(OPC_SUM, h);
        memcpy(dst, &d, 8);
    } else {
        uint32_t v = (uint32_t)h;
        memcpy(dst, &v, 4);
    }
}

/* ------------------------------------------------------------------ user operations */

static volatile long tested_calls;

static void usum_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt == MPI_UNSIGNED) {
        /* a + b + ab: (1+a)(1+b) - 1, commutative and associative mod 2^32 */
        uint32_t *a = in, *b = inout;
        for (int i = 0; i < *len; i++) b[i] = a[i] + b[i] + a[i] * b[i];
        return;
    }
    const Derived *d = derived_of(*dt);
    if (!d || d->base == B_UINT32) {
        fprintf(stderr, "differential: user SUM called with an unexpected datatype\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    unsigned char *a = in, *b = inout;
    for (long k = 0; k < *len; k++) {
        for (int j = 0; j < d->n; j++) {
            size_t o = (size_t)k * d->extent + d->off[j];
            if (d->base == B_DOUBLE) {
                double x, y;
                memcpy(&x, a + o, 8);
                memcpy(&y, b + o, 8);
                y = x + y;
                memcpy(b + o, &y, 8);
            } else {
                uint32_t x, y;
                memcpy(&x, a + o, 4);
                memcpy(&y, b + o, 4);
                y = x + y;
                memcpy(b + o, &y, 4);
            }
        }
    }
}

static void mat_mul(const uint32_t *a, const uint32_t *b, uint32_t *c)
{
    uint32_t r0 = a[0] * b[0] + a[1] * b[2], r1 = a[0] * b[1] + a[1] * b[3];
    uint32_t r2 = a[2] * b[0] + a[3] * b[2], r3 = a[2] * b[1] + a[3] * b[3];
    c[0] = r0;
    c[1] = r1;
    c[2] = r2;
    c[3] = r3;
}

/* inout = in x inout: `in` holds the operands of lower ranks (MPI's order for user ops). */
static void mat_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const Derived *d = derived_of(*dt);
    if (!d || d->base != B_UINT32 || d->n != 4) {
        fprintf(stderr, "differential: matrix product called with an unexpected datatype\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    unsigned char *a = in, *b = inout;
    for (long k = 0; k < *len; k++) {
        uint32_t x[4], y[4];
        for (int j = 0; j < 4; j++) {
            memcpy(&x[j], a + (size_t)k * d->extent + d->off[j], 4);
            memcpy(&y[j], b + (size_t)k * d->extent + d->off[j], 4);
        }
        mat_mul(x, y, y);
        for (int j = 0; j < 4; j++) memcpy(b + (size_t)k * d->extent + d->off[j], &y[j], 4);
    }
}

/* ------------------------------------------------------------------ operations */

typedef struct {
    const char *name;
    MPI_Op op;
    int opc;
    int commutative;
} OpInfo;

enum {
    OP_MAX, OP_MIN, OP_SUM, OP_PROD, OP_LAND, OP_LOR, OP_LXOR, OP_BAND, OP_BOR, OP_BXOR,
    OP_MAXLOC, OP_MINLOC, OP_USUM, OP_UMAT, N_OPS
};
static OpInfo ops[N_OPS];

static void init_ops(void)
{
    ops[OP_MAX] = (OpInfo){"MPI_MAX", MPI_MAX, OPC_MINMAX, 1};
    ops[OP_MIN] = (OpInfo){"MPI_MIN", MPI_MIN, OPC_MINMAX, 1};
    ops[OP_SUM] = (OpInfo){"MPI_SUM", MPI_SUM, OPC_SUM, 1};
    ops[OP_PROD] = (OpInfo){"MPI_PROD", MPI_PROD, OPC_PROD, 1};
    ops[OP_LAND] = (OpInfo){"MPI_LAND", MPI_LAND, OPC_LOGIC, 1};
    ops[OP_LOR] = (OpInfo){"MPI_LOR", MPI_LOR, OPC_LOGIC, 1};
    ops[OP_LXOR] = (OpInfo){"MPI_LXOR", MPI_LXOR, OPC_LOGIC, 1};
    ops[OP_BAND] = (OpInfo){"MPI_BAND", MPI_BAND, OPC_BIT, 1};
    ops[OP_BOR] = (OpInfo){"MPI_BOR", MPI_BOR, OPC_BIT, 1};
    ops[OP_BXOR] = (OpInfo){"MPI_BXOR", MPI_BXOR, OPC_BIT, 1};
    ops[OP_MAXLOC] = (OpInfo){"MPI_MAXLOC", MPI_MAXLOC, OPC_LOC, 1};
    ops[OP_MINLOC] = (OpInfo){"MPI_MINLOC", MPI_MINLOC, OPC_LOC, 1};
    ops[OP_USUM] = (OpInfo){"user_commutative_sum", MPI_OP_NULL, OPC_USER, 1};
    ops[OP_UMAT] = (OpInfo){"user_noncommutative_matmul", MPI_OP_NULL, OPC_USER, 0};
    PMPI_Op_create(usum_fn, 1, &ops[OP_USUM].op);
    PMPI_Op_create(mat_fn, 0, &ops[OP_UMAT].op);
}

/* Whether the standard defines predefined op `o` on predefined type `t`. */
static int valid(int o, const TypeInfo *t)
{
    switch (o) {
    case OP_MAX:
    case OP_MIN: return t->kind == K_INT || t->kind == K_FLOAT;
    case OP_SUM:
    case OP_PROD: return t->kind == K_INT || t->kind == K_FLOAT || t->kind == K_COMPLEX;
    case OP_LAND:
    case OP_LOR:
    case OP_LXOR: return t->kind == K_INT || t->kind == K_BOOL;
    case OP_BAND:
    case OP_BOR:
    case OP_BXOR: return t->kind == K_INT || t->kind == K_BYTE;
    case OP_MAXLOC:
    case OP_MINLOC: return t->kind == K_PAIR;
    case OP_USUM: return t->dt == MPI_UNSIGNED;
    default: return 0;
    }
}

/* ------------------------------------------------------------------ tested calls */

__attribute__((noinline)) static int tested_allreduce(const void *s, void *r, int n,
                                                      MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    int rc = MPI_Allreduce(s, r, n, dt, op, comm); /* SITE:allreduce */
    tested_calls++;
    return rc;
}

__attribute__((noinline)) static int tested_allreduce_noncomm(const void *s, void *r, int n,
                                                              MPI_Datatype dt, MPI_Op op,
                                                              MPI_Comm comm)
{
    int rc = MPI_Allreduce(s, r, n, dt, op, comm); /* SITE:allreduce_noncommutative */
    tested_calls++;
    return rc;
}

__attribute__((noinline)) static int tested_alltoall(const void *s, int sc, MPI_Datatype st,
                                                     void *r, int rc_, MPI_Datatype rt,
                                                     MPI_Comm comm)
{
    int rc = MPI_Alltoall(s, sc, st, r, rc_, rt, comm); /* SITE:alltoall */
    tested_calls++;
    return rc;
}

__attribute__((noinline)) static int tested_allgatherv(const void *s, int sc, MPI_Datatype st,
                                                       void *r, const int *counts,
                                                       const int *displs, MPI_Datatype rt,
                                                       MPI_Comm comm)
{
    int rc = MPI_Allgatherv(s, sc, st, r, counts, displs, rt, comm); /* SITE:allgatherv */
    tested_calls++;
    return rc;
}

static const char *rc_text(int rc)
{
    static char text[MPI_MAX_ERROR_STRING + 32];
    int len = 0;
    char msg[MPI_MAX_ERROR_STRING] = "";
    PMPI_Error_string(rc, msg, &len);
    snprintf(text, sizeof text, "%d (%s)", rc, msg);
    return text;
}

/* ------------------------------------------------------------------ allreduce */

typedef struct {
    int op;
    const TypeInfo *t; /* predefined type, or */
    const Derived *d;  /* derived type (user operations only) */
    long count;
    int in_place;
    int comm;
    uint64_t seed;
    const char *origin;
} ARCase;

/* Writes world rank `wr`'s input for case c into buf + HEAD. */
static void allreduce_input(const ARCase *c, int wr, unsigned char *buf)
{
    if (c->t) {
        int opc = ops[c->op].opc == OPC_USER ? OPC_BIT : ops[c->op].opc;
        for (long i = 0; i < c->count; i++)
            gen_elem(c->t, opc, c->seed, wr, i, buf + HEAD + (size_t)i * c->t->size);
    } else {
        long n = c->count * c->d->n;
        int bs = base_size(c->d->base);
        unsigned char *stream = xmalloc((size_t)n * bs);
        for (long j = 0; j < n; j++) gen_base(c->d->base, c->seed, wr, j, stream + (size_t)j * bs);
        unpack_to(buf, HEAD, stream, c->count, c->d->dt);
        free(stream);
    }
}

/* Whether results are compared within a tolerance (else bitwise). */
static int allreduce_inexact(const ARCase *c)
{
    if (c->t)
        return (c->op == OP_SUM || c->op == OP_PROD) &&
               (c->t->kind == K_FLOAT || c->t->kind == K_COMPLEX);
    return c->d->base == B_DOUBLE;
}

/* Compares float components of r and n within the documented tolerance. */
static void allreduce_tolerance(long id, const ARCase *c, const CommInfo *ci,
                                const unsigned char *r, const unsigned char *nat)
{
    int p = ci->size;
    int fsize, ncomp, item_size;
    long items;
    if (c->t) {
        fsize = c->t->fsize;
        ncomp = c->t->kind == K_COMPLEX ? 2 : 1;
        item_size = c->t->size;
        items = c->count;
    } else {
        fsize = 8;
        ncomp = 1;
        item_size = 8;
        items = c->count * c->d->n;
    }
    unsigned char tmp[64];
    long double eps = float_eps(fsize), tiny = float_min(fsize);
    for (long i = 0; i < items; i++) {
        size_t off;
        if (c->t)
            off = HEAD + (size_t)i * item_size;
        else
            off = HEAD + (size_t)(i / c->d->n) * c->d->extent + c->d->off[i % c->d->n];
        long double scale[2] = {0, 0};
        if (c->op == OP_PROD) scale[0] = scale[1] = 1;
        for (int j = 0; j < p; j++) {
            int wr = ci->world_of[j];
            long double x[2] = {0, 0};
            if (c->t) {
                gen_elem(c->t, ops[c->op].opc, c->seed, wr, i, tmp);
                for (int k = 0; k < ncomp; k++) x[k] = get_float(tmp + k * fsize, fsize);
            } else {
                gen_base(B_DOUBLE, c->seed, wr, i, tmp);
                x[0] = get_float(tmp, 8);
            }
            if (c->op == OP_PROD) {
                /* |re| + |im| bounds |z| from above (no libm: the harness does not link it) */
                long double m = absl_(x[0]) + absl_(x[1]);
                scale[0] *= m;
                scale[1] *= m;
            } else {
                for (int k = 0; k < ncomp; k++) scale[k] += absl_(x[k]);
            }
        }
        for (int k = 0; k < ncomp; k++) {
            long double a = get_float(r + off + k * fsize, fsize);
            long double b = get_float(nat + off + k * fsize, fsize);
            long double tol = 8.0L * p * eps * scale[k] + p * tiny;
            if (!(absl_(a - b) <= tol)) {
                failf(id, "element %ld component %d: result %.21Lg, native %.21Lg, |diff| %.3Lg > "
                          "tolerance %.3Lg",
                      i, k, a, b, absl_(a - b), tol);
                return;
            }
        }
    }
}

/* The rank-order product for the matrix operation, checked against native. */
static void allreduce_matrix_expected(long id, const ARCase *c, const CommInfo *ci,
                                      const unsigned char *nat)
{
    for (long k = 0; k < c->count; k++) {
        uint32_t acc[4] = {1, 0, 0, 1};
        for (int j = 0; j < ci->size; j++) {
            uint32_t m[4];
            for (int e = 0; e < 4; e++) {
                unsigned char b[4];
                gen_base(B_UINT32, c->seed, ci->world_of[j], 4 * k + e, b);
                memcpy(&m[e], b, 4);
            }
            mat_mul(acc, m, acc);
        }
        for (int e = 0; e < 4; e++) {
            uint32_t got;
            memcpy(&got, nat + HEAD + (size_t)k * c->d->extent + c->d->off[e], 4);
            if (got != acc[e]) {
                failf(id, "native result differs from the rank-order product at item %ld entry %d "
                          "(%u vs %u): test or MPI bug",
                      k, e, got, acc[e]);
                return;
            }
        }
    }
}

/* The exact result of a user SUM on a derived int type (wrap-around), laid out like recvbuf. */
static unsigned char *allreduce_int_expected(const ARCase *c, const CommInfo *ci, size_t len,
                                             unsigned char s)
{
    long n = c->count * c->d->n;
    uint32_t *sum = calloc((size_t)(n ? n : 1), 4);
    for (int j = 0; j < ci->size; j++)
        for (long i = 0; i < n; i++) {
            uint32_t v;
            unsigned char b[4];
            gen_base(B_INT32, c->seed, ci->world_of[j], i, b);
            memcpy(&v, b, 4);
            sum[i] += v;
        }
    unsigned char *buf = filled(len, s);
    unpack_to(buf, HEAD, (unsigned char *)sum, c->count, c->d->dt);
    free(sum);
    return buf;
}

static void run_allreduce(const ARCase *c)
{
    CommInfo *ci = &comms[c->comm];
    const OpInfo *o = &ops[c->op];
    MPI_Datatype dt = c->t ? c->t->dt : c->d->dt;
    const char *tname = c->t ? c->t->name : c->d->name;
    long id = case_begin("allreduce %s %s count=%ld%s comm=%s(size %d) %s", o->name, tname,
                         c->count, c->in_place ? " in_place" : "", ci->name, ci->size, c->origin);
    if (only >= 0 && id != only) return;
    MPI_Aint ext = extent_of(dt);
    size_t len = HEAD + (size_t)c->count * ext + TAIL;
    unsigned char s = sentinel(id);

    unsigned char *sbuf = filled(len, s);
    allreduce_input(c, world_rank, sbuf);
    unsigned char *saved = copy_of(sbuf, len);
    unsigned char *cls = filled(len, CLS_SENT);
    mark_map(cls, len, HEAD, c->count, dt);
    if (c->t) {
        /* long double padding is not part of a reduction's value */
        int fs = c->t->fsize;
        if (fs == (int)sizeof(long double) && float_sig(fs) < fs) {
            int ncomp = c->t->kind == K_COMPLEX ? 2 : 1;
            for (long i = 0; i < c->count; i++)
                for (int k = 0; k < ncomp; k++)
                    for (int b = float_sig(fs); b < fs; b++)
                        cls[HEAD + (size_t)i * c->t->size + k * fs + b] = CLS_DONTCARE;
        }
    }
    unsigned char *rbuf = c->in_place ? copy_of(sbuf, len) : filled(len, s);
    unsigned char *nbuf = c->in_place ? copy_of(sbuf, len) : filled(len, s);

    const void *send = c->in_place ? MPI_IN_PLACE : (const void *)(sbuf + HEAD);
    int rc = o->commutative
                 ? tested_allreduce(send, rbuf + HEAD, (int)c->count, dt, o->op, ci->comm)
                 : tested_allreduce_noncomm(send, rbuf + HEAD, (int)c->count, dt, o->op, ci->comm);
    if (rc != MPI_SUCCESS) failf(id, "MPI_Allreduce returned %s", rc_text(rc));
    if (!c->in_place) check_send_unchanged(id, sbuf, saved, len);
    unsigned char *expected = NULL;
    if (c->d && c->d->base == B_INT32) expected = allreduce_int_expected(c, ci, len, s);
    const void *nsend = c->in_place ? MPI_IN_PLACE : (const void *)(sbuf + HEAD);
    int nrc = PMPI_Allreduce(nsend, nbuf + HEAD, (int)c->count, dt, o->op, ci->ref);
    if (nrc != MPI_SUCCESS) failf(id, "native PMPI_Allreduce returned %s", rc_text(nrc));
    if (expected)
        compare_bytes(id, "native vs exact sum (test or MPI bug)", nbuf, expected, cls, len, ext);

    check_sentinel(id, "result", rbuf, cls, len, s);
    check_sentinel(id, "native result", nbuf, cls, len, s);
    if (allreduce_inexact(c))
        allreduce_tolerance(id, c, ci, rbuf, nbuf);
    else
        compare_bytes(id, "result vs native", rbuf, nbuf, cls, len, ext);
    if (c->op == OP_UMAT) allreduce_matrix_expected(id, c, ci, nbuf);
    add_digest(ci, id, digest_of(rbuf, cls, len));
    free(expected);
    free(sbuf);
    free(saved);
    free(cls);
    free(rbuf);
    free(nbuf);
}

/* ------------------------------------------------------------------ data movement types */

enum { SB_INT, SB_DOUBLE, SB_BYTE, SB_DCOMPLEX, SB_LDOUBLE, SB_UNSIGNED, SB_DOUBLE_INT, SB_UINT8 };

typedef struct {
    const char *name;
    MPI_Datatype dt;
    int base;  /* signature element */
    int nbase; /* signature elements per item */
} XType;

static XType x_int, x_2int, x_double, x_byte, x_dcomplex, x_ldouble, x_double_int, x_unsigned,
    x_uint8, x_vec_int, x_int6, x_idx_int, x_front_int, x_vec_dbl, x_struct_dd, x_mat, x_matgap;
static XType *xtypes[] = {&x_int,       &x_2int,     &x_double,    &x_byte,      &x_dcomplex,
                          &x_ldouble,   &x_double_int, &x_unsigned, &x_uint8,    &x_vec_int,
                          &x_int6,      &x_idx_int,  &x_front_int, &x_vec_dbl,   &x_struct_dd,
                          &x_mat,       &x_matgap};
#define N_XTYPES (int)(sizeof xtypes / sizeof xtypes[0])

static void init_xtypes(void)
{
    x_int = (XType){"MPI_INT", MPI_INT, SB_INT, 1};
    x_2int = (XType){"MPI_2INT", MPI_2INT, SB_INT, 2};
    x_double = (XType){"MPI_DOUBLE", MPI_DOUBLE, SB_DOUBLE, 1};
    x_byte = (XType){"MPI_BYTE", MPI_BYTE, SB_BYTE, 1};
    x_dcomplex = (XType){"MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, SB_DCOMPLEX, 1};
    x_ldouble = (XType){"MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, SB_LDOUBLE, 1};
    x_double_int = (XType){"MPI_DOUBLE_INT", MPI_DOUBLE_INT, SB_DOUBLE_INT, 1};
    x_unsigned = (XType){"MPI_UNSIGNED", MPI_UNSIGNED, SB_UNSIGNED, 1};
    x_uint8 = (XType){"MPI_UINT8_T", MPI_UINT8_T, SB_UINT8, 1};
    x_vec_int = (XType){dv_vec_int.name, dv_vec_int.dt, SB_INT, 6};
    x_int6 = (XType){dv_int6.name, dv_int6.dt, SB_INT, 6};
    x_idx_int = (XType){dv_idx_int.name, dv_idx_int.dt, SB_INT, 4};
    x_front_int = (XType){dv_front_int.name, dv_front_int.dt, SB_INT, 2};
    x_vec_dbl = (XType){dv_vec_dbl.name, dv_vec_dbl.dt, SB_DOUBLE, 2};
    x_struct_dd = (XType){dv_struct_dd.name, dv_struct_dd.dt, SB_DOUBLE, 2};
    x_mat = (XType){dv_mat.name, dv_mat.dt, SB_UNSIGNED, 4};
    x_matgap = (XType){dv_matgap.name, dv_matgap.dt, SB_UNSIGNED, 4};
}

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }
static long lcm(long a, long b) { return a / gcd(a, b) * b; }

/* Signature elements per unit: a unit is the smallest block both types can express. */
static long unit_of(const XType *a, const XType *b) { return lcm(a->nbase, b->nbase); }

static const XType *random_partner(const XType *t, uint64_t h)
{
    const XType *same[N_XTYPES];
    int n = 0;
    for (int i = 0; i < N_XTYPES; i++)
        if (xtypes[i]->base == t->base) same[n++] = xtypes[i];
    return same[h % n];
}

/* Bytes of the signature elements of `units` units. */
static size_t unit_bytes(const XType *t, long units, long unit)
{
    return (size_t)size_of(t->dt) / t->nbase * (size_t)(units * unit);
}

/* ------------------------------------------------------------------ alltoall */

typedef struct {
    const XType *st, *rt;
    long units; /* per destination, in units of unit_of(st, rt) */
    int in_place;
    int null_send_args; /* in place: pass sendcount 0 and MPI_DATATYPE_NULL (ignored) */
    int comm;
    uint64_t seed;
    const char *origin;
} A2ACase;

static void stream_for(unsigned char *dst, size_t n, uint64_t seed, int from, int to)
{
    fill_stream(dst, n, mix3(seed, (uint64_t)from, (uint64_t)to + 7919));
}

static void run_alltoall(const A2ACase *c)
{
    CommInfo *ci = &comms[c->comm];
    const XType *st = c->in_place ? c->rt : c->st, *rt = c->rt;
    long unit = unit_of(st, rt);
    long scount = c->units * unit / st->nbase, rcount = c->units * unit / rt->nbase;
    long id;
    if (c->in_place)
        id = case_begin("alltoall in_place%s recv %ld x %s comm=%s(size %d) %s",
                        c->null_send_args ? "(sendtype MPI_DATATYPE_NULL)" : "", rcount, rt->name,
                        ci->name, ci->size, c->origin);
    else
        id = case_begin("alltoall send %ld x %s recv %ld x %s comm=%s(size %d) %s", scount,
                        st->name, rcount, rt->name, ci->name, ci->size, c->origin);
    if (only >= 0 && id != only) return;
    int p = ci->size;
    unsigned char s = sentinel(id);
    size_t block = unit_bytes(rt, c->units, unit);
    unsigned char *stream = xmalloc(block);
    MPI_Aint rext = extent_of(rt->dt), sext = extent_of(st->dt);
    size_t rlen = HEAD + (size_t)p * rcount * rext + TAIL;
    size_t slen = HEAD + (size_t)p * scount * sext + TAIL;

    unsigned char *expected = filled(rlen, s);
    for (int j = 0; j < p; j++) {
        stream_for(stream, block, c->seed, ci->world_of[j], world_rank);
        unpack_to(expected, HEAD + (size_t)j * rcount * rext, stream, rcount, rt->dt);
    }
    unsigned char *cls = filled(rlen, CLS_SENT);
    mark_map(cls, rlen, HEAD, (long)p * rcount, rt->dt);
    if (rt->base == SB_LDOUBLE) ldouble_padding_dontcare(cls, HEAD, (long)p * rcount);

    unsigned char *sbuf = NULL, *saved = NULL, *rbuf, *nbuf;
    if (c->in_place) {
        rbuf = filled(rlen, s);
        for (int k = 0; k < p; k++) {
            stream_for(stream, block, c->seed, world_rank, ci->world_of[k]);
            unpack_to(rbuf, HEAD + (size_t)k * rcount * rext, stream, rcount, rt->dt);
        }
        nbuf = copy_of(rbuf, rlen);
    } else {
        sbuf = filled(slen, s);
        for (int k = 0; k < p; k++) {
            stream_for(stream, block, c->seed, world_rank, ci->world_of[k]);
            unpack_to(sbuf, HEAD + (size_t)k * scount * sext, stream, scount, st->dt);
        }
        saved = copy_of(sbuf, slen);
        rbuf = filled(rlen, s);
        nbuf = filled(rlen, s);
    }
    int rc, nrc;
    if (c->in_place) {
        int sc = c->null_send_args ? 0 : (int)rcount;
        MPI_Datatype sdt = c->null_send_args ? MPI_DATATYPE_NULL : rt->dt;
        rc = tested_alltoall(MPI_IN_PLACE, sc, sdt, rbuf + HEAD, (int)rcount, rt->dt, ci->comm);
        nrc = PMPI_Alltoall(MPI_IN_PLACE, sc, sdt, nbuf + HEAD, (int)rcount, rt->dt, ci->ref);
    } else {
        rc = tested_alltoall(sbuf + HEAD, (int)scount, st->dt, rbuf + HEAD, (int)rcount, rt->dt,
                             ci->comm);
        check_send_unchanged(id, sbuf, saved, slen);
        nrc = PMPI_Alltoall(sbuf + HEAD, (int)scount, st->dt, nbuf + HEAD, (int)rcount, rt->dt,
                            ci->ref);
    }
    if (rc != MPI_SUCCESS) failf(id, "MPI_Alltoall returned %s", rc_text(rc));
    if (nrc != MPI_SUCCESS) failf(id, "native PMPI_Alltoall returned %s", rc_text(nrc));
    check_sentinel(id, "result", rbuf, cls, rlen, s);
    check_sentinel(id, "native result", nbuf, cls, rlen, s);
    compare_bytes(id, "result vs native", rbuf, nbuf, cls, rlen, rext);
    compare_bytes(id, "native vs expected data (test or MPI bug)", nbuf, expected, cls, rlen, rext);
    free(stream);
    free(expected);
    free(cls);
    free(sbuf);
    free(saved);
    free(rbuf);
    free(nbuf);
}

/* ------------------------------------------------------------------ allgatherv */

/* MPICH 4.0.2's MPI_Allgatherv on a one-rank communicator copies to recvbuf + 0, ignoring
 * displs. Where the native MPI does that, one-rank cases start at displacement 0 (only the
 * ranks of that one-rank communicator change their case: no other rank takes part in it). */
static int native_agv_self_bug;

static void probe_native_allgatherv(void)
{
    int s = 7, r[2] = {-1, -1}, count = 1, displ = 1;
    PMPI_Allgatherv(&s, 1, MPI_INT, r, &count, &displ, MPI_INT, MPI_COMM_SELF);
    native_agv_self_bug = r[1] != 7;
    if (native_agv_self_bug && world_rank == 0)
        printf("differential: note: native MPI_Allgatherv ignores displs on one-rank "
               "communicators: one-rank cases use displacement 0\n");
}

typedef struct {
    const XType *st, *rt;
    long max_units; /* per rank, in units of unit_of(st, rt); large cases: 3/4 of it or more */
    int large;
    int zeros;      /* some ranks contribute nothing */
    int permuted;   /* blocks placed in a permuted order */
    int gaps;       /* free elements between blocks */
    int in_place;
    int comm;
    uint64_t seed;
    const char *origin;
} AGVCase;

static void run_allgatherv(const AGVCase *c)
{
    CommInfo *ci = &comms[c->comm];
    int p = ci->size, me = ci->rank;
    const XType *st = c->in_place ? c->rt : c->st, *rt = c->rt;
    long unit = unit_of(st, rt);
    /* draws depend on world_size only, so every rank derives the same layout */
    long *units = xmalloc(sizeof(long) * world_size);
    int *counts = xmalloc(sizeof(int) * p), *displs = xmalloc(sizeof(int) * p);
    int *order = xmalloc(sizeof(int) * p);
    for (int j = 0; j < world_size; j++) {
        uint64_t h = mix3(c->seed, 11, (uint64_t)j);
        units[j] = c->max_units ? (long)(h % (uint64_t)(c->max_units + 1)) : 0;
        if (units[j] == 0 && c->max_units && !c->zeros) units[j] = 1 + (long)((h >> 20) % c->max_units);
        if (c->zeros && j % 3 == 1) units[j] = 0;
        if (c->large) units[j] = c->max_units - (long)(h % (uint64_t)(c->max_units / 4 + 1));
    }
    for (int j = 0; j < p; j++) {
        counts[j] = (int)(units[j] * unit / rt->nbase);
        order[j] = j;
    }
    if (c->permuted)
        for (int j = p - 1; j > 0; j--) {
            int k = (int)(mix3(c->seed, 13, (uint64_t)j) % (uint64_t)(j + 1));
            int t = order[j];
            order[j] = order[k];
            order[k] = t;
        }
    long end = 0;
    for (int j = 0; j < p; j++) {
        if (c->gaps && !(p == 1 && native_agv_self_bug))
            end += (long)(mix3(c->seed, 17, (uint64_t)j) % 3);
        displs[order[j]] = (int)end;
        end += counts[order[j]];
    }
    if (c->gaps) end += 1;
    long sendcount = units[me] * unit / st->nbase;
    long total = 0;
    for (int j = 0; j < p; j++) total += counts[j];
    long id;
    if (c->in_place)
        id = case_begin("allgatherv in_place recv %ld x %s over %ld items%s%s%s comm=%s(size %d) %s",
                        total, rt->name, end, c->zeros ? " zeros" : "",
                        c->permuted ? " permuted" : "", c->gaps ? " gaps" : "", ci->name, p,
                        c->origin);
    else
        id = case_begin("allgatherv send %s recv %ld x %s over %ld items%s%s%s comm=%s(size %d) %s",
                        st->name, total, rt->name, end, c->zeros ? " zeros" : "",
                        c->permuted ? " permuted" : "", c->gaps ? " gaps" : "", ci->name, p,
                        c->origin);
    if (only >= 0 && id != only) {
        free(units);
        free(counts);
        free(displs);
        free(order);
        return;
    }
    unsigned char s = sentinel(id);
    MPI_Aint rext = extent_of(rt->dt), sext = extent_of(st->dt);
    size_t rlen = HEAD + (size_t)end * rext + TAIL;
    size_t slen = HEAD + (size_t)sendcount * sext + TAIL;
    unsigned char *expected = filled(rlen, s), *cls = filled(rlen, CLS_SENT);
    unsigned char *mine = NULL;
    for (int j = 0; j < p; j++) {
        size_t n = unit_bytes(rt, units[j], unit);
        unsigned char *stream = xmalloc(n);
        stream_for(stream, n, c->seed, ci->world_of[j], 0);
        unpack_to(expected, HEAD + (size_t)displs[j] * rext, stream, counts[j], rt->dt);
        mark_map(cls, rlen, HEAD + (size_t)displs[j] * rext, counts[j], rt->dt);
        if (rt->base == SB_LDOUBLE)
            ldouble_padding_dontcare(cls, HEAD + (size_t)displs[j] * rext, counts[j]);
        if (j == me)
            mine = stream;
        else
            free(stream);
    }
    unsigned char *sbuf = NULL, *saved = NULL, *rbuf, *nbuf;
    if (c->in_place) {
        rbuf = filled(rlen, s);
        unpack_to(rbuf, HEAD + (size_t)displs[me] * rext, mine, counts[me], rt->dt);
        nbuf = copy_of(rbuf, rlen);
    } else {
        sbuf = filled(slen, s);
        unpack_to(sbuf, HEAD, mine, sendcount, st->dt);
        saved = copy_of(sbuf, slen);
        rbuf = filled(rlen, s);
        nbuf = filled(rlen, s);
    }
    int rc, nrc;
    if (c->in_place) {
        rc = tested_allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf + HEAD, counts, displs,
                               rt->dt, ci->comm);
        nrc = PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, nbuf + HEAD, counts, displs,
                              rt->dt, ci->ref);
    } else {
        rc = tested_allgatherv(sbuf + HEAD, (int)sendcount, st->dt, rbuf + HEAD, counts, displs,
                               rt->dt, ci->comm);
        check_send_unchanged(id, sbuf, saved, slen);
        nrc = PMPI_Allgatherv(sbuf + HEAD, (int)sendcount, st->dt, nbuf + HEAD, counts, displs,
                              rt->dt, ci->ref);
    }
    if (rc != MPI_SUCCESS) failf(id, "MPI_Allgatherv returned %s", rc_text(rc));
    if (nrc != MPI_SUCCESS) failf(id, "native PMPI_Allgatherv returned %s", rc_text(nrc));
    check_sentinel(id, "result", rbuf, cls, rlen, s);
    check_sentinel(id, "native result", nbuf, cls, rlen, s);
    compare_bytes(id, "result vs native", rbuf, nbuf, cls, rlen, rext);
    compare_bytes(id, "native vs expected data (test or MPI bug)", nbuf, expected, cls, rlen, rext);
    add_digest(ci, id, digest_of(rbuf, cls, rlen));
    free(units);
    free(counts);
    free(displs);
    free(order);
    free(mine);
    free(expected);
    free(cls);
    free(sbuf);
    free(saved);
    free(rbuf);
    free(nbuf);
}

/* ------------------------------------------------------------------ the matrix */

/* Open MPI 4.1.4's ring allreduce (ompi_coll_base_allreduce_intra_ring, chosen for larger
 * vectors) receives into buffers of true_extent + (n-1) * extent bytes without subtracting
 * true_lb: a datatype with a hole in front overruns them and corrupts the heap (seen at 2 ranks,
 * count 1001, no tool loaded). Reductions on such a type stay small. */
#define FRONT_HOLE_MAX_COUNT 7

static void allreduce_case(int op, const TypeInfo *t, const Derived *d, long count, int in_place,
                           int comm, const char *origin)
{
    if (d == &dv_front_int && count > FRONT_HOLE_MAX_COUNT) count = FRONT_HOLE_MAX_COUNT;
    ARCase c = {op, t, d, count, in_place, comm, rng(), origin};
    run_allreduce(&c);
}

static long items_for_bytes(long bytes, long item) { return bytes / item + 1; }

static void fixed_allreduce(void)
{
    static const long variant_counts[] = {0, 1, 1001};
    /* every valid (op, predefined type): count 7 on MPI_COMM_WORLD, plus one variant that
     * rotates through counts 0/1/1001, in place and the other communicators */
    static const char *quick_types[N_OPS][3] = {
        [OP_MAX] = {"MPI_INT", "MPI_DOUBLE"},
        [OP_MIN] = {"MPI_UNSIGNED_CHAR", "MPI_LONG_DOUBLE"},
        [OP_SUM] = {"MPI_INT", "MPI_DOUBLE", "MPI_C_DOUBLE_COMPLEX"},
        [OP_PROD] = {"MPI_UINT8_T", "MPI_FLOAT"},
        [OP_LAND] = {"MPI_C_BOOL"},
        [OP_LOR] = {"MPI_LONG"},
        [OP_LXOR] = {"MPI_UNSIGNED_SHORT"},
        [OP_BAND] = {"MPI_BYTE"},
        [OP_BOR] = {"MPI_INT64_T"},
        [OP_BXOR] = {"MPI_UINT32_T"},
        [OP_MAXLOC] = {"MPI_DOUBLE_INT", "MPI_2INT"},
        [OP_MINLOC] = {"MPI_LONG_DOUBLE_INT", "MPI_SHORT_INT"},
        [OP_USUM] = {"MPI_UNSIGNED"},
    };
    long v = 0;
    for (int o = 0; o < OP_UMAT; o++) {
        for (int i = 0; i < n_types; i++) {
            const TypeInfo *t = &types[i];
            if (!valid(o, t)) continue;
            if (quick) {
                int listed = 0;
                for (int q = 0; q < 3 && quick_types[o][q]; q++)
                    listed |= !strcmp(quick_types[o][q], t->name);
                if (!listed) continue;
            }
            allreduce_case(o, t, NULL, 7, 0, 0, "matrix");
            allreduce_case(o, t, NULL, variant_counts[v % 3], (int)((v / 3) % 2),
                           1 + (int)(v % 3), "matrix variant");
            v++;
        }
    }
    /* user-defined commutative SUM on derived types, every count, alternating in place,
     * rotating communicators */
    const Derived *sums[] = {&dv_vec_int, &dv_vec_dbl, &dv_idx_int, &dv_struct_dd, &dv_front_int};
    static const long counts[] = {0, 1, 7, 1001};
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int n = 0; n < 4; n++, k++) {
            if (quick && n != 2) continue;
            allreduce_case(OP_USUM, NULL, sums[i], counts[n], k % 2, k % NCOMMS, "derived");
        }
    /* the non-commutative operation: every count, in place or not, on every communicator */
    const Derived *mats[] = {&dv_mat, &dv_matgap};
    for (int i = 0; i < 2; i++)
        for (int n = 0; n < 4; n++)
            for (int comm = 0; comm < NCOMMS; comm++)
                for (int ip = 0; ip < 2; ip++) {
                    if (quick && (n == 0 || n == 3 || (comm + ip + n) % 2)) continue;
                    allreduce_case(OP_UMAT, NULL, mats[i], counts[n], ip, comm, "noncommutative");
                }
}

static void large_allreduce(void)
{
    allreduce_case(OP_SUM, type_named("MPI_DOUBLE"), NULL, items_for_bytes(large_bytes, 8), 0, 0,
                   "large");
    if (quick) return;
    allreduce_case(OP_BXOR, type_named("MPI_INT"), NULL, items_for_bytes(large_bytes, 4), 1, 3,
                   "large");
    allreduce_case(OP_SUM, type_named("MPI_UINT8_T"), NULL, items_for_bytes(large_bytes, 1), 0, 1,
                   "large");
    allreduce_case(OP_MINLOC, type_named("MPI_DOUBLE_INT"), NULL, items_for_bytes(large_bytes, 12),
                   1, 0, "large");
    allreduce_case(OP_UMAT, NULL, &dv_mat, items_for_bytes(large_bytes, 16), 0, 3, "large");
}

static void random_allreduce(int n)
{
    for (int r = 0; r < n; r++) {
        int op = (int)(rng() % N_OPS);
        const TypeInfo *t = NULL;
        const Derived *d = NULL;
        uint64_t h = rng();
        if (op == OP_UMAT) {
            d = (h & 1) ? &dv_mat : &dv_matgap;
        } else if (op == OP_USUM && (h & 1)) {
            const Derived *sums[] = {&dv_vec_int, &dv_vec_dbl, &dv_idx_int, &dv_struct_dd,
                                     &dv_front_int};
            d = sums[(h >> 8) % 5];
        } else {
            int candidates[MAX_TYPES], nc = 0;
            for (int i = 0; i < n_types; i++)
                if (valid(op, &types[i])) candidates[nc++] = i;
            t = &types[candidates[(h >> 8) % nc]];
        }
        uint64_t k = rng() % 100;
        long count = k < 5 ? 0 : k < 15 ? 1 : k < 60 ? 2 + (long)(rng() % 30)
                                            : k < 92 ? 32 + (long)(rng() % 2000)
                                                     : 2048 + (long)(rng() % 30000);
        int in_place = (int)(rng() % 2), comm = (int)(rng() % NCOMMS);
        allreduce_case(op, t, d, count, in_place, comm, "random");
    }
}

static void alltoall_case(const XType *st, const XType *rt, long units, int in_place, int null_args,
                          int comm, const char *origin)
{
    A2ACase c = {st, rt, units, in_place, null_args, comm, rng(), origin};
    run_alltoall(&c);
}

static void fixed_alltoall(void)
{
    const XType *pairs[][2] = {
        {&x_int, &x_int},           {&x_double, &x_double},     {&x_byte, &x_byte},
        {&x_dcomplex, &x_dcomplex}, {&x_ldouble, &x_ldouble},   {&x_double_int, &x_double_int},
        {&x_2int, &x_int},          {&x_vec_int, &x_int},       {&x_int, &x_vec_int},
        {&x_idx_int, &x_front_int}, {&x_struct_dd, &x_vec_dbl}, {&x_matgap, &x_mat},
        {&x_uint8, &x_uint8},
    };
    int npairs = (int)(sizeof pairs / sizeof pairs[0]);
    static const long units[] = {0, 1, 7, 101};
    int k = 0;
    for (int i = 0; i < npairs; i++) {
        for (int n = 0; n < 4; n++, k++) {
            if (quick && (i % 4 != 0 || n == 0)) continue;
            alltoall_case(pairs[i][0], pairs[i][1], units[n], 0, 0, k % NCOMMS, "matrix");
        }
        /* in place with the receive type, on a rotating communicator */
        if (!quick || i % 4 == 1)
            alltoall_case(NULL, pairs[i][1], 3, 1, i % 2, (i + 1) % NCOMMS, "matrix");
    }
    if (quick) {
        alltoall_case(&x_int, &x_int, 0, 0, 0, 0, "matrix");
        alltoall_case(&x_vec_int, &x_int, 7, 0, 0, 3, "matrix");
    }
}

static void large_alltoall(void)
{
    /* > large_bytes received in total on every rank of MPI_COMM_WORLD */
    long per = items_for_bytes(large_bytes / world_size, 4);
    alltoall_case(&x_int, &x_int, per, 0, 0, 0, "large");
    if (quick) return;
    alltoall_case(NULL, &x_double, items_for_bytes(large_bytes / world_size, 8), 1, 0, 3, "large");
    alltoall_case(&x_int6, &x_vec_int, items_for_bytes(large_bytes / world_size, 24), 0, 0, 2,
                  "large");
}

static void random_alltoall(int n)
{
    for (int r = 0; r < n; r++) {
        const XType *st = xtypes[rng() % N_XTYPES];
        const XType *rt = random_partner(st, rng());
        uint64_t k = rng() % 100;
        long units = k < 5 ? 0 : k < 20 ? 1 : k < 80 ? 2 + (long)(rng() % 40) : 42 + (long)(rng() % 400);
        int in_place = rng() % 4 == 0, comm = (int)(rng() % NCOMMS);
        alltoall_case(st, rt, units, in_place, (int)(rng() % 2), comm, "random");
    }
}

static void allgatherv_case(const XType *st, const XType *rt, long max_units, int zeros,
                            int permuted, int gaps, int in_place, int comm, const char *origin)
{
    AGVCase c = {st,       rt,   max_units, !strcmp(origin, "large"), zeros, permuted, gaps,
                 in_place, comm, rng(),     origin};
    run_allgatherv(&c);
}

static void fixed_allgatherv(void)
{
    const XType *pairs[][2] = {
        {&x_int, &x_int},         {&x_double, &x_double},     {&x_byte, &x_byte},
        {&x_int, &x_vec_int},     {&x_int6, &x_idx_int},      {&x_struct_dd, &x_double},
        {&x_vec_dbl, &x_struct_dd}, {&x_double_int, &x_double_int}, {&x_mat, &x_matgap},
    };
    int npairs = (int)(sizeof pairs / sizeof pairs[0]);
    int k = 0;
    for (int i = 0; i < npairs; i++) {
        for (int shape = 0; shape < 4; shape++, k++) {
            if (quick && (i % 3 != 0 || shape == 3)) continue;
            /* shape 0: equal-ish counts, in order; 1: zeros and varying sizes; 2: permuted with
             * gaps; 3: all at once, odd sizes */
            long max_units = shape == 3 ? 13 : 7;
            allgatherv_case(pairs[i][0], pairs[i][1], max_units, shape == 1 || shape == 3,
                            shape >= 2, shape >= 2, 0, k % NCOMMS, "matrix");
        }
        if (!quick || i % 3 == 1)
            allgatherv_case(NULL, pairs[i][1], 5, i % 2, 1, 1, 1, (i + 2) % NCOMMS, "matrix");
    }
    /* nothing at all, and one rank only */
    allgatherv_case(&x_int, &x_int, 0, 0, 0, 0, 0, 0, "matrix");
    if (!quick) allgatherv_case(&x_double, &x_double, 1, 0, 1, 1, 0, 3, "matrix");
}

static void large_allgatherv(void)
{
    /* every rank sends 3/4 to all of 4/3 * large_bytes / size: more than large_bytes in total */
    long max_units = items_for_bytes(large_bytes / world_size * 4 / 3, 4);
    allgatherv_case(&x_int, &x_int, max_units, 0, 1, 1, 0, 0, "large");
    if (quick) return;
    allgatherv_case(NULL, &x_double, items_for_bytes(large_bytes / world_size * 4 / 3, 8), 0, 1, 1,
                    1, 3, "large");
}

static void random_allgatherv(int n)
{
    for (int r = 0; r < n; r++) {
        const XType *st = xtypes[rng() % N_XTYPES];
        const XType *rt = random_partner(st, rng());
        uint64_t k = rng() % 100;
        long max_units = k < 5 ? 0 : k < 20 ? 1 : k < 85 ? 2 + (long)(rng() % 30) : 32 + (long)(rng() % 600);
        uint64_t f = rng();
        allgatherv_case(st, rt, max_units, (int)(f & 1), (int)((f >> 1) & 1), (int)((f >> 2) & 1),
                        (f >> 3) % 4 == 0, (int)((f >> 5) % NCOMMS), "random");
    }
}

/* ------------------------------------------------------------------ cross-rank digests */

static void compare_digests(void)
{
    for (int k = 0; k < NCOMMS; k++) {
        CommInfo *c = &comms[k];
        long n = c->n_digest;
        uint64_t *all = xmalloc(sizeof(uint64_t) * (size_t)(n ? n : 1) * c->size);
        PMPI_Allgather(c->digest, (int)n, MPI_UINT64_T, all, (int)n, MPI_UINT64_T, c->ref);
        for (long i = 0; i < n; i++) {
            for (int r = 1; r < c->size; r++) {
                if (all[(size_t)r * n + i] != all[i]) {
                    long id = c->digest_case[i];
                    lines_this_case = 0;
                    if (c->rank == 0)
                        failf(id, "result differs between ranks: comm rank 0 (world %d) and comm "
                                  "rank %d (world %d) got different bytes",
                              c->world_of[0], r, c->world_of[r]);
                    case_failed[id] = 1;
                    break;
                }
            }
        }
        free(all);
    }
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    if (world_rank == 0)
        fprintf(stderr, "usage: differential [--quick] [--large BYTES] [--random N] [--seed S] "
                        "[--only ID] [--verbose]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--verbose"))
            verbose = 1;
        else if (!strcmp(argv[i], "--large") && i + 1 < argc)
            large_bytes = atol(argv[++i]);
        else if (!strcmp(argv[i], "--random") && i + 1 < argc)
            n_random = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed0 = strtoull(argv[++i], NULL, 0);
        else
            usage();
    }
    if (large_bytes <= 1048576 && world_rank == 0)
        printf("differential: note: --large %ld is not above 1 MiB\n", large_bytes);
    rng_state = seed0;
    init_types();
    init_derived();
    init_xtypes();
    init_ops();
    probe_native_allgatherv();

    MPI_Comm dup, parity, reversed;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &parity);
    MPI_Comm_split(MPI_COMM_WORLD, 0, -world_rank, &reversed);
    comm_setup(&comms[0], "world", MPI_COMM_WORLD);
    comm_setup(&comms[1], "dup", dup);
    comm_setup(&comms[2], "split_parity", parity);
    comm_setup(&comms[3], "split_reversed", reversed);
    if (world_rank == 0) {
        const char *force = getenv("COMMTUNE_FORCE");
        printf("differential: %d ranks, COMMTUNE_FORCE=%s, large %ld bytes, %d random cases per "
               "operation, seed %llu%s\n",
               world_size, force ? force : "(unset)", large_bytes, n_random,
               (unsigned long long)seed0, quick ? ", quick matrix" : "");
        fflush(stdout);
    }

    fixed_allreduce();
    large_allreduce();
    fixed_alltoall();
    large_alltoall();
    fixed_allgatherv();
    large_allgatherv();
    random_allreduce(n_random);
    random_alltoall(n_random / 2);
    random_allgatherv(n_random / 2);
    compare_digests();

    unsigned char *any = xmalloc(n_cases);
    PMPI_Allreduce(case_failed, any, (int)n_cases, MPI_UNSIGNED_CHAR, MPI_MAX, MPI_COMM_WORLD);
    long failures = 0;
    for (long i = 0; i < n_cases; i++) failures += any[i] != 0;
    if (world_rank == 0) {
        printf("differential: %ld cases, %ld failures\n", n_cases, failures);
        fflush(stdout);
    }
    for (int k = 1; k < NCOMMS; k++) MPI_Comm_free(&comms[k].comm);
    MPI_Finalize();
    return failures ? 1 : 0;
}
