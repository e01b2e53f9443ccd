/* A Jacobi-style stencil on a Cartesian grid of ranks, 2-D or 3-D, whose halo exchange is
 * Isend/Irecv completed in one of several ways. Prints a checksum of the final grid (exact bits,
 * gathered and summed in rank order) that must not depend on how commtune posts the messages.
 *
 * usage: stencil DIMS N WIDTH PERIODIC ITERATIONS COMPLETION [INTERLEAVE [ORDER [STEP]]]
 *   DIMS        2 or 3
 *   N           interior points per rank along each dimension
 *   WIDTH       halo width in cells (the stencil reaches that far)
 *   PERIODIC    1 for a torus, 0 for fixed boundaries (MPI_PROC_NULL neighbours)
 *   COMPLETION  waitall | waits | waitany | testall | testsome | free_sends
 *               | tests (Testsome or Testany loops, drawn per rank and exchange)
 *   INTERLEAVE  none | recv (blocking token ring between posts and completion) | allreduce | both
 *               | residual (none in the exchange; an MPI_Allreduce after every 10th iteration,
 *               as a solver checking its residual)
 *               | allreduce_query (allreduce in the first half of the iterations; in the second
 *               an MPI_Comm_rank between the first two posts, where held posts must go out, and
 *               rank 0 starting 5 ms late, so that its peers complete messages it has not sent
 *               yet; mixed ORDER only)
 *               | allreduce_wtime (allreduce in every exchange; rank 0 alone calls MPI_Wtime
 *               between its first two posts of every exchange; mixed ORDER only)
 *   ORDER       recvs_first (all Irecvs, then all Isends) | sends_first | mixed (per face)
 *   STEP        compute (default) | none (exchanges only, for scripts/bench-halo)
 *
 * Also prints exchange_us: the mean time of one exchange over the second half of the iterations
 * (after any tuning settled), the maximum over ranks.  *
 * Faces along the last (fastest) dimension are MPI_Type_vector columns; the others are vectors of
 * contiguous rows or planes. Two grids alternate (double buffering), so consecutive exchanges use
 * different buffers with the same sizes and peers. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DIMS 3

static int dims, n, width, extent;
static MPI_Comm cart;
static int lower[MAX_DIMS], upper[MAX_DIMS];
static MPI_Datatype face[MAX_DIMS];
static int cart_rank;

static size_t cells(void)
{
    size_t total = 1;
    for (int d = 0; d < dims; d++)
        total *= (size_t)extent;
    return total;
}

/* Stride in elements of dimension d (the last dimension is contiguous). */
static size_t stride(int d)
{
    size_t s = 1;
    for (int k = d + 1; k < dims; k++)
        s *= (size_t)extent;
    return s;
}

/* Offset of the first cell of the face `width` thick starting at index `start` along d. */
static size_t face_offset(int d, int start)
{
    return (size_t)start * stride(d);
}

static void make_faces(void)
{
    for (int d = 0; d < dims; d++) {
        size_t inner = stride(d);               /* elements per row/plane below d */
        size_t outer = cells() / (inner * extent); /* rows/planes above d */
        MPI_Type_vector((int)outer, (int)(width * inner), (int)(extent * inner), MPI_DOUBLE,
                        &face[d]);
        MPI_Type_commit(&face[d]);
    }
}

static int is_interior(size_t index)
{
    for (int d = 0; d < dims; d++) {
        int i = (int)((index / stride(d)) % extent);
        if (i < width || i >= width + n)
            return 0;
    }
    return 1;
}

static void initialise(double *grid, const int *coords)
{
    for (size_t c = 0; c < cells(); c++) {
        long global = 0;
        for (int d = 0; d < dims; d++) {
            int i = (int)((c / stride(d)) % extent);
            global = global * 1009 + coords[d] * n + i;
        }
        grid[c] = is_interior(c) ? (double)((global * 7919) % 1000) / 997.0 : 0.25;
    }
}

static void token_ring(void)
{
    int rank, size, token = 0;
    MPI_Comm_rank(cart, &rank);
    MPI_Comm_size(cart, &size);
    if (size == 1)
        return;
    if (rank == 0) {
        MPI_Send(&token, 1, MPI_INT, 1, 99, cart);
        MPI_Recv(&token, 1, MPI_INT, size - 1, 99, cart, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&token, 1, MPI_INT, rank - 1, 99, cart, MPI_STATUS_IGNORE);
        MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 99, cart);
    }
}

static void complete(const char *how, MPI_Request *requests, int count)
{
    MPI_Status statuses[4 * MAX_DIMS];
    if (!strcmp(how, "waitall")) {
        MPI_Waitall(count, requests, statuses);
    } else if (!strcmp(how, "waits")) {
        for (int i = 0; i < count; i++)
            MPI_Wait(&requests[i], MPI_STATUS_IGNORE);
    } else if (!strcmp(how, "waitany")) {
        for (int done = 0; done < count; done++) {
            int index;
            MPI_Waitany(count, requests, &index, MPI_STATUS_IGNORE);
        }
    } else if (!strcmp(how, "testall")) {
        int flag = 0;
        while (!flag)
            MPI_Testall(count, requests, &flag, statuses);
    } else if (!strcmp(how, "testsome")) {
        int done = 0, outcount, indices[4 * MAX_DIMS];
        while (done < count) {
            MPI_Testsome(count, requests, &outcount, indices, statuses);
            if (outcount != MPI_UNDEFINED)
                done += outcount;
        }
    } else if (!strcmp(how, "tests")) {
        /* Mostly Testsome loops, one in eight Testany loops, drawn per rank and exchange: the
         * call that completes an exchange, its site, differs between ranks and exchanges. */
        static unsigned draws;
        if (!draws) draws = 7u * (unsigned)cart_rank + 1u;
        draws = draws * 1103515245u + 12345u;
        int done = 0, outcount, index, flag, indices[4 * MAX_DIMS];
        while (done < count)
            if ((draws >> 16) % 8 == 0) {
                MPI_Testany(count, requests, &index, &flag, MPI_STATUS_IGNORE);
                done += flag && index != MPI_UNDEFINED;
            } else {
                MPI_Testsome(count, requests, &outcount, indices, statuses);
                if (outcount != MPI_UNDEFINED)
                    done += outcount;
            }
    } else if (!strcmp(how, "free_sends")) {
        /* Sends are freed as they are posted (exchange()); only receives are left. */
        MPI_Waitall(count, requests, statuses);
    } else {
        fprintf(stderr, "unknown completion %s\n", how);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < count; i++)
        if (requests[i] != MPI_REQUEST_NULL) {
            fprintf(stderr, "request %d is not MPI_REQUEST_NULL after completion\n", i);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
}

static void post_recv(double *grid, int d, int upper_face, MPI_Request *request)
{
    /* Tag 2d+0 travels towards lower coordinates, 2d+1 towards upper ones. */
    if (upper_face)
        MPI_Irecv(grid + face_offset(d, width + n), 1, face[d], upper[d], 2 * d, cart, request);
    else
        MPI_Irecv(grid + face_offset(d, 0), 1, face[d], lower[d], 2 * d + 1, cart, request);
}

static void post_send(double *grid, int d, int upper_face, const char *how, MPI_Request *requests,
                      int *count)
{
    MPI_Request request;
    if (upper_face)
        MPI_Isend(grid + face_offset(d, n), 1, face[d], upper[d], 2 * d + 1, cart, &request);
    else
        MPI_Isend(grid + face_offset(d, width), 1, face[d], lower[d], 2 * d, cart, &request);
    if (!strcmp(how, "free_sends"))
        MPI_Request_free(&request);
    else
        requests[(*count)++] = request;
}

/* Set for the iterations where allreduce_query calls MPI_Comm_rank between posts, and on the
 * rank that allreduce_wtime makes call MPI_Wtime there. */
static int query_between_posts, wtime_between_posts;

static void exchange(double *grid, const char *how, const char *interleave, const char *order)
{
    MPI_Request requests[4 * MAX_DIMS];
    int count = 0;
    if (query_between_posts && cart_rank == 0)
        usleep(5000);
    if (!strcmp(order, "mixed")) {
        for (int d = 0; d < dims; d++)
            for (int f = 0; f < 2; f++) {
                post_recv(grid, d, f, &requests[count++]);
                if (query_between_posts && d == 0 && f == 0) {
                    int me;
                    MPI_Comm_rank(cart, &me);
                }
                if (wtime_between_posts && d == 0 && f == 0)
                    (void)MPI_Wtime();
                post_send(grid, d, f, how, requests, &count);
            }
    } else {
        int sends_first = !strcmp(order, "sends_first");
        for (int pass = 0; pass < 2; pass++)
            for (int d = 0; d < dims; d++)
                for (int f = 0; f < 2; f++) {
                    if ((pass == 0) == sends_first)
                        post_send(grid, d, f, how, requests, &count);
                    else
                        post_recv(grid, d, f, &requests[count++]);
                }
    }
    if (!strcmp(interleave, "recv") || !strcmp(interleave, "both"))
        token_ring();
    if (!strcmp(interleave, "allreduce") || !strcmp(interleave, "both") ||
        !strcmp(interleave, "allreduce_wtime") ||
        (!strcmp(interleave, "allreduce_query") && !query_between_posts)) {
        int one = 1, total;
        MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, cart);
    }
    complete(how, requests, count);
}

static void step(const double *from, double *to)
{
    for (size_t c = 0; c < cells(); c++) {
        if (!is_interior(c)) {
            to[c] = from[c];
            continue;
        }
        double sum = 0.0;
        for (int d = 0; d < dims; d++)
            for (int r = 1; r <= width; r++)
                sum += (from[c - r * stride(d)] + from[c + r * stride(d)]) / (double)r;
        to[c] = 0.5 * from[c] + 0.5 * sum / (2.0 * dims * width);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 7) {
        fprintf(stderr, "usage: stencil DIMS N WIDTH PERIODIC ITERATIONS COMPLETION "
                        "[INTERLEAVE [ORDER]]\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dims = atoi(argv[1]);
    n = atoi(argv[2]);
    width = atoi(argv[3]);
    int periodic = atoi(argv[4]), iterations = atoi(argv[5]);
    const char *how = argv[6], *interleave = argc > 7 ? argv[7] : "none";
    const char *order = argc > 8 ? argv[8] : "recvs_first";
    int compute = argc > 9 ? strcmp(argv[9], "none") != 0 : 1;
    if (dims < 2 || dims > MAX_DIMS || n < width || width < 1) {
        fprintf(stderr, "bad arguments\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    extent = n + 2 * width;

    int size, rank, shape[MAX_DIMS] = {0}, periods[MAX_DIMS], coords[MAX_DIMS];
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, dims, shape);
    for (int d = 0; d < dims; d++)
        periods[d] = periodic;
    MPI_Cart_create(MPI_COMM_WORLD, dims, shape, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    cart_rank = rank;
    wtime_between_posts = !strcmp(interleave, "allreduce_wtime") && rank == 0;
    MPI_Cart_coords(cart, rank, dims, coords);
    for (int d = 0; d < dims; d++)
        MPI_Cart_shift(cart, d, 1, &lower[d], &upper[d]);
    make_faces();

    double *grids[2] = {malloc(cells() * sizeof(double)), malloc(cells() * sizeof(double))};
    initialise(grids[0], coords);
    memcpy(grids[1], grids[0], cells() * sizeof(double));
    double spent = 0.0;
    for (int it = 0; it < iterations; it++) {
        double start = MPI_Wtime();
        query_between_posts = !strcmp(interleave, "allreduce_query") && it >= iterations / 2;
        exchange(grids[it % 2], how, interleave, order); /* SITE:stencil_exchange */
        if (it >= iterations / 2)
            spent += MPI_Wtime() - start;
        if (compute)
            step(grids[it % 2], grids[(it + 1) % 2]);
        else
            memcpy(grids[(it + 1) % 2], grids[it % 2], cells() * sizeof(double));
        if (!strcmp(interleave, "residual") && it % 10 == 9) {
            double mine = grids[(it + 1) % 2][cells() / 2], largest;
            MPI_Allreduce(&mine, &largest, 1, MPI_DOUBLE, MPI_MAX, cart);
        }
    }
    double slowest;
    MPI_Reduce(&spent, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, cart);

    double local = 0.0, *all = rank == 0 ? malloc(size * sizeof(double)) : NULL;
    const double *final = grids[iterations % 2];
    for (size_t c = 0; c < cells(); c++)
        if (is_interior(c))
            local += final[c] * (double)(c % 31 + 1);
    MPI_Gather(&local, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, cart);
    if (rank == 0) {
        double total = 0.0;
        for (int r = 0; r < size; r++)
            total += all[r];
        printf("checksum %a\n", total);
        printf("exchange_us %.3f\n", 1e6 * slowest / (iterations - iterations / 2));
        free(all);
    }
    for (int d = 0; d < dims; d++)
        MPI_Type_free(&face[d]);
    MPI_Comm_free(&cart);
    free(grids[0]);
    free(grids[1]);
    MPI_Finalize();
    return 0;
}
