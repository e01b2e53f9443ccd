//! `commtune report A.json B.json --compare`: two runs side by side, site by site (time,
//! codelet, ratio), for "what did tuning change" and before/after comparisons.
//!
//! Sites are matched by operation, location and signature; sites left over are then matched by
//! operation and location alone when that is unambiguous (a signature that changed between the
//! runs, e.g. another communicator size); the rest are listed as in one run only.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::html::{esc, page};
use crate::text::{micros, percent};
use crate::{Op, Report, SiteReport};

/// One run's figures for a site.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// The slowest rank's time in the site, seconds.
    pub total_s: f64,
    pub share: f64,
    /// Part of the time is estimated (tuned calls timed one in eight).
    pub estimated: bool,
    pub calls: u64,
    pub codelet: String,
    pub p50_us: f64,
}

impl Side {
    fn of(s: &SiteReport) -> Side {
        Side {
            total_s: s.time.total_s,
            share: s.time.share,
            estimated: s.time.estimated_s > 0.0,
            calls: s.calls,
            codelet: s.codelet.clone(),
            p50_us: s.time.p50_us,
        }
    }

    fn time(&self) -> String {
        let mark = if self.estimated { "~" } else { "" };
        format!("{mark}{}", micros(self.total_s * 1e6))
    }
}

/// A site in either run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub op: Op,
    pub location: String,
    pub signature: String,
    pub a: Option<Side>,
    pub b: Option<Side>,
}

impl Row {
    /// B's time over A's (None when a run lacks the site or A took no time).
    pub fn ratio(&self) -> Option<f64> {
        match (&self.a, &self.b) {
            (Some(a), Some(b)) if a.total_s > 0.0 => Some(b.total_s / a.total_s),
            _ => None,
        }
    }

    fn largest(&self) -> f64 {
        let t = |s: &Option<Side>| s.as_ref().map_or(0.0, |s| s.total_s);
        t(&self.a).max(t(&self.b))
    }
}

/// Two reports side by side.
pub struct Comparison {
    pub names: [String; 2],
    pub runs: [RunSummary; 2],
    /// Most time (in either run) first.
    pub rows: Vec<Row>,
}

/// What the header says of each run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub mpi: String,
    pub nprocs: u32,
    pub run_time_s: f64,
    pub share_in_calls: Option<f64>,
}

impl RunSummary {
    fn of(r: &Report) -> RunSummary {
        RunSummary {
            mpi: r.mpi.clone(),
            nprocs: r.nprocs,
            run_time_s: r.run_time_s,
            share_in_calls: r.share_in_calls,
        }
    }

    fn text(&self) -> String {
        format!(
            "{} ranks, {}, run {:.3} s{}",
            self.nprocs,
            self.mpi,
            self.run_time_s,
            self.share_in_calls
                .map_or(String::new(), |s| format!(", {} in calls", percent(s)))
        )
    }
}

/// Compares `a` with `b`; `names` names them (file names) in that order.
pub fn compare(a: &Report, b: &Report, names: impl IntoIterator<Item = String>) -> Comparison {
    let mut names = names.into_iter();
    let mut name = |default: &str| names.next().unwrap_or_else(|| default.to_string());
    let names = [name("A"), name("B")];
    let mut rows: Vec<Row> = a
        .sites
        .iter()
        .map(|s| Row {
            op: s.op,
            location: s.location.clone(),
            signature: s.signature.clone(),
            a: Some(Side::of(s)),
            b: None,
        })
        .collect();
    let mut unmatched: Vec<&SiteReport> = Vec::new();
    for s in &b.sites {
        match rows.iter_mut().find(|r| {
            r.b.is_none() && r.op == s.op && r.location == s.location && r.signature == s.signature
        }) {
            Some(row) => row.b = Some(Side::of(s)),
            None => unmatched.push(s),
        }
    }
    // Second pass: operation and location alone, where only one site of each run is left there.
    let mut left: BTreeMap<(Op, &str), Vec<&SiteReport>> = BTreeMap::new();
    for s in unmatched {
        left.entry((s.op, s.location.as_str())).or_default().push(s);
    }
    let mut only_b = Vec::new();
    for ((op, location), sites) in left {
        let mut candidates = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.b.is_none() && r.op == op && r.location == location)
            .map(|(i, _)| i);
        match (sites.as_slice(), candidates.next(), candidates.next()) {
            ([s], Some(i), None) => {
                rows[i].b = Some(Side::of(s));
                rows[i].signature = format!("{} / {}", rows[i].signature, s.signature);
            }
            _ => only_b.extend(sites),
        }
    }
    rows.extend(only_b.into_iter().map(|s| Row {
        op: s.op,
        location: s.location.clone(),
        signature: s.signature.clone(),
        a: None,
        b: Some(Side::of(s)),
    }));
    rows.sort_by(|x, y| y.largest().total_cmp(&x.largest()));
    Comparison {
        names,
        runs: [RunSummary::of(a), RunSummary::of(b)],
        rows,
    }
}

fn ratio_text(r: Option<f64>) -> String {
    r.map_or("-".to_string(), |r| format!("x{r:.2}"))
}

fn codelets(row: &Row) -> String {
    let name = |s: &Option<Side>| s.as_ref().map_or("-", |s| s.codelet.as_str()).to_string();
    let (a, b) = (name(&row.a), name(&row.b));
    if a == b { a } else { format!("{a} -> {b}") }
}

impl Comparison {
    /// The comparison as text, at most `top` sites.
    pub fn text(&self, top: usize) -> String {
        let mut out = String::new();
        for (label, (name, run)) in ["A", "B"].iter().zip(self.names.iter().zip(&self.runs)) {
            let _ = writeln!(out, "commtune compare: {label} = {name}: {}", run.text());
        }
        let run_ratio = (self.runs[0].run_time_s > 0.0)
            .then(|| self.runs[1].run_time_s / self.runs[0].run_time_s);
        let _ = writeln!(
            out,
            "  run time B/A: {}  (B/A below 1: B faster; ~: partly estimated)",
            ratio_text(run_ratio)
        );
        let _ = writeln!(
            out,
            "  {:>12} {:>12} {:>8} {:<28} {:<10} location",
            "time A", "time B", "B/A", "codelet A -> B", "op"
        );
        for row in self.rows.iter().take(top) {
            let time = |s: &Option<Side>| s.as_ref().map_or("-".to_string(), Side::time);
            let _ = writeln!(
                out,
                "  {:>12} {:>12} {:>8} {:<28} {:<10} {}",
                time(&row.a),
                time(&row.b),
                ratio_text(row.ratio()),
                codelets(row),
                row.op.name(),
                row.location
            );
        }
        if self.rows.len() > top {
            let _ = writeln!(out, "  ... {} more sites", self.rows.len() - top);
        }
        out
    }

    /// The comparison as a page: the runs, a chart of the sites with most time, and the
    /// sortable, searchable table of every site.
    pub fn html(&self) -> String {
        let mut body =
            String::from("<header><h1>commtune: two runs compared</h1><dl class=\"run\">");
        for (label, (name, run)) in ["A", "B"].iter().zip(self.names.iter().zip(&self.runs)) {
            let _ = write!(
                body,
                "<dt>{label}</dt><dd id=\"run-{label}\">{}: {}</dd>",
                esc(name),
                esc(&run.text())
            );
        }
        body.push_str(
            "</dl><p class=\"legend\">Times: the slowest rank's time in the site (~: partly \
             estimated). B/A below 1: faster in B.</p></header>",
        );
        body.push_str(&self.chart());
        body.push_str(
            "<section id=\"sites\" class=\"compare\"><h2>Every site</h2>\
             <input id=\"filter\" type=\"search\" placeholder=\"filter sites\" aria-label=\"filter sites\">\
             <span id=\"shown\"></span><table id=\"site-table\"><thead><tr>\
             <th>location</th><th>op</th><th data-type=\"num\">time A</th>\
             <th data-type=\"num\">time B</th><th data-type=\"num\">B/A</th><th>codelet</th>\
             <th data-type=\"num\">calls A</th><th data-type=\"num\">calls B</th>\
             <th data-type=\"num\">p50 A</th><th data-type=\"num\">p50 B</th><th>signature</th>\
             </tr></thead><tbody>\n",
        );
        for row in &self.rows {
            let num = |s: &Option<Side>, f: fn(&Side) -> f64| s.as_ref().map_or(-1.0, f);
            let text = |s: &Option<Side>, f: fn(&Side) -> String| {
                s.as_ref().map_or("-".to_string(), |s| esc(&f(s)))
            };
            let class = match row.ratio() {
                Some(r) if r < 1.0 => " class=\"faster\"",
                Some(r) if r > 1.0 => " class=\"slower\"",
                _ => "",
            };
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td class=\"op-{}\">{}</td><td data-v=\"{}\">{}</td>\
                 <td data-v=\"{}\">{}</td><td data-v=\"{}\"{class}>{}</td><td>{}</td>\
                 <td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>\
                 <td data-v=\"{}\">{}</td><td>{}</td></tr>",
                esc(&row.location),
                row.op.name(),
                row.op.name(),
                num(&row.a, |s| s.total_s),
                text(&row.a, Side::time),
                num(&row.b, |s| s.total_s),
                text(&row.b, Side::time),
                row.ratio().unwrap_or(-1.0),
                ratio_text(row.ratio()),
                esc(&codelets(row)),
                num(&row.a, |s| s.calls as f64),
                text(&row.a, |s| s.calls.to_string()),
                num(&row.b, |s| s.calls as f64),
                text(&row.b, |s| s.calls.to_string()),
                num(&row.a, |s| s.p50_us),
                text(&row.a, |s| micros(s.p50_us)),
                num(&row.b, |s| s.p50_us),
                text(&row.b, |s| micros(s.p50_us)),
                esc(&row.signature),
            );
        }
        body.push_str("</tbody></table></section>");
        page("commtune: two runs compared", &body)
    }

    /// Time of A (grey) and B (the operation's colour) of the sites with most time.
    fn chart(&self) -> String {
        use crate::html::svg::{Bar, bars, op_colour};
        let mut list = Vec::new();
        for row in self.rows.iter().take(15) {
            for (label, side, colour) in
                [("A", &row.a, "#bbbbbb"), ("B", &row.b, op_colour(row.op))]
            {
                let value = side.as_ref().map_or(0.0, |s| s.total_s * 1e6);
                list.push(Bar {
                    label: format!("{label}: {} {}", row.op.name(), row.location),
                    value,
                    colour,
                    error: 0.0,
                    title: format!(
                        "{label}: {}",
                        side.as_ref()
                            .map_or("not in this run".to_string(), Side::time)
                    ),
                    marked: false,
                });
            }
        }
        format!(
            "<section id=\"chart\"><h2>Sites with most time, A above B</h2>{}</section>",
            bars("compare", &list, micros)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(sites: &[(&str, &str, f64, &str)]) -> Report {
        let json = serde_json::json!({
            "version": 3, "mpi": "Test MPI", "nprocs": 2, "ranks_reporting": 2,
            "run_time_s": 1.0,
            "sites": sites.iter().map(|(loc, sig, t, codelet)| serde_json::json!({
                "op": "allreduce", "location": loc, "file": null, "line": null,
                "function": null, "object": "/bin/a", "address": "0x1", "signature": sig,
                "calls": 10, "bytes": 80,
                "time": {"total_s": t, "min_us": 1.0, "p50_us": 2.0, "p90_us": 3.0,
                         "p99_us": 4.0, "max_us": 5.0, "share": t},
                "codelet": codelet, "codelets": {},
                "ranks": {"count": 2, "calls": {"min": 10, "max": 10},
                          "bytes": {"min": 80, "max": 80}, "time_s": {"min": t, "max": t}}
            })).collect::<Vec<_>>()
        });
        serde_json::from_value(json).expect("a report")
    }

    #[test]
    fn sites_match_by_signature_then_location() {
        let a = report(&[
            ("a.c:1", "count=1", 0.4, "native"),
            ("a.c:2", "count=8 comm=4", 0.2, "native"),
            ("a.c:3", "count=1", 0.1, "native"),
        ]);
        let b = report(&[
            ("a.c:1", "count=1", 0.1, "ring"),
            ("a.c:2", "count=8 comm=2", 0.3, "native"),
            ("b.c:9", "count=1", 0.05, "native"),
        ]);
        let c = compare(
            &a,
            &b,
            ["before.json".to_string(), "after.json".to_string()],
        );
        let got: Vec<(&str, Option<String>)> = c
            .rows
            .iter()
            .map(|r| (r.location.as_str(), r.ratio().map(|x| format!("{x:.2}"))))
            .collect();
        assert_eq!(
            got,
            [
                ("a.c:1", Some("0.25".into())),
                ("a.c:2", Some("1.50".into())),
                ("a.c:3", None),
                ("b.c:9", None)
            ]
        );
        assert_eq!(c.rows[1].signature, "count=8 comm=4 / count=8 comm=2");
        let text = c.text(10);
        assert!(text.contains("A = before.json"), "{text}");
        assert!(text.contains("native -> ring"), "{text}");
        assert!(text.contains("x0.25"), "{text}");
        let html = c.html();
        assert!(html.contains("class=\"faster\">x0.25"), "{html}");
        assert!(html.contains("class=\"slower\">x1.50"));
        assert_eq!(html.matches("<tr><td>").count(), 4);
    }
}
