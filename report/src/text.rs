//! The short text summary: the sites that took the most time.

use std::fmt::Write;

use crate::{Report, Saving, SiteReport, TuningData};

/// The summary of `report` with at most `top` sites.
pub fn summary(report: &Report, top: usize) -> String {
    let mut out = String::new();
    // Version 1 reports lack the capped figure: their site shares, capped at the whole run.
    let in_calls = report.share_in_calls.unwrap_or_else(|| {
        report
            .sites
            .iter()
            .map(|s| s.time.share)
            .fold(0.0, |a, b| a + b)
            .min(1.0)
    });
    let partial = if report.ranks_reporting < report.nprocs {
        format!(" (data of {} ranks only)", report.ranks_reporting)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "commtune: {} ranks, {}, run {:.3} s, {} sites, {} of the time in intercepted calls{partial}",
        report.nprocs,
        report.mpi,
        report.run_time_s,
        report.sites.len(),
        percent(in_calls)
    );
    if let Some(aborted) = report.aborted {
        let _ = writeln!(
            out,
            "commtune: partial report: rank {} called MPI_Abort (error code {}); this is what that \
             rank had measured",
            aborted.rank, aborted.code
        );
    }
    if report.sites.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:>12} {:>9} {:>10} {:>10} {:>10}  {:<10} {:<12} location",
        "share", "calls", "bytes", "p50", "p99", "op", "codelet"
    );
    let shown = || report.sites.iter().take(top);
    for site in shown() {
        let untimed = site.time.timed_calls == Some(0);
        let quantile = |us: f64| if untimed { "-".to_string() } else { micros(us) };
        let _ = writeln!(
            out,
            "  {:>12} {:>9} {:>10} {:>10} {:>10}  {:<10} {:<12} {}",
            share(site),
            site.calls,
            bytes(site.bytes),
            quantile(site.time.p50_us),
            quantile(site.time.p99_us),
            site.op.name(),
            site.codelet,
            site.location
        );
    }
    if shown().any(|s| s.time.estimated_s > 0.0) {
        let _ = writeln!(
            out,
            "  ~: partly estimated (tuned calls are timed one in eight), \u{b1} the 95% interval"
        );
    }
    tuning(&mut out, report, top);
    let notes = report
        .sites
        .iter()
        .take(top)
        .flat_map(|site| site.notes.iter().map(|note| (&site.location, note)));
    for ((location, note), n) in counted(notes) {
        let _ = writeln!(out, "  note: {location}{}: {note}", sites(n));
    }
    if report.sites.len() > top {
        let _ = writeln!(
            out,
            "  ... {} more sites in the JSON report",
            report.sites.len() - top
        );
    }
    out
}

/// What the tuner did with each shown site (COMMTUNE_MODE=tune).
fn tuning(out: &mut String, report: &Report, top: usize) {
    let tuned: Vec<_> = report
        .sites
        .iter()
        .take(top)
        .filter_map(|s| Some((s, s.tuning.as_ref()?)))
        .collect();
    if tuned.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  tuning: {:<10} {:<18} {:>8} {:>22}  location / estimates or reason",
        "phase", "winner", "searched", "saved in this run"
    );
    let lines = tuned.iter().enumerate().map(|(i, &(site, t))| {
        let mut detail = match &t.reason {
            Some(reason) => reason.clone(),
            None => t
                .codelets
                .iter()
                .map(|c| format!("{}={}", c.name, micros(c.estimate_us)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        if let Some(c) = &t.check {
            let trial = match (&c.runner_up, c.runner_up_realised_us) {
                (Some(name), Some(us)) => format!(", {name} {} in a trial", micros(us)),
                _ => String::new(),
            };
            let least = c
                .least_rank_us
                .map(|us| format!(" (least rank {})", micros(us)))
                .unwrap_or_default();
            let _ = write!(
                detail,
                "; predicted {} realised {}{least}{trial} ({}, {})",
                micros(c.predicted_us),
                micros(c.realised_us),
                c.timing,
                c.verdict
            );
        }
        if let Some(p) = &t.prediction {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str(&p.describe());
        }
        let columns = format!(
            "{:<10} {:<18} {:>8} {:>22}",
            t.phase,
            t.winner.as_deref().unwrap_or("-"),
            t.search_instances,
            saved(t),
        );
        // A site's saving is its own: sites that saved are never summarised as one.
        let own = t.saving.is_some().then_some(i);
        (columns, &site.location, detail, own)
    });
    for ((columns, location, detail, _), n) in counted(lines) {
        let _ = writeln!(out, "          {columns}  {location}{}: {detail}", sites(n));
    }
    let predicted: Vec<_> = tuned
        .iter()
        .filter_map(|(_, t)| t.prediction.as_ref())
        .collect();
    if !predicted.is_empty() {
        let count = |outcome: &str| predicted.iter().filter(|p| p.outcome == outcome).count();
        let _ = writeln!(
            out,
            "  history: {} of these calls predicted, {} confirmed, {} kept after a trial, {} \
             dismissed by the safety net (then searched); {} search calls saved",
            predicted.len(),
            count("confirmed"),
            count("kept"),
            count("dismissed"),
            predicted.iter().map(|p| p.saved_instances).sum::<u64>()
        );
    }
}

/// Each distinct item once, in the order first seen, with how many times it came: a line of
/// source whose calls vary in size is many sites (one per size or signature), which the tuner
/// often treats alike, and a summary that listed each would repeat one line many times.
fn counted<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<(T, usize)> {
    let mut distinct: Vec<(T, usize)> = Vec::new();
    for item in items {
        match distinct.iter_mut().find(|(seen, _)| *seen == item) {
            Some((_, n)) => *n += 1,
            None => distinct.push((item, 1)),
        }
    }
    distinct
}

/// How many sites a summary line stands for, where more than one.
fn sites(n: usize) -> String {
    if n > 1 {
        format!(", {n} sites")
    } else {
        String::new()
    }
}

/// A site's share of the run; `~` and the interval when part of it is estimated.
pub(crate) fn share(site: &SiteReport) -> String {
    if site.time.estimated_s > 0.0 {
        format!(
            "~{}\u{b1}{:.1}",
            percent(site.time.share),
            100.0 * site.time.share_error
        )
    } else {
        percent(site.time.share)
    }
}

/// `12.3%`; never `-0.0%`.
pub(crate) fn percent(fraction: f64) -> String {
    format!(
        "{:.1}%",
        if fraction > 0.0 {
            100.0 * fraction
        } else {
            0.0
        }
    )
}

/// What the winner saved, as measured, with its 95 % interval.
pub(crate) fn saved(t: &TuningData) -> String {
    match (&t.saving, t.saved_s) {
        (Some(s), _) if !s.measurable() => "no measurable saving".to_string(),
        (Some(s), _) => {
            let what = if s.saved_s > 0.0 { "" } else { "cost " };
            format!("{what}{} \u{b1}{}", micros(s.saved_s.abs() * 1e6), error(s))
        }
        // Version 1 reports: the old estimate, labelled as such.
        (None, Some(v1)) if v1 != 0.0 => format!("~{} (estimate)", micros(v1 * 1e6)),
        (None, _) => "-".to_string(),
    }
}

fn error(s: &Saving) -> String {
    micros((s.high_s - s.low_s) * 0.5e6)
}

pub(crate) fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = b as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

pub(crate) fn micros(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us * 1e-6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us * 1e-3)
    } else {
        format!("{us:.1} us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aborted, Baseline, SelfCheck, check_version};

    /// A version 1 report as the first format wrote it: one tuned site with the old estimate.
    const VERSION_1: &str = include_str!("../tests/data/version-1.json");

    fn version_1() -> Report {
        serde_json::from_str(VERSION_1).expect("version 1 reports stay readable")
    }

    #[test]
    fn older_reports_are_read_and_newer_refused() {
        let report = version_1();
        assert!(check_version(report.version).is_ok());
        let text = summary(&report, 10);
        assert!(text.contains("60.0% of the time"), "{text}");
        assert!(text.contains("~250.00 ms (estimate)"), "{text}");
        assert!(
            check_version(crate::VERSION + 1)
                .unwrap_err()
                .contains("newer")
        );
    }

    #[test]
    fn no_sites_is_zero_percent_not_minus_zero() {
        let mut report = version_1();
        report.sites.clear();
        let text = summary(&report, 10);
        assert!(text.contains(" 0.0% of the time"), "{text}");
        assert!(!text.contains("-0.0"), "{text}");
    }

    #[test]
    fn estimates_savings_and_aborts_are_labelled() {
        let mut report = version_1();
        report.aborted = Some(Aborted { rank: 1, code: 3 });
        report.share_in_calls = Some(0.5);
        let site = &mut report.sites[0];
        site.time.estimated_s = 0.1;
        site.time.share_error = 0.02;
        let saving = |saved_s: f64, half: f64| Saving {
            replaced: "native".into(),
            replaced_us: 10.0,
            replaced_in: Baseline::Search,
            winner_us: 5.0,
            calls: 100,
            saved_s,
            low_s: saved_s - half,
            high_s: saved_s + half,
        };
        let measured = {
            let mut r = report.clone();
            r.sites[0].tuning.as_mut().unwrap().saving = Some(saving(0.002, 0.001));
            summary(&r, 10)
        };
        assert!(measured.contains("2.00 ms \u{b1}1.00 ms"), "{measured}");
        assert!(measured.contains("~60.0%\u{b1}2.0"), "{measured}");
        assert!(measured.contains("partly estimated"), "{measured}");
        assert!(
            measured.contains("partial report: rank 1 called MPI_Abort (error code 3)"),
            "{measured}"
        );
        let noise = {
            let mut r = report.clone();
            r.sites[0].tuning.as_mut().unwrap().saving = Some(saving(0.002, 0.003));
            summary(&r, 10)
        };
        assert!(noise.contains("no measurable saving"), "{noise}");
        let loss = {
            let mut r = report.clone();
            r.sites[0].tuning.as_mut().unwrap().saving = Some(saving(-0.002, 0.001));
            summary(&r, 10)
        };
        assert!(loss.contains("cost 2.00 ms"), "{loss}");
    }

    #[test]
    fn a_self_check_shows_its_trial() {
        let mut report = version_1();
        report.sites[0].tuning.as_mut().unwrap().check = Some(SelfCheck {
            predicted_us: 60.1,
            realised_us: 242.5,
            runner_up: Some("native".into()),
            runner_up_us: Some(75.8),
            runner_up_realised_us: Some(241.1),
            least_rank_us: Some(61.0),
            timing: "barrier".into(),
            verdict: "kept".into(),
        });
        let text = summary(&report, 10);
        assert!(
            text.contains(
                "predicted 60.1 us realised 242.5 us (least rank 61.0 us), native 241.1 us in a \
                 trial (barrier, kept)"
            ),
            "{text}"
        );
    }

    #[test]
    fn sites_alike_at_one_line_are_summarised_once() {
        let mut report = version_1();
        let mut site = report.sites[0].clone();
        site.notes = vec!["one message: not tuned".into()];
        let tuning = site.tuning.as_mut().unwrap();
        tuning.reason = Some("not tuned".into());
        let mut other = site.clone();
        other.location = "elsewhere.c:7".into();
        report.sites = vec![site.clone(), site.clone(), other, site];
        let text = summary(&report, 10);
        let lines = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        let here = &report.sites[0].location;
        assert_eq!(lines(&format!("{here}, 3 sites: not tuned")), 1, "{text}");
        assert_eq!(
            lines(&format!("note: {here}, 3 sites: one message")),
            1,
            "{text}"
        );
        assert_eq!(lines("elsewhere.c:7: not tuned"), 1, "{text}");
        assert_eq!(lines("note: elsewhere.c:7: one message"), 1, "{text}");
        assert_eq!(lines("one message"), 2, "{text}");
        // Sites that saved time each keep their line: their savings add up.
        for site in &mut report.sites {
            site.tuning.as_mut().unwrap().saving = Some(Saving {
                replaced: "native".into(),
                replaced_us: 10.0,
                replaced_in: Baseline::Search,
                winner_us: 5.0,
                calls: 100,
                saved_s: 0.002,
                low_s: 0.001,
                high_s: 0.003,
            });
        }
        let text = summary(&report, 10);
        let saved = text.lines().filter(|l| l.contains("2.00 ms \u{b1}1.00 ms"));
        assert_eq!(saved.count(), 4, "{text}");
    }

    #[test]
    fn units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(micros(12.34), "12.3 us");
        assert_eq!(micros(2500.0), "2.50 ms");
        assert_eq!(micros(3.2e6), "3.20 s");
    }
}
