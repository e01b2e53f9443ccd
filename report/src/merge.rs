//! Merging every rank's keys into the report's sites.

use std::collections::BTreeMap;

use crate::{
    KeyData, Location, Op, Range, RankData, RankSpread, Report, SiteData, SiteReport, TimeStats,
    VERSION,
};

/// A key and the rank it comes from.
type RankKey<'a> = (u32, &'a KeyData);

/// Merges per-rank data; `locate` resolves a site to its source location.
pub fn merge(
    ranks: &[RankData],
    mpi: &str,
    nprocs: u32,
    mut locate: impl FnMut(&SiteData) -> Location,
) -> Report {
    let total_run_ns: u64 = ranks.iter().map(|r| r.run_ns).sum();
    // A rank may have several keys in one group (two communicators of one size at one line,
    // local variants of a signature): grouped by rank too, so that per-rank figures add up.
    let mut groups: BTreeMap<(u64, Op, &str), Vec<RankKey>> = BTreeMap::new();
    for rank in ranks {
        for key in &rank.keys {
            groups
                .entry((key.site.id, key.op, key.merge_key.as_str()))
                .or_default()
                .push((rank.rank, key));
        }
    }
    let mut sites: Vec<SiteReport> = groups
        .into_values()
        .map(|keys| merge_key(&keys, total_run_ns, &mut locate))
        .collect();
    sites.sort_by(|a, b| {
        b.time
            .total_s
            .total_cmp(&a.time.total_s)
            .then_with(|| a.location.cmp(&b.location))
    });
    Report {
        version: VERSION,
        mpi: mpi.to_string(),
        nprocs,
        ranks_reporting: ranks.len() as u32,
        run_time_s: ranks.iter().map(|r| r.run_ns).max().unwrap_or(0) as f64 * 1e-9,
        sites,
    }
}

/// One rank's figures for a group of keys.
#[derive(Default)]
struct PerRank {
    calls: u64,
    bytes: u64,
    total_ns: u64,
}

fn merge_key(
    ranked: &[RankKey],
    total_run_ns: u64,
    locate: &mut impl FnMut(&SiteData) -> Location,
) -> SiteReport {
    let keys: Vec<&KeyData> = ranked.iter().map(|(_, k)| *k).collect();
    let mut per_rank: BTreeMap<u32, PerRank> = BTreeMap::new();
    for (rank, key) in ranked {
        let r = per_rank.entry(*rank).or_default();
        r.calls += key.calls;
        r.bytes += key.bytes;
        r.total_ns += key.total_ns;
    }
    let first = keys[0];
    let location = locate(&first.site);
    let mut histogram: BTreeMap<u64, u64> = BTreeMap::new();
    let mut codelets: BTreeMap<String, u64> = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    for key in &keys {
        for note in &key.notes {
            if !notes.contains(note) {
                notes.push(note.clone());
            }
        }
        for &(value, count) in &key.histogram {
            *histogram.entry(value).or_default() += count;
        }
        for (name, n) in &key.codelets {
            *codelets.entry(name.clone()).or_default() += n;
        }
    }
    if first.op == Op::Halo
        && let Some(note) = halo_winners(&keys)
    {
        notes.push(note);
    }
    let range = |f: &dyn Fn(&PerRank) -> u64| Range {
        min: per_rank.values().map(f).min().unwrap_or(0),
        max: per_rank.values().map(f).max().unwrap_or(0),
    };
    let calls = range(&|k| k.calls);
    let bytes = range(&|k| k.bytes);
    let time_ns = range(&|k| k.total_ns);
    let sum_ns: u64 = keys.iter().map(|k| k.total_ns).sum();
    let us = |ns: u64| ns as f64 * 1e-3;
    let min_ns = keys.iter().map(|k| k.min_ns).min().unwrap_or(0);
    let max_ns = keys.iter().map(|k| k.max_ns).max().unwrap_or(0);
    // Buckets are up to 1 % wide: keep quantiles within the exact extremes.
    let q = |p: f64| us(quantile(&histogram, p).clamp(min_ns, max_ns));
    let time = TimeStats {
        total_s: time_ns.max as f64 * 1e-9,
        min_us: us(min_ns),
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        max_us: us(max_ns),
        share: if total_run_ns == 0 {
            0.0
        } else {
            sum_ns as f64 / total_run_ns as f64
        },
    };
    let codelet = codelets
        .iter()
        .max_by_key(|(name, n)| (**n, std::cmp::Reverse(name.as_str())))
        .map_or_else(|| "native".to_string(), |(name, _)| name.clone());
    SiteReport {
        op: first.op,
        location: location.text,
        file: location.file,
        line: location.line,
        function: location.function,
        object: first.site.object.clone(),
        address: format!("{:#x}", first.site.address),
        signature: first.signature.clone(),
        calls: calls.max,
        bytes: bytes.max,
        time,
        codelet,
        codelets,
        notes,
        tuning: keys.iter().find_map(|k| k.tuning.clone()),
        period_us: keys.iter().filter_map(|k| k.period_ns).max().map(us),
        ranks: RankSpread {
            count: per_rank.len() as u32,
            calls,
            bytes,
            time_s: Range {
                min: time_ns.min as f64 * 1e-9,
                max: time_ns.max as f64 * 1e-9,
            },
        },
    }
}

/// Halo episodes are tuned per rank: which codelet each rank kept, when they differ.
fn halo_winners(keys: &[&KeyData]) -> Option<String> {
    let mut winners: BTreeMap<&str, u32> = BTreeMap::new();
    for key in keys {
        if let Some(winner) = key.tuning.as_ref().and_then(|t| t.winner.as_deref()) {
            *winners.entry(winner).or_default() += 1;
        }
    }
    (winners.len() > 1).then(|| {
        let each: Vec<String> = winners
            .iter()
            .map(|(name, ranks)| format!("{name} on {ranks}"))
            .collect();
        format!("ranks kept different halo codelets: {}", each.join(", "))
    })
}

/// The smallest bucket value with at least `q` of the samples at or below it.
fn quantile(histogram: &BTreeMap<u64, u64>, q: f64) -> u64 {
    let total: u64 = histogram.values().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((q * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (&value, &count) in histogram {
        seen += count;
        if seen >= rank {
            return value;
        }
    }
    histogram.keys().next_back().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TuningData;

    fn site(id: u64) -> SiteData {
        SiteData {
            id,
            object: "/bin/app".into(),
            address: 0x1234,
            python: None,
        }
    }

    fn key(id: u64, op: Op, calls: u64, total_ns: u64, hist: Vec<(u64, u64)>) -> KeyData {
        KeyData {
            op,
            site: site(id),
            merge_key: "count=1".into(),
            signature: "count=1".into(),
            calls,
            bytes: calls * 8,
            total_ns,
            min_ns: hist.first().map_or(0, |h| h.0),
            max_ns: hist.last().map_or(0, |h| h.0),
            histogram: hist,
            codelets: [("native".to_string(), calls)].into(),
            notes: Vec::new(),
            tuning: None,
            period_ns: None,
        }
    }

    #[test]
    fn keys_of_one_rank_in_one_group_add_up() {
        // Two communicators of one size at one line: two keys per rank, one site.
        let ranks: Vec<RankData> = (0..2)
            .map(|rank| RankData {
                rank,
                run_ns: 1000,
                keys: vec![
                    key(1, Op::Allreduce, 100, 100, vec![(1, 100)]),
                    key(1, Op::Allreduce, 100, 100, vec![(1, 100)]),
                ],
            })
            .collect();
        let report = merge(&ranks, "Test MPI", 2, |_| Location::default());
        assert_eq!(report.sites.len(), 1);
        let site = &report.sites[0];
        assert_eq!(site.calls, 200, "calls per rank");
        assert_eq!(site.ranks.count, 2);
        assert_eq!(site.ranks.calls, Range { min: 200, max: 200 });
    }

    #[test]
    fn a_halo_site_says_when_ranks_kept_different_codelets() {
        let tuned = |winner: &str| {
            let mut k = key(1, Op::Halo, 10, 100, vec![(10, 10)]);
            k.tuning = Some(TuningData {
                phase: "production".into(),
                reason: None,
                winner: Some(winner.into()),
                search_instances: 8,
                searches: 1,
                rounds: 4,
                codelets: Vec::new(),
                saved_s: 0.0,
            });
            k
        };
        let ranks: Vec<RankData> = ["native", "persistent", "native"]
            .into_iter()
            .enumerate()
            .map(|(rank, winner)| RankData {
                rank: rank as u32,
                run_ns: 1000,
                keys: vec![tuned(winner)],
            })
            .collect();
        let report = merge(&ranks, "Test MPI", 3, |_| Location::default());
        assert_eq!(
            report.sites[0].notes,
            ["ranks kept different halo codelets: native on 2, persistent on 1"]
        );
        let same: Vec<RankData> = (0..2)
            .map(|rank| RankData {
                rank,
                run_ns: 1000,
                keys: vec![tuned("native")],
            })
            .collect();
        let report = merge(&same, "Test MPI", 2, |_| Location::default());
        assert!(report.sites[0].notes.is_empty());
    }

    #[test]
    fn quantiles_walk_buckets() {
        let h: BTreeMap<u64, u64> = [(10, 50), (20, 40), (100, 10)].into();
        assert_eq!(quantile(&h, 0.5), 10);
        assert_eq!(quantile(&h, 0.9), 20);
        assert_eq!(quantile(&h, 0.99), 100);
        assert_eq!(quantile(&BTreeMap::new(), 0.5), 0);
    }

    #[test]
    fn keys_merge_across_ranks_by_site_op_and_signature() {
        let ranks = vec![
            RankData {
                rank: 0,
                run_ns: 1000,
                keys: vec![
                    key(1, Op::Allreduce, 3, 300, vec![(100, 3)]),
                    key(2, Op::Alltoall, 1, 50, vec![(50, 1)]),
                ],
            },
            RankData {
                rank: 1,
                run_ns: 1000,
                keys: vec![key(1, Op::Allreduce, 3, 600, vec![(200, 3)])],
            },
        ];
        let report = merge(&ranks, "Test MPI", 2, |s| Location {
            text: format!("site{}", s.id),
            ..Location::default()
        });
        assert_eq!(report.sites.len(), 2);
        let a = &report.sites[0];
        assert_eq!(a.location, "site1");
        assert_eq!(a.calls, 3);
        assert_eq!(a.bytes, 24);
        assert_eq!(a.ranks.count, 2);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(a.ranks.time_s.max, 600e-9));
        assert!(close(a.time.min_us, 0.1));
        assert!(close(a.time.max_us, 0.2));
        assert!(close(a.time.share, 900.0 / 2000.0));
        assert_eq!(a.codelet, "native");
        assert_eq!(a.codelets["native"], 6);
        assert_eq!(report.sites[1].ranks.count, 1);
        assert_eq!(report.ranks_reporting, 2);
    }
}
