! Known calls through mpif.h, the mpi module (-DUSE_MPI) or the mpi_f08 module (-DF08);
! the test reads the SITE: markers for the expected lines.
program known_calls
#if defined(F08)
  use mpi_f08
#elif defined(USE_MPI)
  use mpi
#endif
  implicit none
#if !defined(F08) && !defined(USE_MPI)
  include 'mpif.h'
#endif
  integer :: ierr, rank, nprocs, it, left, right, failures, v, k, idx
  logical :: done
#ifdef F08
  type(MPI_Request) :: req(2)
#else
  integer :: req(2)
#endif
  double precision :: x(3), y(3), halo_out(5), halo_in(5)
  integer, allocatable :: a(:), b(:)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  failures = 0

  do it = 1, 3
    x = rank + it
    call MPI_Allreduce(x, y, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr) ! SITE:allreduce
    if (y(2) /= nprocs * (nprocs - 1) / 2.0d0 + nprocs * it) failures = failures + 1
  end do
  do it = 1, 2
    v = rank
    call MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr) ! SITE:allreduce_inplace
    if (v /= nprocs - 1) failures = failures + 1
  end do

  allocate(a(nprocs), b(nprocs))
  do it = 1, 2
    a = rank * 100 + it
    call MPI_Alltoall(a, 1, MPI_INTEGER, b, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr) ! SITE:alltoall
    if (b(nprocs) /= (nprocs - 1) * 100 + it) failures = failures + 1
  end do

  right = mod(rank + 1, nprocs)
  left = mod(rank + nprocs - 1, nprocs)
  do it = 1, 2
    halo_out = rank + it
    call MPI_Irecv(halo_in, 5, MPI_DOUBLE_PRECISION, left, 3, MPI_COMM_WORLD, req(1), ierr)
    call MPI_Isend(halo_out, 5, MPI_DOUBLE_PRECISION, right, 3, MPI_COMM_WORLD, req(2), ierr)
    call MPI_Waitall(2, req, MPI_STATUSES_IGNORE, ierr) ! SITE:halo_waitall
    if (halo_in(1) /= left + it) failures = failures + 1
  end do

  ! The same exchange completed by polling MPI_Testall, then by two MPI_Waitany calls.
  do it = 1, 2
    halo_out = rank + it
    call MPI_Irecv(halo_in, 5, MPI_DOUBLE_PRECISION, left, 4, MPI_COMM_WORLD, req(1), ierr)
    call MPI_Isend(halo_out, 5, MPI_DOUBLE_PRECISION, right, 4, MPI_COMM_WORLD, req(2), ierr)
    done = .false.
    do while (.not. done)
      call MPI_Testall(2, req, done, MPI_STATUSES_IGNORE, ierr) ! SITE:halo_testall
    end do
    if (halo_in(1) /= left + it) failures = failures + 1
  end do
  do it = 1, 2
    halo_out = rank + it
    call MPI_Irecv(halo_in, 5, MPI_DOUBLE_PRECISION, left, 5, MPI_COMM_WORLD, req(1), ierr)
    call MPI_Isend(halo_out, 5, MPI_DOUBLE_PRECISION, right, 5, MPI_COMM_WORLD, req(2), ierr)
    do k = 1, 2
      call MPI_Waitany(2, req, idx, MPI_STATUS_IGNORE, ierr) ! SITE:halo_waitany
      if (idx < 1 .or. idx > 2) failures = failures + 1
    end do
    if (halo_in(1) /= left + it) failures = failures + 1
  end do

  if (failures /= 0) then
    print *, 'known_calls: WRONG RESULTS', failures
  else if (rank == 0) then
    print *, 'known_calls: results correct'
  end if
  call MPI_Finalize(ierr)
  if (failures /= 0) stop 1
end program known_calls
