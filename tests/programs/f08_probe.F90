! A halo exchange through MPICH's or Open MPI's `use mpi_f08` bindings with a blocking call between
! its send and its receive: rank 0 sends, then waits in MPI_Probe for rank 1's reply, which rank 1
! sends only once rank 0's message arrived; then rank 0 posts its receive and completes both with
! MPI_Waitall. Held back by a halo codelet (`irecv_first`: the send waits for the episode's
! receive), rank 0's send never leaves where MPI_Probe goes to PMPI unseen: a hang. Prints
! "f08_probe: results correct".
program f08_probe
    use mpi_f08
    implicit none
    integer, parameter :: n = 64, episodes = 50
    integer :: rank, e, i, failures, total
    double precision :: out(n), in(n)
    type(MPI_Request) :: requests(2)
    type(MPI_Status) :: status
    call MPI_Init()
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    failures = 0
    do e = 1, episodes
        do i = 1, n
            out(i) = rank * 1000000 + e * 1000 + i
        end do
        in = -1
        if (rank == 0) then
            call MPI_Isend(out, n, MPI_DOUBLE_PRECISION, 1, 0, MPI_COMM_WORLD, requests(1))
            call MPI_Probe(1, 1, MPI_COMM_WORLD, status)
            call MPI_Irecv(in, n, MPI_DOUBLE_PRECISION, 1, 1, MPI_COMM_WORLD, requests(2))
            call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE)
        else if (rank == 1) then
            call MPI_Recv(in, n, MPI_DOUBLE_PRECISION, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
            call MPI_Send(out, n, MPI_DOUBLE_PRECISION, 0, 1, MPI_COMM_WORLD)
        end if
        if (rank <= 1) then
            do i = 1, n
                if (in(i) /= (1 - rank) * 1000000 + e * 1000 + i) failures = failures + 1
            end do
        end if
    end do
    call MPI_Reduce(failures, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD)
    if (rank == 0) then
        if (total == 0) then
            print '(a)', 'f08_probe: results correct'
        else
            print '(a,i0,a)', 'f08_probe: ', total, ' WRONG RESULTS'
        end if
    end if
    call MPI_Finalize()
end program f08_probe
