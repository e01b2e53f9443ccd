! A few allreduces, then the last rank calls MPI_Abort with error code 3, through mpif.h or the
! mpi_f08 module (-DF08).
program abort
#if defined(F08)
  use mpi_f08
#endif
  implicit none
#if !defined(F08)
  include 'mpif.h'
#endif
  integer :: ierr, rank, nprocs, it
  double precision :: x(4), y(4)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  do it = 1, 5
    x = rank + it
    call MPI_Allreduce(x, y, 4, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr) ! SITE:allreduce
  end do
  if (rank == nprocs - 1) call MPI_Abort(MPI_COMM_WORLD, 3, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
end program abort
