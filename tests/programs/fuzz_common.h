/* What the randomized tests share: the ranks' identities, the failure and call counts, the
 * seeded random streams, the command line, and when to stop.
 *
 * usage of a fuzz program: [--seconds S (default 10)] [--seed N] [--max-calls N] [--min-calls N]
 * (--min-calls: run past the seconds until rank 0 made N calls, so that a loaded machine still
 * reaches the program's later phases) */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <mpi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int world_rank, world_size;
static long failures, calls;

/* splitmix64: `shared` draws the same sequence on every rank, `local` one per rank. */
static uint64_t shared, local;
static uint64_t next(uint64_t *state)
{
    uint64_t x = (*state += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static int pick(uint64_t *state, int n) { return (int)(next(state) % (uint64_t)n); }

struct run {
    unsigned long long seed;
    double deadline;
    long max_calls;
    long min_calls;
};

/* MPI_Init, the command line, the ranks and both random streams. */
static struct run run_start(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    double seconds = 10;
    struct run r = {16, 0, 0, 0};
    for (int i = 1; i + 1 < *argc; i += 2) {
        const char *name = (*argv)[i], *value = (*argv)[i + 1];
        if (!strcmp(name, "--seconds")) seconds = atof(value);
        else if (!strcmp(name, "--seed")) r.seed = strtoull(value, NULL, 10);
        else if (!strcmp(name, "--max-calls")) r.max_calls = atol(value);
        else if (!strcmp(name, "--min-calls")) r.min_calls = atol(value);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    shared = r.seed;
    local = r.seed * 1000003 + (uint64_t)world_rank;
    r.deadline = PMPI_Wtime() + seconds;
    return r;
}

/* Whether to stop (rank 0's clock), the same on every rank. */
static int run_over(const struct run *r)
{
    int stop = world_rank == 0 && ((PMPI_Wtime() > r->deadline && calls >= r->min_calls) ||
                                   (r->max_calls > 0 && calls >= r->max_calls));
    PMPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return stop;
}

/* The failures of every rank, summed (on every rank). */
static long run_failures(void)
{
    long all = 0;
    PMPI_Allreduce(&failures, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

#endif
