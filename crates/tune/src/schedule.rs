//! Pure arithmetic of communication schedules: block splitting, power-of-two folding, and who
//! exchanges which blocks with whom in the alltoall and allgather algorithms. Everything here is
//! a function of (size, rank) only, so the unit tests below can simulate every rank at once.

/// Segment `i` of `count` elements cut into `parts` nearly equal segments (the first
/// `count % parts` are one longer): (first element, length).
pub fn segment(count: i64, parts: i32, i: i32) -> (i64, i64) {
    let (parts, i) = (i64::from(parts), i64::from(i));
    let (base, extra) = (count / parts, count % parts);
    let first = i * base + i.min(extra);
    (first, base + i64::from(i < extra))
}

/// The largest power of two not above `n` (n >= 1).
pub fn pow2_floor(n: i32) -> i32 {
    1 << (31 - n.max(1).leading_zeros())
}

/// Folding a communicator of `size` ranks onto the largest power of two below it: the first
/// `2 * (size - pow2)` ranks pair up (even gives its data to the odd one above it and sits out),
/// the others take part as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fold {
    pub pow2: i32,
    /// Ranks below this are paired.
    pub paired: i32,
}

impl Fold {
    pub fn new(size: i32) -> Fold {
        let pow2 = pow2_floor(size);
        Fold {
            pow2,
            paired: 2 * (size - pow2),
        }
    }

    /// This rank's index among the `pow2` participants, or None if it sits out.
    pub fn virtual_rank(&self, rank: i32) -> Option<i32> {
        if rank < self.paired {
            (rank % 2 == 1).then_some(rank / 2)
        } else {
            Some(rank - self.paired / 2)
        }
    }

    /// The real rank of participant `v`.
    pub fn real_rank(&self, v: i32) -> i32 {
        if v < self.paired / 2 {
            2 * v + 1
        } else {
            v + self.paired / 2
        }
    }
}

/// One step of an allgather schedule: send the blocks `send` (block = the rank it came from,
/// listed in message order) to `to` while receiving the blocks `recv` from `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub to: i32,
    pub send: Vec<i32>,
    pub from: i32,
    pub recv: Vec<i32>,
}

/// Ring allgather: in step s every rank passes block rank-s to its right neighbour and receives
/// block rank-s-1 from its left one.
pub fn ring_allgather(size: i32, rank: i32) -> Vec<Exchange> {
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    (0..size - 1)
        .map(|s| Exchange {
            to: right,
            send: vec![(rank - s).rem_euclid(size)],
            from: left,
            recv: vec![(rank - s - 1).rem_euclid(size)],
        })
        .collect()
}

/// Recursive-doubling allgather (`size` a power of two): in step k the partner is rank XOR 2^k;
/// each side owns the 2^k blocks of its aligned group and sends all of them.
pub fn recursive_doubling_allgather(size: i32, rank: i32) -> Vec<Exchange> {
    let mut steps = Vec::new();
    let mut mask = 1;
    while mask < size {
        let mine = rank & !(mask - 1);
        let theirs = mine ^ mask;
        steps.push(Exchange {
            to: rank ^ mask,
            send: (mine..mine + mask).collect(),
            from: rank ^ mask,
            recv: (theirs..theirs + mask).collect(),
        });
        mask <<= 1;
    }
    steps
}

/// Bruck's allgather (any size, ceil(log2 size) steps): a rank holding blocks rank, rank+1, ...,
/// rank+d-1 (mod size) sends them to rank-d and receives the next ones, rank+d, ..., from
/// rank+d; the last step sends only the size-d blocks still missing.
pub fn bruck_allgather(size: i32, rank: i32) -> Vec<Exchange> {
    let mut steps = Vec::new();
    let mut d = 1;
    while d < size {
        let n = d.min(size - d);
        let from = (rank + d) % size;
        steps.push(Exchange {
            to: (rank + size - d) % size,
            send: (0..n).map(|j| (rank + j) % size).collect(),
            from,
            recv: (0..n).map(|j| (from + j) % size).collect(),
        });
        d <<= 1;
    }
    steps
}

/// The neighbor-exchange allgather of Chen et al. (`size` even), as in Open MPI's
/// coll_base_allgatherv_intra_neighborexchange: even ranks talk to their right neighbour in even
/// steps and their left one in odd steps, odd ranks the other way round. Step 0 swaps the own
/// block; every later step forwards the pair of blocks received in the step before, so size/2
/// steps deliver everything.
pub fn neighbor_exchange_allgather(size: i32, rank: i32) -> Vec<Exchange> {
    let even = rank % 2 == 0;
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let neighbor = if even { [right, left] } else { [left, right] };
    // The first block of the pair that arrives from each neighbour moves by two every other step.
    let offset = if even { [2, -2] } else { [-2, 2] };
    let mut recv_from = if even {
        [rank, rank]
    } else {
        [neighbor[0], neighbor[0]]
    };
    let mut steps = vec![Exchange {
        to: neighbor[0],
        send: vec![rank],
        from: neighbor[0],
        recv: vec![neighbor[0]],
    }];
    // Pairs start at an even rank; the first pair this rank forwards holds its own block.
    let mut send_from = if even { rank } else { neighbor[0] };
    for i in 1..size / 2 {
        let parity = (i % 2) as usize;
        recv_from[parity] = (recv_from[parity] + offset[parity]).rem_euclid(size);
        steps.push(Exchange {
            to: neighbor[parity],
            send: vec![send_from, send_from + 1],
            from: neighbor[parity],
            recv: vec![recv_from[parity], recv_from[parity] + 1],
        });
        send_from = recv_from[parity];
    }
    steps
}

/// Bruck's alltoall works on the send blocks rotated by the rank: slot i first holds the block
/// for rank+i. In the step with `distance` (a power of two) every rank sends the slots whose
/// index has that bit set to rank+distance and receives the same slots from rank-distance.
pub fn bruck_alltoall_slots(size: i32, distance: i32) -> Vec<i32> {
    (0..size).filter(|i| i & distance != 0).collect()
}

/// The rank whose block Bruck's alltoall leaves in slot `slot` at the end: rank-slot.
pub fn bruck_alltoall_source(size: i32, rank: i32, slot: i32) -> i32 {
    (rank - slot).rem_euclid(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_vector_in_order() {
        for count in [0, 1, 5, 7, 64, 1001] {
            for parts in 1..9 {
                let mut next = 0;
                for i in 0..parts {
                    let (first, len) = segment(count, parts, i);
                    assert_eq!(first, next);
                    assert!(len >= count / i64::from(parts) && len <= count / i64::from(parts) + 1);
                    next = first + len;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn powers_of_two() {
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(2), 2);
        assert_eq!(pow2_floor(3), 2);
        assert_eq!(pow2_floor(5), 4);
        assert_eq!(pow2_floor(64), 64);
        assert_eq!(pow2_floor(100), 64);
    }

    #[test]
    fn fold_maps_participants_both_ways() {
        for size in 1..40 {
            let fold = Fold::new(size);
            let participants: Vec<i32> = (0..size).filter_map(|r| fold.virtual_rank(r)).collect();
            assert_eq!(
                participants,
                (0..fold.pow2).collect::<Vec<_>>(),
                "size {size}"
            );
            for r in 0..size {
                if let Some(v) = fold.virtual_rank(r) {
                    assert_eq!(fold.real_rank(v), r);
                } else {
                    assert!(
                        r < fold.paired && r % 2 == 0,
                        "only even paired ranks sit out"
                    );
                }
            }
        }
    }

    /// Runs `schedule` on every rank at once: partners must agree on each step, a rank only sends
    /// blocks it has, never receives one twice, and ends with all of them.
    fn simulate(size: i32, schedule: fn(i32, i32) -> Vec<Exchange>) {
        let plans: Vec<Vec<Exchange>> = (0..size).map(|r| schedule(size, r)).collect();
        let steps = plans[0].len();
        assert!(plans.iter().all(|p| p.len() == steps), "size {size}");
        let mut held: Vec<Vec<bool>> = (0..size)
            .map(|r| (0..size).map(|b| b == r).collect())
            .collect();
        let columns: Vec<Vec<&Exchange>> = (0..steps)
            .map(|s| plans.iter().map(|plan| &plan[s]).collect())
            .collect();
        for (s, column) in columns.iter().enumerate() {
            let at = |r: i32| column[r as usize];
            let before = held.clone();
            for r in 0..size {
                let step = at(r);
                assert_eq!(at(step.to).from, r, "size {size} step {s} rank {r}");
                assert_eq!(at(step.to).recv, step.send, "size {size} step {s} rank {r}");
                assert_eq!(at(step.from).to, r, "size {size} step {s} rank {r}");
                for &b in &step.send {
                    assert!(
                        before[r as usize][b as usize],
                        "size {size} step {s} rank {r}"
                    );
                }
                for &b in &step.recv {
                    assert!(
                        !held[r as usize][b as usize],
                        "size {size} step {s} rank {r}"
                    );
                    held[r as usize][b as usize] = true;
                }
            }
        }
        assert!(held.iter().all(|h| h.iter().all(|&b| b)), "size {size}");
    }

    #[test]
    fn allgather_schedules_deliver_every_block_once() {
        for size in 1..=33 {
            simulate(size, ring_allgather);
            simulate(size, bruck_allgather);
            if size & (size - 1) == 0 {
                simulate(size, recursive_doubling_allgather);
            }
            if size % 2 == 0 {
                simulate(size, neighbor_exchange_allgather);
                assert_eq!(neighbor_exchange_allgather(size, 0).len() as i32, size / 2);
            }
        }
    }

    #[test]
    fn bruck_alltoall_delivers_every_block() {
        for size in 1..=33 {
            // slots[r][i] = (source, destination) of the block in slot i of rank r.
            let mut slots: Vec<Vec<(i32, i32)>> = (0..size)
                .map(|r| (0..size).map(|i| (r, (r + i) % size)).collect())
                .collect();
            let mut distance = 1;
            while distance < size {
                let moved = bruck_alltoall_slots(size, distance);
                let before = slots.clone();
                for r in 0..size {
                    let from = (r - distance).rem_euclid(size) as usize;
                    for &i in &moved {
                        slots[r as usize][i as usize] = before[from][i as usize];
                    }
                }
                distance <<= 1;
            }
            for r in 0..size {
                for i in 0..size {
                    let source = bruck_alltoall_source(size, r, i);
                    assert_eq!(slots[r as usize][i as usize], (source, r), "size {size}");
                }
            }
        }
    }
}
