//! What the report may claim about time it did not measure: the untimed calls' time
//! extrapolated from timed ones, and the time a tuned key's winner saved, each with a 95 %
//! interval. Pure functions of the counts and moments a key keeps.

/// Count, sum and sum of squares of some durations (clock ticks).
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Moments {
    pub n: u64,
    sum: f64,
    squares: f64,
}

impl Moments {
    pub fn add(&mut self, ticks: u64) {
        let x = ticks as f64;
        self.n += 1;
        self.sum += x;
        self.squares += x * x;
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// The sample variance (None below two values).
    fn variance(&self) -> Option<f64> {
        let n = self.n as f64;
        (self.n > 1).then(|| ((self.squares - self.sum * self.sum / n) / (n - 1.0)).max(0.0))
    }

    /// The standard error of the mean.
    fn error(&self) -> Option<f64> {
        Some((self.variance()? / self.n as f64).sqrt())
    }
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom (two-sided 95 %): exact to
/// two decimals up to 10, then 1.96 + 2.5/df (within 0.015).
fn t95(df: u64) -> f64 {
    const TABLE: [f64; 10] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23];
    match df {
        0 => f64::INFINITY,
        1..=10 => TABLE[df as usize - 1],
        _ => 1.96 + 2.5 / df as f64,
    }
}

/// The time of `untimed` calls estimated from `sample` (timed calls drawn from the same stretch
/// of the run, one in eight), or from `fallback` (the mean of other timed calls) when there is
/// no sample: the estimate and the half-width of its 95 % interval. With fewer than two sampled
/// values the spread is unknown, and the interval is the estimate itself either way.
pub fn extrapolate(untimed: u64, sample: &Moments, fallback: Option<f64>) -> (f64, f64) {
    let Some(mean) = sample.mean().or(fallback) else {
        return (0.0, 0.0);
    };
    let estimate = untimed as f64 * mean;
    match sample.error() {
        Some(error) => {
            // Sampling without replacement from the calls of that stretch.
            let fpc = (untimed as f64 / (untimed + sample.n) as f64).sqrt();
            (estimate, untimed as f64 * error * fpc * t95(sample.n - 1))
        }
        None => (estimate, estimate),
    }
}

/// The time `calls` production calls of a winner saved against the codelet it replaced:
/// (replaced mean - winner mean) x calls, and its 95 % interval (Welch's t). None when either
/// side has fewer than two timed calls.
pub fn saving(replaced: &Moments, winner: &Moments, calls: u64) -> Option<(f64, f64, f64)> {
    let (a, b) = (replaced.error()?, winner.error()?);
    let difference = replaced.mean()? - winner.mean()?;
    let se2 = a * a + b * b;
    // Welch–Satterthwaite degrees of freedom (rounded down: the wider interval).
    let df = if se2 > 0.0 {
        se2 * se2 / (a.powi(4) / (replaced.n - 1) as f64 + b.powi(4) / (winner.n - 1) as f64)
    } else {
        f64::INFINITY
    };
    let half = t95(df.min(1e9) as u64) * se2.sqrt();
    let n = calls as f64;
    Some((
        n * difference,
        n * (difference - half),
        n * (difference + half),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(values: &[u64]) -> Moments {
        let mut m = Moments::default();
        values.iter().for_each(|&v| m.add(v));
        m
    }

    #[test]
    fn moments_give_mean_and_error() {
        let m = moments(&[10, 12, 14]);
        assert_eq!(m.mean(), Some(12.0));
        assert_eq!(m.variance(), Some(4.0));
        assert!(moments(&[7]).error().is_none());
        assert!(Moments::default().mean().is_none());
    }

    #[test]
    fn extrapolation_scales_the_sample_mean_with_an_interval() {
        let (estimate, half) = extrapolate(70, &moments(&[10, 12, 14, 12, 10, 14, 12, 12]), None);
        assert_eq!(estimate, 840.0);
        assert!(half > 0.0 && half < estimate, "{half}");
        // No sample: the fallback mean, and an interval as wide as the estimate.
        assert_eq!(extrapolate(5, &Moments::default(), Some(3.0)), (15.0, 15.0));
        assert_eq!(extrapolate(5, &moments(&[4]), Some(3.0)), (20.0, 20.0));
        assert_eq!(extrapolate(5, &Moments::default(), None), (0.0, 0.0));
        assert_eq!(extrapolate(0, &moments(&[4, 6]), None), (0.0, 0.0));
    }

    #[test]
    fn a_saving_needs_its_interval_away_from_zero() {
        let native = moments(&[100, 102, 98, 101, 99, 100, 100, 100]);
        let fast = moments(&[50, 51, 49, 50, 50, 52, 48, 50]);
        let (saved, low, high) = saving(&native, &fast, 1000).unwrap();
        assert_eq!(saved, 50_000.0);
        assert!(low > 0.0 && high > saved, "{low} {high}");
        // A winner slower in production than native was in the search: a loss, measured.
        let slow = moments(&[200, 210, 190, 205, 195, 200, 200, 200]);
        let (saved, _, high) = saving(&native, &slow, 1000).unwrap();
        assert!(saved < 0.0 && high < 0.0);
        // Noisy and close: the interval includes zero.
        let noisy = moments(&[20, 180, 60, 140, 100, 100, 30, 170]);
        let (_, low, high) = saving(&native, &noisy, 1000).unwrap();
        assert!(low < 0.0 && high > 0.0);
        assert!(saving(&moments(&[100]), &fast, 10).is_none());
    }
}
