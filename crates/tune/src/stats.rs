//! Estimators of a codelet's typical time from its samples on one rank (pure functions).
//!
//! Each returns a location (the typical time) and a spread (how much it varies). The three are
//! those ADCL compared: `minfactor` (drop samples above b·min unless that drops too many),
//! `iqr` (Tukey's fences) and `robust` (a Student-t location M-estimate). Outliers far from the
//! bulk are what a noisy machine adds and must go; a second mode close to the first (systematic
//! congestion caused by the codelet itself) is part of the codelet's cost and must stay.

use crate::policy::Agreed;

/// Which estimator, with its parameters (COMMTUNE_FILTER and friends).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Filter {
    /// ADCL's heuristic: drop samples above `b` times the minimum unless more than
    /// `max_outliers` (a fraction) of them would be dropped.
    MinFactor { b: f64, max_outliers: f64 },
    /// Drop samples outside [Q1 - 1.5 IQR, Q3 + 1.5 IQR].
    Iqr,
    /// Student-t location M-estimate with `nu` degrees of freedom: iteratively reweighted mean
    /// with weights (nu+1)/(nu+r²), r = residual / scale, from the median and 1.4826·MAD
    /// (never below `RELATIVE_SCALE_FLOOR` of the median).
    Robust { nu: f64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub location: f64,
    pub spread: f64,
}

/// The estimate of `samples` (None without samples).
pub fn estimate(filter: Filter, samples: &[f64]) -> Option<Estimate> {
    if samples.is_empty() {
        return None;
    }
    Some(match filter {
        Filter::MinFactor { b, max_outliers } => min_factor(samples, b, max_outliers),
        Filter::Iqr => iqr(samples),
        Filter::Robust { nu } => robust(samples, nu),
    })
}

/// Timing noise is multiplicative: samples within about a third of the typical time are not
/// outliers however tight the bulk is. Without this floor a tight first mode would make a real
/// second mode (30 % of calls at twice the time) look like outliers and vanish.
const RELATIVE_SCALE_FLOOR: f64 = 0.35;

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Quantile `q` of sorted data, linear interpolation between order statistics.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn kept(xs: &[f64], keep: impl Fn(f64) -> bool) -> Estimate {
    let inside: Vec<f64> = xs.iter().copied().filter(|&x| keep(x)).collect();
    let inside = if inside.is_empty() {
        xs.to_vec()
    } else {
        inside
    };
    Estimate {
        location: mean(&inside),
        spread: std_dev(&inside),
    }
}

fn min_factor(xs: &[f64], b: f64, max_outliers: f64) -> Estimate {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let dropped = xs.iter().filter(|&&x| x > b * min).count();
    if dropped as f64 > max_outliers * xs.len() as f64 {
        kept(xs, |_| true)
    } else {
        kept(xs, |x| x <= b * min)
    }
}

fn iqr(xs: &[f64]) -> Estimate {
    let s = sorted(xs);
    let (q1, q3) = (quantile(&s, 0.25), quantile(&s, 0.75));
    let fence = 1.5 * (q3 - q1);
    kept(xs, |x| x >= q1 - fence && x <= q3 + fence)
}

fn robust(xs: &[f64], nu: f64) -> Estimate {
    let s = sorted(xs);
    let median = quantile(&s, 0.5);
    let deviations = sorted(&xs.iter().map(|x| (x - median).abs()).collect::<Vec<_>>());
    let mut scale = 1.4826 * quantile(&deviations, 0.5);
    if scale == 0.0 {
        // More than half the samples are equal: the MAD says nothing about the rest, which may
        // be a real second mode. The mean absolute deviation (normal-consistent) still does.
        scale = 1.2533 * mean(&deviations);
    }
    if scale == 0.0 {
        return Estimate {
            location: median,
            spread: 0.0,
        };
    }
    let spread = scale;
    let scale = scale.max(RELATIVE_SCALE_FLOOR * median.abs());
    let mut mu = median;
    for _ in 0..100 {
        let (mut sum_w, mut sum_wx) = (0.0, 0.0);
        for &x in xs {
            let r = (x - mu) / scale;
            let w = (nu + 1.0) / (nu + r * r);
            sum_w += w;
            sum_wx += w * x;
        }
        let next = sum_wx / sum_w;
        let converged = (next - mu).abs() <= 1e-12 * mu.abs().max(1e-300);
        mu = next;
        if converged {
            break;
        }
    }
    Estimate {
        location: mu,
        spread,
    }
}

/// An instance longer than this many times its codelet's median stalled for the machine (both
/// ranks of a 100 us call preempted for 7 ms, or for 1.4 s, by other jobs of a shared machine),
/// not for the codelet nor for what it sends: on the 1 Gbit/s rig the network's own stalls reach
/// about 20 times the median (64 KiB, when the shaper's bucket is full).
pub const STALL: f64 = 50.0;

/// The typical time of each of `codelets` when the codelets of one kind (`kind`: true or false)
/// share their tails: its own mean in `instances` with the excess above its median replaced by
/// the mean excess above their own medians of all the measured instances of the codelets of its
/// kind (an instance below its median has none, and one beyond `STALL` times it is left out).
/// That is its median, less its own mean shortfall below it, plus its kind's tail. None for a
/// codelet with no instance.
///
/// Only the excess above is shared: a tail is what an instance waits beyond the typical, and one
/// fast instance of a slow codelet (with every other codelet slowed by 20 ms in a test, one of
/// native's episodes took 0.1 ms) would otherwise take 20 ms off each of its kind, below zero.
/// The shortfall below stays the codelet's own: without it a codelet whose instances alternate
/// between fast and slow is judged by its slow ones (under `period` timing on a loaded 2-core
/// machine, `pairwise`'s periods came out about 7.9, 7.9 and 0.1 ms, 5.3 on average, and its
/// median of 7.9 lost to native's steady 8.0), where the sum of its periods is what the
/// application waited.
pub fn shared_tails(
    instances: &Samples,
    codelets: &[usize],
    kind: impl Fn(usize) -> bool,
) -> Vec<Option<f64>> {
    let of = |codelet: usize| {
        instances
            .0
            .iter()
            .find(|(c, _)| *c == codelet)
            .map_or(&[][..], |(_, v)| v.as_slice())
    };
    // Each codelet's instances within `STALL` of its median `m`: (m, sum of the excess above m,
    // sum of the shortfall below m, count).
    let deviations: Vec<Option<(f64, f64, f64, usize)>> = codelets
        .iter()
        .map(|&c| {
            let xs = of(c);
            let m = (!xs.is_empty()).then(|| quantile(&sorted(xs), 0.5))?;
            let kept = xs.iter().filter(|&&x| x <= STALL * m);
            let (above, below, count) = kept.fold((0.0, 0.0, 0usize), |(a, b, n), &x| {
                (a + (x - m).max(0.0), b + (m - x).max(0.0), n + 1)
            });
            Some((m, above, below, count))
        })
        .collect();
    let tail = |wanted: bool| {
        let (sum, count) = codelets
            .iter()
            .zip(&deviations)
            .filter(|&(&c, _)| kind(c) == wanted)
            .filter_map(|(_, d)| *d)
            .fold((0.0, 0usize), |(s, n), (_, above, _, count)| {
                (s + above, n + count)
            });
        if count == 0 { 0.0 } else { sum / count as f64 }
    };
    let tails = [tail(false), tail(true)];
    codelets
        .iter()
        .zip(deviations)
        .map(|(&c, d)| {
            let (m, _, below, count) = d?;
            Some(m - below / count as f64 + tails[usize::from(kind(c))])
        })
        .collect()
}

/// One rank's samples of each codelet of a search (by registry index).
#[derive(Default, Debug)]
pub struct Samples(Vec<(usize, Vec<f64>)>);

impl Samples {
    /// The samples of `codelet`, to add to.
    pub fn of(&mut self, codelet: usize) -> &mut Vec<f64> {
        let at = match self.0.iter().position(|(i, _)| *i == codelet) {
            Some(at) => at,
            None => {
                self.0.push((codelet, Vec::new()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// Keeps the samples of the codelets `keep` selects.
    pub fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        self.0.retain(|(c, _)| keep(*c));
    }

    /// This rank's estimate of `codelet`: typical time and its standard error (zero without
    /// samples).
    pub fn estimate(&self, filter: Filter, codelet: usize) -> Agreed {
        let samples = self
            .0
            .iter()
            .find(|(i, _)| *i == codelet)
            .map_or(&[][..], |(_, v)| v.as_slice());
        match estimate(filter, samples) {
            Some(e) => Agreed {
                location: e.location,
                error: e.spread / (samples.len() as f64).sqrt(),
            },
            None => Agreed::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILTERS: [Filter; 3] = [
        Filter::MinFactor {
            b: 3.0,
            max_outliers: 0.2,
        },
        Filter::Iqr,
        Filter::Robust { nu: 5.0 },
    ];

    /// Deterministic normal samples (xorshift + Box-Muller).
    fn normal(n: usize, mean: f64, sd: f64, seed: u64) -> Vec<f64> {
        let mut state = seed.max(1);
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| {
                let (u1, u2) = (uniform().max(1e-12), uniform());
                mean + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect()
    }

    fn location(filter: Filter, xs: &[f64]) -> f64 {
        estimate(filter, xs).unwrap().location
    }

    #[test]
    fn clean_normal_data_gives_the_mean() {
        let xs = normal(200, 100.0, 5.0, 1);
        for f in FILTERS {
            let e = estimate(f, &xs).unwrap();
            assert!((e.location - 100.0).abs() < 1.5, "{f:?}: {e:?}");
            assert!(e.spread > 2.0 && e.spread < 8.0, "{f:?}: {e:?}");
        }
    }

    #[test]
    fn heavy_tails_do_not_drag_the_estimate() {
        // Mostly normal, a few samples ten to fifty times larger (preempted runs).
        let mut xs = normal(100, 100.0, 5.0, 2);
        for (i, x) in xs.iter_mut().enumerate().filter(|(i, _)| i % 12 == 0) {
            *x *= 10.0 + i as f64 / 3.0;
        }
        for f in FILTERS {
            assert!(
                (location(f, &xs) - 100.0).abs() < 3.0,
                "{f:?}: {}",
                location(f, &xs)
            );
        }
    }

    #[test]
    fn outliers_from_10_to_40_percent() {
        for fraction in [0.1, 0.2, 0.3, 0.4] {
            let mut xs = normal(100, 100.0, 5.0, 3);
            let n_out = (fraction * 100.0) as usize;
            for x in xs.iter_mut().take(n_out) {
                *x += 1000.0;
            }
            // The robust estimator resists every fraction below one half.
            let robust = location(Filter::Robust { nu: 5.0 }, &xs);
            assert!(
                (robust - 100.0).abs() < 5.0,
                "robust at {fraction}: {robust}"
            );
            // minfactor drops them only while they are at most n_o_max of the samples.
            let mf = location(
                Filter::MinFactor {
                    b: 3.0,
                    max_outliers: 0.2,
                },
                &xs,
            );
            if fraction <= 0.2 {
                assert!((mf - 100.0).abs() < 3.0, "minfactor at {fraction}: {mf}");
            } else {
                assert!(mf > 300.0, "minfactor keeps everything above n_o_max: {mf}");
            }
            // Tukey's fences hold while the outliers stay out of the upper quartile.
            let iqr = location(Filter::Iqr, &xs);
            if fraction < 0.25 {
                assert!((iqr - 100.0).abs() < 3.0, "iqr at {fraction}: {iqr}");
            }
        }
    }

    #[test]
    fn systematic_congestion_is_not_filtered_away() {
        // 70 % of calls at 100, 30 % at 200: the codelet really costs more than 100 on average.
        let mut xs = normal(70, 100.0, 2.0, 4);
        xs.extend(normal(30, 200.0, 2.0, 5));
        for f in FILTERS {
            let l = location(f, &xs);
            assert!(l > 110.0, "{f:?} filtered the congestion away: {l}");
        }
        // The same with exactly repeated values (MAD = 0 for the robust estimator).
        let mut xs = vec![100.0; 7];
        xs.extend([200.0; 3]);
        assert!(location(Filter::Robust { nu: 5.0 }, &xs) > 110.0);
    }

    #[test]
    fn constant_data() {
        let xs = [42.0; 10];
        for f in FILTERS {
            assert_eq!(
                estimate(f, &xs),
                Some(Estimate {
                    location: 42.0,
                    spread: 0.0
                })
            );
        }
    }

    #[test]
    fn tiny_samples() {
        for f in FILTERS {
            assert_eq!(estimate(f, &[]), None);
            assert_eq!(location(f, &[7.0]), 7.0);
            let two = location(f, &[10.0, 12.0]);
            assert!((10.0..=12.0).contains(&two), "{f:?}: {two}");
            let three = location(f, &[10.0, 11.0, 12.0]);
            assert!((three - 11.0).abs() < 1e-9, "{f:?}: {three}");
        }
    }

    #[test]
    fn samples_estimate_each_codelet_apart() {
        let mut samples = Samples::default();
        samples.of(2).extend([10.0, 10.0, 10.0, 10.0]);
        samples.of(0).extend([4.0, 4.0]);
        let filter = Filter::Robust { nu: 5.0 };
        assert_eq!(samples.estimate(filter, 2).location, 10.0);
        assert_eq!(samples.estimate(filter, 0).location, 4.0);
        assert_eq!(samples.estimate(filter, 1), Agreed::default());
        samples.retain(|c| c != 2);
        assert_eq!(samples.estimate(filter, 2), Agreed::default());
    }

    #[test]
    fn codelets_of_a_kind_share_their_tails() {
        let mut instances = Samples::default();
        // 0 and 1 burst, and 0's instances showed a stall; 2 is paced.
        instances.of(0).extend([2.0, 2.0, 2.0, 22.0]);
        instances.of(1).extend([1.5, 1.5, 1.5, 1.5]);
        instances.of(2).extend([2.1, 2.1, 2.1, 2.5]);
        let shared = shared_tails(&instances, &[0, 1, 2, 3], |c| c != 2);
        // The bursts' excess, 20 over 8 instances, goes to each of them; 2 alone gets its own,
        // 0.4 over 4; 3 has no instance.
        assert_eq!(shared, [Some(4.5), Some(4.0), Some(2.2), None]);
    }

    #[test]
    fn a_fast_instance_takes_nothing_off_its_kind() {
        let mut instances = Samples::default();
        // Native slowed by 20 ms, but one of its instances was not: native is judged by its
        // own mean (20 less a quarter of 19.9), and 1 keeps its 0.1.
        instances.of(0).extend([20.0, 20.0, 20.0, 0.1]);
        instances.of(1).extend([0.1, 0.1, 0.1, 0.1]);
        let shared = shared_tails(&instances, &[0, 1], |_| true);
        assert!(
            (shared[0].unwrap() - (20.0 - 19.9 / 4.0)).abs() < 1e-9,
            "{shared:?}"
        );
        assert_eq!(shared[1], Some(0.1));
    }

    #[test]
    fn a_codelet_alternating_fast_and_slow_is_judged_by_its_mean() {
        let mut instances = Samples::default();
        // Periods of a codelet whose ranks took turns on a loaded machine (mean 5.3), against
        // a steady 8.
        instances.of(0).extend([7.9, 7.9, 0.1, 7.9, 7.9, 0.1]);
        instances.of(1).extend([8.0; 6]);
        let shared = shared_tails(&instances, &[0, 1], |c| c == 1);
        assert!((shared[0].unwrap() - 5.3).abs() < 1e-9, "{shared:?}");
        assert_eq!(shared[1], Some(8.0));
    }

    #[test]
    fn a_stall_of_the_machine_is_no_kind_s_tail() {
        let mut instances = Samples::default();
        instances.of(0).extend([1.0, 1.0, 1.0, 1.0 + STALL]);
        instances.of(1).extend([3.0, 3.0, 3.0, 3.0]);
        assert_eq!(
            shared_tails(&instances, &[0, 1], |_| true),
            [Some(1.0), Some(3.0)]
        );
    }
}
