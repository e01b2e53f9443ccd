//! The short text summary: the sites that took the most time.

use std::fmt::Write;

use crate::Report;

/// The summary of `report` with at most `top` sites.
pub fn summary(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let in_calls: f64 = report.sites.iter().map(|s| s.time.share).sum();
    let partial = if report.ranks_reporting < report.nprocs {
        format!(" (data of {} ranks only)", report.ranks_reporting)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "commtune: {} ranks, {}, run {:.3} s, {} sites, {:.1}% of the time in intercepted calls{partial}",
        report.nprocs,
        report.mpi,
        report.run_time_s,
        report.sites.len(),
        in_calls * 100.0
    );
    if report.sites.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:>6} {:>9} {:>10} {:>10} {:>10}  {:<10} {:<12} location",
        "share", "calls", "bytes", "p50", "p99", "op", "codelet"
    );
    for site in report.sites.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>5.1}% {:>9} {:>10} {:>10} {:>10}  {:<10} {:<12} {}",
            site.time.share * 100.0,
            site.calls,
            bytes(site.bytes),
            micros(site.time.p50_us),
            micros(site.time.p99_us),
            site.op.name(),
            site.codelet,
            site.location
        );
    }
    tuning(&mut out, report, top);
    for site in report.sites.iter().take(top) {
        for note in &site.notes {
            let _ = writeln!(out, "  note: {}: {note}", site.location);
        }
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
        "  tuning: {:<10} {:<18} {:>8} {:>10}  location / estimates or reason",
        "phase", "winner", "searched", "saved"
    );
    for (site, t) in tuned {
        let detail = match &t.reason {
            Some(reason) => reason.clone(),
            None => t
                .codelets
                .iter()
                .map(|c| format!("{}={}", c.name, micros(c.estimate_us)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        let _ = writeln!(
            out,
            "          {:<10} {:<18} {:>8} {:>10}  {}: {detail}",
            t.phase,
            t.winner.as_deref().unwrap_or("-"),
            t.search_instances,
            seconds(t.saved_s),
            site.location
        );
    }
}

fn seconds(s: f64) -> String {
    if s == 0.0 {
        "-".to_string()
    } else {
        micros(s * 1e6)
    }
}

fn bytes(b: u64) -> String {
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

fn micros(us: f64) -> String {
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
