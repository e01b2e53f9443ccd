//! Pure arithmetic of communication schedules: block splitting and power-of-two folding.

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
}
