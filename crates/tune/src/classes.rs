//! Size classes: calls whose sizes differ a little share one search and its winner.
//!
//! Applications whose message sizes drift (molecular dynamics: atoms migrate between ranks)
//! make a new size nearly every call; searched apart, no size repeats often enough to be
//! decided. The classes are half powers of two, [2^k, 1.5·2^k) and [1.5·2^k, 2^(k+1)): sizes in
//! a class differ by less than 1.5x, and the crossovers of the codelets' costs (and MPI
//! libraries' own switch points, e.g. Open MPI's and MPICH's at powers of two) fall on class
//! boundaries. The profile keeps exact sizes; only tuning shares.

/// The class of `bytes`: its bounds [low, high).
pub fn size_class(bytes: u64) -> (u64, u64) {
    if bytes < 2 {
        return (bytes, bytes + 1);
    }
    let low = 1u64 << bytes.ilog2();
    let middle = low + low / 2;
    if bytes < middle {
        (low, middle)
    } else {
        (middle, low.saturating_mul(2))
    }
}

/// The class of `bytes` as the report shows it, e.g. `64 KiB-96 KiB`.
pub fn class_name(bytes: u64) -> String {
    let (low, high) = size_class(bytes);
    if high == low + 1 {
        return human(low);
    }
    format!("{}-{}", human(low), human(high))
}

/// `bytes` in the largest unit that divides it, e.g. `96 KiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024 && value.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_half_powers_of_two() {
        assert_eq!(size_class(0), (0, 1));
        assert_eq!(size_class(1), (1, 2));
        assert_eq!(size_class(2), (2, 3));
        assert_eq!(size_class(3), (3, 4));
        assert_eq!(size_class(8), (8, 12));
        assert_eq!(size_class(11), (8, 12));
        assert_eq!(size_class(12), (12, 16));
        assert_eq!(size_class(65536), (65536, 98304));
        assert_eq!(size_class(1 << 20), (1 << 20, 3 << 19));
        assert_eq!(size_class(u64::MAX).1, u64::MAX);
        for bytes in 1..5000 {
            let (low, high) = size_class(bytes);
            assert!(low <= bytes && bytes < high.max(low + 1), "{bytes}");
            assert!(high as f64 / low as f64 <= 1.5 || low < 2, "{bytes}");
        }
    }

    #[test]
    fn names_read_like_sizes() {
        assert_eq!(class_name(0), "0 B");
        assert_eq!(class_name(8), "8 B-12 B");
        assert_eq!(class_name(70000), "64 KiB-96 KiB");
        assert_eq!(class_name(3 << 19), "1536 KiB-2 MiB");
    }
}
