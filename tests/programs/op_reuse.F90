! op_reuse.c in Fortran (mpif.h): a commutative user operation is freed after its allreduce site
! settled (on ring, by injected delays) and a non-commutative one (composing affine maps) is
! created, which may get the same handle; codelets that reorder operands must not run it. Open
! MPI's Fortran bindings call PMPI_Op_free directly: the library provides MPI_OP_FREE itself.
! Prints "op_reuse: results correct" and whether the handle came back.
subroutine add(invec, inoutvec, n, datatype)
    implicit none
    integer :: n, datatype, i
    double precision :: invec(n), inoutvec(n)
    do i = 1, n
        inoutvec(i) = inoutvec(i) + invec(i)
    end do
end subroutine

! Pairs (a, b) are maps x -> a x + b; inout = in after inout.
subroutine compose(invec, inoutvec, n, datatype)
    implicit none
    integer :: n, datatype, i
    double precision :: invec(n), inoutvec(n)
    do i = 1, n - 1, 2
        inoutvec(i + 1) = invec(i) * inoutvec(i + 1) + invec(i + 1)
        inoutvec(i) = inoutvec(i) * invec(i)
    end do
end subroutine

! One call site for both operations.
subroutine reduce(invec, outvec, op)
    implicit none
    include 'mpif.h'
    double precision :: invec(64), outvec(64)
    integer :: op, ierr
    call MPI_ALLREDUCE(invec, outvec, 64, MPI_DOUBLE_PRECISION, op, MPI_COMM_WORLD, ierr) ! SITE:allreduce
end subroutine

program op_reuse
    implicit none
    include 'mpif.h'
    external add, compose
    integer :: ierr, rank, nranks, sum_op, ordered, freed, it, i, r, failures, total
    double precision :: invec(64), outvec(64), a, b
    call MPI_INIT(ierr)
    call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
    call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
    failures = 0
    call MPI_OP_CREATE(add, .true., sum_op, ierr)
    do it = 0, 199
        do i = 1, 64
            invec(i) = rank * 1000 + it + i
        end do
        call reduce(invec, outvec, sum_op)
        do i = 1, 64
            if (outvec(i) /= 1000d0 * nranks * (nranks - 1) / 2 + dble(nranks) * (it + i)) &
                failures = failures + 1
        end do
    end do
    freed = sum_op
    call MPI_OP_FREE(sum_op, ierr)
    call MPI_OP_CREATE(compose, .false., ordered, ierr)
    do it = 0, 199
        do i = 1, 63, 2
            invec(i) = 2
            invec(i + 1) = rank + it + i
        end do
        call reduce(invec, outvec, ordered)
        do i = 1, 63, 2
            a = 1
            b = 0
            do r = nranks - 1, 0, -1
                b = 2 * b + r + it + i
                a = a * 2
            end do
            if (outvec(i) /= a .or. outvec(i + 1) /= b) failures = failures + 1
        end do
    end do
    call MPI_REDUCE(failures, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        if (ordered == freed) then
            print '(a)', 'op_reuse: handle reused'
        else
            print '(a)', 'op_reuse: handle not reused'
        end if
        if (total == 0) then
            print '(a)', 'op_reuse: results correct'
        else
            print '(a,i0,a)', 'op_reuse: ', total, ' WRONG RESULTS'
        end if
    end if
    call MPI_OP_FREE(ordered, ierr)
    call MPI_FINALIZE(ierr)
end program
