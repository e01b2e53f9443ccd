//! Merging every rank's keys into the report's sites.

use std::collections::BTreeMap;

use crate::{
    Aborted, KeyData, Location, Op, RANK_SIGNATURES, Range, RankData, RankInfo, RankSignature,
    RankSpread, Report, Saving, SiteData, SiteReport, TimeStats, TuningData, VERSION,
};

/// A key and the rank it comes from.
type RankKey<'a> = (u32, &'a KeyData);

/// Merges per-rank data; `locate` resolves a site to its source location; `aborted` is set for
/// a report written at MPI_Abort.
pub fn merge(
    ranks: &[RankData],
    mpi: &str,
    nprocs: u32,
    aborted: Option<Aborted>,
    mut locate: impl FnMut(&SiteData) -> Location,
) -> Report {
    let run_ns: BTreeMap<u32, u64> = ranks.iter().map(|r| (r.rank, r.run_ns)).collect();
    let total_run_ns: u64 = run_ns.values().sum();
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
        .map(|keys| merge_key(&keys, &run_ns, &mut locate))
        .collect();
    let mut infos: Vec<RankInfo> = ranks
        .iter()
        .map(|r| RankInfo {
            rank: r.rank,
            host: r.host.clone(),
            run_s: r.run_ns as f64 * 1e-9,
        })
        .collect();
    infos.sort_by_key(|r| r.rank);
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
        run_time_s: run_ns.values().max().copied().unwrap_or(0) as f64 * 1e-9,
        share_in_calls: Some(share_in_calls(ranks, total_run_ns)),
        aborted,
        ranks: infos,
        sites,
    }
}

/// Each rank's time in all its keys, at most its run time, summed over ranks, over the run
/// times summed. Calls that overlap (threads, halo episodes spanning other calls) count once
/// each, so this is an upper bound of the time any call was under way.
fn share_in_calls(ranks: &[RankData], total_run_ns: u64) -> f64 {
    let in_calls: u64 = ranks
        .iter()
        .map(|r| {
            let sum: u64 = r
                .keys
                .iter()
                .map(|k| Time::of(k, r.run_ns).total_ns())
                .sum();
            sum.min(r.run_ns)
        })
        .sum();
    ratio(in_calls, total_run_ns)
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// One rank's time in a key: measured, plus the untimed calls' estimate, which never takes the
/// total beyond the rank's run time.
#[derive(Default, Clone, Copy)]
struct Time {
    measured_ns: u64,
    estimated_ns: u64,
    error_ns: u64,
}

impl Time {
    fn of(key: &KeyData, run_ns: u64) -> Time {
        let room = run_ns.saturating_sub(key.measured_ns);
        Time {
            measured_ns: key.measured_ns,
            estimated_ns: key.estimated_ns.min(room),
            error_ns: key.estimate_error_ns.min(room),
        }
    }

    fn total_ns(&self) -> u64 {
        self.measured_ns + self.estimated_ns
    }

    fn add(&mut self, other: Time) {
        self.measured_ns += other.measured_ns;
        self.estimated_ns += other.estimated_ns;
        self.error_ns += other.error_ns;
    }
}

/// One rank's figures for a group of keys.
#[derive(Default)]
struct PerRank {
    calls: u64,
    bytes: u64,
    time: Time,
    run_ns: u64,
}

impl PerRank {
    fn total_ns(&self) -> u64 {
        self.time.total_ns()
    }
}

fn merge_key(
    ranked: &[RankKey],
    run_ns: &BTreeMap<u32, u64>,
    locate: &mut impl FnMut(&SiteData) -> Location,
) -> SiteReport {
    let keys: Vec<&KeyData> = ranked.iter().map(|(_, k)| *k).collect();
    let mut per_rank: BTreeMap<u32, PerRank> = BTreeMap::new();
    for (rank, key) in ranked {
        let r = per_rank.entry(*rank).or_default();
        r.run_ns = run_ns.get(rank).copied().unwrap_or(0);
        r.calls += key.calls;
        r.bytes += key.bytes;
        r.time.add(Time::of(key, r.run_ns));
    }
    let first = keys[0];
    let location = locate(&first.site);
    let mut histogram: BTreeMap<u64, u64> = BTreeMap::new();
    let mut codelets: BTreeMap<String, u64> = BTreeMap::new();
    let mut unchanged: BTreeMap<&str, u64> = BTreeMap::new();
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
        for (name, n) in &key.unchanged {
            *unchanged.entry(name.as_str()).or_default() += n;
        }
    }
    for (name, n) in unchanged {
        notes.push(format!(
            "halo codelet {name} changed nothing in {n} episodes (all ranks), which count as \
             native"
        ));
    }
    if per_rank.values().any(|r| r.time.measured_ns > r.run_ns) {
        notes.push(
            "calls overlapped in time (threads calling at once): a rank's time here is the sum \
             over its calls, its share at most its run time"
                .to_string(),
        );
    }
    let winners = if first.op == Op::Halo {
        halo_winners(&keys)
    } else {
        collective_keys(ranked)
    };
    notes.extend(winners);
    let range = |f: &dyn Fn(&PerRank) -> u64| Range {
        min: per_rank.values().map(f).min().unwrap_or(0),
        max: per_rank.values().map(f).max().unwrap_or(0),
    };
    let calls = range(&|k| k.calls);
    let bytes = range(&|k| k.bytes);
    let time_ns = range(&|k| k.total_ns());
    let total_run_ns: u64 = per_rank.values().map(|r| r.run_ns).sum();
    let in_site_ns: u64 = per_rank.values().map(|r| r.total_ns().min(r.run_ns)).sum();
    let error_ns: u64 = per_rank.values().map(|r| r.time.error_ns).sum();
    let slowest = per_rank
        .values()
        .max_by_key(|r| r.total_ns())
        .map(|r| r.time)
        .unwrap_or_default();
    let us = |ns: u64| ns as f64 * 1e-3;
    let min_ns = keys.iter().map(|k| k.min_ns).min().unwrap_or(0);
    let max_ns = keys.iter().map(|k| k.max_ns).max().unwrap_or(0);
    // Buckets are up to 1 % wide: keep quantiles within the exact extremes.
    let q = |p: f64| us(quantile(&histogram, p).clamp(min_ns, max_ns));
    let time = TimeStats {
        total_s: time_ns.max as f64 * 1e-9,
        estimated_s: slowest.estimated_ns as f64 * 1e-9,
        error_s: slowest.error_ns as f64 * 1e-9,
        timed_calls: Some(keys.iter().map(|k| k.timed).sum()),
        min_us: us(min_ns),
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        max_us: us(max_ns),
        share: ratio(in_site_ns, total_run_ns),
        share_error: ratio(error_ns, total_run_ns),
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
        tuning: tuning(ranked),
        period_us: keys.iter().filter_map(|k| k.period_ns).max().map(us),
        rank_signatures: if first.op == Op::Halo {
            rank_signatures(ranked)
        } else {
            Vec::new()
        },
        ranks: RankSpread {
            count: per_rank.len() as u32,
            calls,
            bytes,
            time_s: Range {
                min: time_ns.min as f64 * 1e-9,
                max: time_ns.max as f64 * 1e-9,
            },
            time_by_rank_s: run_ns
                .keys()
                .map(|rank| per_rank.get(rank).map(|r| r.total_ns() as f64 * 1e-9))
                .collect(),
        },
    }
}

/// Each rank's messages of a halo episode (a rank with several keys in the group: theirs
/// joined), for the first `RANK_SIGNATURES` ranks.
fn rank_signatures(ranked: &[RankKey]) -> Vec<RankSignature> {
    let mut by_rank: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (rank, key) in ranked {
        let list = by_rank.entry(*rank).or_default();
        if !list.contains(&key.signature.as_str()) {
            list.push(&key.signature);
        }
    }
    by_rank
        .into_iter()
        .take(RANK_SIGNATURES)
        .map(|(rank, list)| RankSignature {
            rank,
            signature: list.join(" | "),
        })
        .collect()
}

/// The first rank's tuning (decisions are agreed, halo ones noted in `halo_winners`), with the
/// savings of every rank: the mean over the ranks that measured one.
fn tuning(ranked: &[RankKey]) -> Option<TuningData> {
    let mut tuning = ranked.iter().find_map(|(_, k)| k.tuning.clone())?;
    let mut per_rank: BTreeMap<u32, Saving> = BTreeMap::new();
    for (rank, saving) in ranked
        .iter()
        .filter_map(|(rank, k)| Some((rank, k.tuning.as_ref()?.saving.as_ref()?)))
    {
        per_rank
            .entry(*rank)
            .and_modify(|s| {
                s.calls += saving.calls;
                s.saved_s += saving.saved_s;
                s.low_s += saving.low_s;
                s.high_s += saving.high_s;
                s.replaced_in = s.replaced_in.min(saving.replaced_in);
            })
            .or_insert_with(|| saving.clone());
    }
    tuning.saving = (!per_rank.is_empty()).then(|| {
        let n = per_rank.len() as f64;
        let mean = |f: fn(&Saving) -> f64| per_rank.values().map(f).sum::<f64>() / n;
        // Ranks' errors are added, not combined as independent: an upper bound whatever their
        // correlation (the ranks of a collective wait for each other).
        Saving {
            replaced: per_rank
                .values()
                .next()
                .map(|s| s.replaced.clone())
                .unwrap_or_default(),
            replaced_us: mean(|s| s.replaced_us),
            // Ranks time the replaced codelet alike: a collective's calls are the same
            // everywhere, and a halo rank's warm-up is nearly so; any rank's search sets it.
            replaced_in: per_rank
                .values()
                .map(|s| s.replaced_in)
                .min()
                .unwrap_or_default(),
            winner_us: mean(|s| s.winner_us),
            calls: (per_rank.values().map(|s| s.calls).sum::<u64>() as f64 / n).round() as u64,
            saved_s: mean(|s| s.saved_s),
            low_s: mean(|s| s.low_s),
            high_s: mean(|s| s.high_s),
        }
    });
    Some(tuning)
}

/// Halo episodes are tuned per rank: which codelet each rank kept, when they differ.
fn halo_winners(keys: &[&KeyData]) -> Option<String> {
    let winners = tally(
        keys.iter()
            .filter_map(|k| k.tuning.as_ref()?.winner.as_deref()),
    );
    (winners.len() > 1).then(|| format!("ranks kept different halo codelets: {}", listed(&winners)))
}

/// A collective site where a rank tuned several keys (communicators of one size at one line,
/// local variants of its signature) shows the first key's tuning: what each key chose, from the
/// first rank's (decisions are agreed over each key's communicator).
fn collective_keys(ranked: &[RankKey]) -> Option<String> {
    let first = ranked.iter().map(|(rank, _)| *rank).min()?;
    let winners = tally(
        ranked
            .iter()
            .filter(|(rank, _)| *rank == first)
            .filter_map(|(_, k)| k.tuning.as_ref())
            .map(|t| t.winner.as_deref().unwrap_or("undecided")),
    );
    let keys: u32 = winners.values().sum();
    (keys > 1).then(|| {
        format!(
            "{keys} keys tuned apart here (one per communicator or local variant of the \
             signature), the tuning shown is the first's; winners: {}",
            listed(&winners)
        )
    })
}

/// How many times each name comes.
fn tally<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, u32> {
    let mut counts = BTreeMap::new();
    for name in names {
        *counts.entry(name).or_default() += 1;
    }
    counts
}

/// `name on N, ...`, in the names' order.
fn listed(counts: &BTreeMap<&str, u32>) -> String {
    let each: Vec<String> = counts
        .iter()
        .map(|(name, n)| format!("{name} on {n}"))
        .collect();
    each.join(", ")
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
    use crate::{Baseline, TuningData};

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
            timed: calls,
            measured_ns: total_ns,
            estimated_ns: 0,
            estimate_error_ns: 0,
            min_ns: hist.first().map_or(0, |h| h.0),
            max_ns: hist.last().map_or(0, |h| h.0),
            histogram: hist,
            codelets: [("native".to_string(), calls)].into(),
            unchanged: BTreeMap::new(),
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
                host: String::new(),
                run_ns: 1000,
                keys: vec![
                    key(1, Op::Allreduce, 100, 100, vec![(1, 100)]),
                    key(1, Op::Allreduce, 100, 100, vec![(1, 100)]),
                ],
            })
            .collect();
        let report = merge(&ranks, "Test MPI", 2, None, |_| Location::default());
        assert_eq!(report.sites.len(), 1);
        let site = &report.sites[0];
        assert_eq!(site.calls, 200, "calls per rank");
        assert_eq!(site.ranks.count, 2);
        assert_eq!(site.ranks.calls, Range { min: 200, max: 200 });
    }

    /// A key of `op` in production with `winner`, and what it saved.
    fn tuned_key(op: Op, winner: &str, saving: Option<Saving>) -> KeyData {
        let mut k = key(1, op, 10, 100, vec![(10, 10)]);
        k.tuning = Some(TuningData {
            phase: "production".into(),
            reason: None,
            winner: Some(winner.into()),
            search_instances: 8,
            searches: 1,
            rounds: 4,
            codelets: Vec::new(),
            timeline: Vec::new(),
            timeline_dropped: 0,
            saved_s: None,
            saving,
            check: None,
            prediction: None,
            search_timing: None,
            collective_over_call: None,
        });
        k
    }

    #[test]
    fn a_collective_site_of_several_keys_says_what_each_chose() {
        let ranks = |winners: [&str; 2]| -> Vec<RankData> {
            (0..2)
                .map(|rank| RankData {
                    rank,
                    host: String::new(),
                    run_ns: 1000,
                    keys: winners
                        .iter()
                        .map(|w| tuned_key(Op::Allreduce, w, None))
                        .collect(),
                })
                .collect()
        };
        let report = merge(&ranks(["linear", "native"]), "Test MPI", 2, None, |_| {
            Location::default()
        });
        assert_eq!(report.sites.len(), 1);
        assert_eq!(
            report.sites[0].notes,
            [
                "2 keys tuned apart here (one per communicator or local variant of the \
                 signature), the tuning shown is the first's; winners: linear on 1, native on 1"
            ]
        );
        let report = merge(&ranks(["ring", "ring"]), "Test MPI", 2, None, |_| {
            Location::default()
        });
        assert!(
            report.sites[0].notes[0].ends_with("winners: ring on 2"),
            "{:?}",
            report.sites[0].notes
        );
        let one = |rank| RankData {
            rank,
            host: String::new(),
            run_ns: 1000,
            keys: vec![tuned_key(Op::Allreduce, "ring", None)],
        };
        let report = merge(&[one(0), one(1)], "Test MPI", 2, None, |_| {
            Location::default()
        });
        assert!(report.sites[0].notes.is_empty(), "one key per rank");
    }

    #[test]
    fn a_halo_site_says_when_ranks_kept_different_codelets() {
        let tuned = |winner: &str| tuned_key(Op::Halo, winner, None);
        let ranks: Vec<RankData> = ["native", "persistent", "native"]
            .into_iter()
            .enumerate()
            .map(|(rank, winner)| RankData {
                rank: rank as u32,
                host: String::new(),
                run_ns: 1000,
                keys: vec![tuned(winner)],
            })
            .collect();
        let report = merge(&ranks, "Test MPI", 3, None, |_| Location::default());
        assert_eq!(
            report.sites[0].notes,
            ["ranks kept different halo codelets: native on 2, persistent on 1"]
        );
        let ranks: Vec<u32> = report.sites[0]
            .rank_signatures
            .iter()
            .map(|s| s.rank)
            .collect();
        assert_eq!(ranks, [0, 1, 2], "every rank's messages of the episode");
        let same: Vec<RankData> = (0..2)
            .map(|rank| RankData {
                rank,
                host: String::new(),
                run_ns: 1000,
                keys: vec![tuned("native")],
            })
            .collect();
        let report = merge(&same, "Test MPI", 2, None, |_| Location::default());
        assert!(report.sites[0].notes.is_empty());
    }

    #[test]
    fn estimates_and_shares_never_exceed_the_run() {
        // Rank 0 measured 600 of its 1000 ns and estimates 900 more; rank 1's threads overlap.
        let mut estimated = key(1, Op::Allreduce, 10, 600, vec![(60, 10)]);
        estimated.estimated_ns = 900;
        estimated.estimate_error_ns = 500;
        let overlapping = key(1, Op::Allreduce, 10, 1500, vec![(150, 10)]);
        let ranks = vec![
            RankData {
                rank: 0,
                host: "a".into(),
                run_ns: 1000,
                keys: vec![estimated],
            },
            RankData {
                rank: 1,
                host: "b".into(),
                run_ns: 1000,
                keys: vec![overlapping],
            },
        ];
        let report = merge(&ranks, "Test MPI", 2, None, |_| Location::default());
        let site = &report.sites[0];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        assert!(
            close(site.ranks.time_s.min, 1000e-9),
            "rank 0 capped at its run"
        );
        assert_eq!(site.time.share, 1.0);
        assert_eq!(report.share_in_calls, Some(1.0));
        assert!(site.notes.iter().any(|n| n.contains("calls overlapped")));
        // The slowest rank (1) measured everything: no estimate in its total.
        assert!(close(site.time.total_s, 1500e-9));
        assert_eq!(site.time.estimated_s, 0.0);
        assert!(
            close(site.time.share_error, 400.0 / 2000.0),
            "error capped too"
        );
    }

    #[test]
    fn savings_are_the_mean_over_ranks() {
        let saving = |saved_s: f64, replaced_in: Baseline| Saving {
            replaced: "native".into(),
            replaced_us: 10.0,
            replaced_in,
            winner_us: 5.0,
            calls: 100,
            saved_s,
            low_s: saved_s - 1.0,
            high_s: saved_s + 1.0,
        };
        let merged = |savings: [(f64, Baseline); 2]| {
            let ranks: Vec<RankData> = savings
                .into_iter()
                .enumerate()
                .map(|(rank, (saved, replaced_in))| {
                    let k = tuned_key(Op::Allreduce, "ring", Some(saving(saved, replaced_in)));
                    RankData {
                        rank: rank as u32,
                        host: String::new(),
                        run_ns: 1000,
                        keys: vec![k],
                    }
                })
                .collect();
            let report = merge(&ranks, "Test MPI", 2, None, |_| Location::default());
            report.sites[0].tuning.as_ref().unwrap().saving.clone()
        };
        use Baseline::{Production, Search};
        assert_eq!(
            merged([(4.0, Production), (2.0, Production)]),
            Some(saving(3.0, Production))
        );
        // A rank that timed native in the search only makes the mean a mix: search, the lesser.
        assert_eq!(
            merged([(4.0, Production), (2.0, Search)]),
            Some(saving(3.0, Search))
        );
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
                host: "a".into(),
                run_ns: 1000,
                keys: vec![
                    key(1, Op::Allreduce, 3, 300, vec![(100, 3)]),
                    key(2, Op::Alltoall, 1, 50, vec![(50, 1)]),
                ],
            },
            RankData {
                rank: 1,
                host: "b".into(),
                run_ns: 1000,
                keys: vec![key(1, Op::Allreduce, 3, 600, vec![(200, 3)])],
            },
        ];
        let report = merge(&ranks, "Test MPI", 2, None, |s| Location {
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
        // Per rank, in the order of the report's ranks; rank 1 never called site 2.
        let hosts: Vec<&str> = report.ranks.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["a", "b"]);
        let by_rank = &a.ranks.time_by_rank_s;
        assert!(close(by_rank[0].unwrap(), 300e-9) && close(by_rank[1].unwrap(), 600e-9));
        assert_eq!(report.sites[1].ranks.time_by_rank_s[1], None);
        assert!(
            a.rank_signatures.is_empty(),
            "collectives share one signature"
        );
    }
}
