"""Allreduce from two source lines; the report must show two sites at these lines."""
from array import array

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = 0


def total(value):
    out = array("d", [0.0])
    comm.Allreduce(array("d", [value]), out, op=MPI.SUM)  # SITE:py_total
    return out[0]


for it in range(5):
    if total(rank + it) != size * (size - 1) / 2 + size * it:
        failures += 1
for it in range(3):
    buf = array("i", [rank])
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)  # SITE:py_max
    if buf[0] != size - 1:
        failures += 1

print("allreduce_sites: results correct" if failures == 0 else "allreduce_sites: WRONG RESULTS")
raise SystemExit(1 if failures else 0)
