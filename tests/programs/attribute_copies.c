/* A communicator with a cached attribute whose copy callback counts its calls and whose delete
 * callback frees the value: the program never duplicates the communicator, so MPI never calls
 * the copy callback, and the delete callback runs once, at MPI_Comm_free. The library's own
 * duplicate for tuning (made at an early call) must not copy the attribute (a copy with
 * MPI_COMM_DUP_FN semantics would free the value twice). Prints
 * "attribute_copies: results correct".
 * usage: attribute_copies [calls (default 40)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int copies, deletes;

static int copy_value(MPI_Comm old, int keyval, void *extra, void *in, void *out, int *flag)
{
    (void)old; (void)keyval; (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_value(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm; (void)keyval; (void)extra;
    deletes++;
    free(value);
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 40;
    int rank, size, failures = 0, keyval;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_create_keyval(copy_value, delete_value, &keyval, NULL);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_attr(comm, keyval, malloc(64));
    for (int i = 0; i < calls; i++) {
        double in[4] = {rank + i, 1, 2, 3}, out[4];
        MPI_Allreduce(in, out, 4, MPI_DOUBLE, MPI_SUM, comm);
        if (out[0] != size * i + size * (size - 1) / 2.0 || out[1] != size) failures++;
    }
    MPI_Comm_free(&comm);
    if (copies != 0 || deletes != 1) {
        printf("attribute_copies: rank %d: %d copies, %d deletes\n", rank, copies, deletes);
        failures++;
    }
    MPI_Comm_free_keyval(&keyval);
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total == 0 ? "attribute_copies: results correct\n"
                          : "attribute_copies: %d WRONG RESULTS\n", total);
    MPI_Finalize();
    return total != 0;
}
