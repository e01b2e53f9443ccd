//! `commtune report --html`: the report as one self-contained page (no network needed to view
//! it): inline SVG plots (`svg`, `timeline`), a stylesheet and a small script that sorts and
//! filters the site table and opens a site's details from the address (`#site-3`). Every
//! figure of the JSON report is on it; those partly estimated keep the `~` and interval of the
//! text summary.

pub(crate) mod svg;
mod timeline;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::text::{bytes, micros, percent, saved, share};
use crate::{Op, Report, SiteReport, TuningData};
use svg::{Bar, bars, codelet_colour, op_colour};

/// Sites in the heat map and the top-sites chart; the table and the details have every site.
const TOP_SITES: usize = 30;
/// Columns of the per-rank heat map at most: more ranks are grouped, each cell their largest.
const HEAT_COLUMNS: usize = 256;
/// Ranks drawn one bar each in a site's details at most.
const RANK_BARS: usize = 64;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page around `body`.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head>\n<body>\n{body}\n\
         <script>{SCRIPT}</script>\n</body></html>\n",
        esc(title)
    )
}

/// The report as a page.
pub fn html(report: &Report) -> String {
    let mut body = String::new();
    header(&mut body, report);
    overview(&mut body, report);
    heat(&mut body, report);
    table(&mut body, report);
    details(&mut body, report);
    page(&format!("commtune report: {}", report.mpi), &body)
}

fn header(out: &mut String, report: &Report) {
    let mut hosts: BTreeMap<&str, u32> = BTreeMap::new();
    for r in &report.ranks {
        *hosts.entry(r.host.as_str()).or_default() += 1;
    }
    let hosts = if hosts.is_empty() {
        esc("not recorded (report version < 3)")
    } else {
        hosts
            .iter()
            .map(|(h, n)| format!("{} ({n} rank{})", esc(h), if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let in_calls = report.share_in_calls.unwrap_or_else(|| {
        report
            .sites
            .iter()
            .map(|s| s.time.share)
            .sum::<f64>()
            .min(1.0)
    });
    let _ = write!(
        out,
        "<header><h1>commtune report</h1><dl class=\"run\">\
         <dt>MPI</dt><dd id=\"mpi\">{}</dd>\
         <dt>ranks</dt><dd id=\"ranks\">{}{}</dd>\
         <dt>hosts</dt><dd id=\"hosts\">{hosts}</dd>\
         <dt>wall time</dt><dd id=\"wall\">{:.3} s (the longest rank, MPI_Init to MPI_Finalize)</dd>\
         <dt>share in MPI</dt><dd id=\"share\">{} of the ranks' time in intercepted calls \
         (an upper bound: halo episodes span the calls between their posts and completion)</dd>\
         <dt>sites</dt><dd>{}</dd><dt>report format</dt><dd>version {}</dd></dl>",
        esc(&report.mpi),
        report.nprocs,
        if report.ranks_reporting < report.nprocs {
            format!(" (data of {} only)", report.ranks_reporting)
        } else {
            String::new()
        },
        report.run_time_s,
        percent(in_calls),
        report.sites.len(),
        report.version
    );
    if let Some(a) = report.aborted {
        let _ = write!(
            out,
            "<p class=\"warn\" id=\"aborted\">Partial report: rank {} called MPI_Abort (error code \
             {}); this is what that rank had measured.</p>",
            a.rank, a.code
        );
    }
    out.push_str(
        "<p class=\"legend\">~: partly estimated (tuned calls in production are timed one in \
         eight), \u{b1} the 95% interval. Times of a site: the slowest rank's.</p></header>\n",
    );
}

fn overview(out: &mut String, report: &Report) {
    let mut per_op: BTreeMap<Op, (f64, u64)> = BTreeMap::new();
    for s in &report.sites {
        let e = per_op.entry(s.op).or_default();
        e.0 += s.time.share;
        e.1 += 1;
    }
    let op_bars: Vec<Bar> = per_op
        .iter()
        .map(|(op, (share, n))| Bar {
            label: op.name().to_string(),
            value: *share,
            colour: op_colour(*op),
            error: 0.0,
            title: format!("{}: {} of the run in {n} sites", op.name(), percent(*share)),
            marked: false,
        })
        .collect();
    let top: Vec<Bar> = report
        .sites
        .iter()
        .take(TOP_SITES)
        .map(|s| Bar {
            label: s.location.clone(),
            value: s.time.share,
            colour: op_colour(s.op),
            error: s.time.share_error,
            title: format!("{} {}: {}", s.op.name(), s.location, share(s)),
            marked: false,
        })
        .collect();
    let _ = writeln!(
        out,
        "<section id=\"overview\"><h2>Where the time goes</h2>\
         <h3>Per operation</h3>{}\
         <h3>Per message size</h3><p class=\"note\">Bytes per call of each site (the vector of \
         an allreduce, the received blocks of an alltoall or allgatherv, a halo episode's \
         messages), the sites' shares added per size.</p>{}\
         <h3>Top sites</h3>{}</section>",
        bars("ops", &op_bars, percent),
        sizes(report),
        bars("top", &top, percent)
    );
}

/// Share of the run per size of call (bytes per call), by operation.
fn sizes(report: &Report) -> String {
    const LIMITS: [(u64, &str); 6] = [
        (64, "up to 64 B"),
        (1 << 10, "65 B - 1 KiB"),
        (16 << 10, "1 - 16 KiB"),
        (256 << 10, "16 - 256 KiB"),
        (4 << 20, "256 KiB - 4 MiB"),
        (u64::MAX, "over 4 MiB"),
    ];
    let mut cells: BTreeMap<(usize, Op), f64> = BTreeMap::new();
    for s in &report.sites {
        let per_call = s.bytes / s.calls.max(1);
        let bucket = LIMITS.iter().position(|(l, _)| per_call <= *l).unwrap_or(5);
        *cells.entry((bucket, s.op)).or_default() += s.time.share;
    }
    let bars_: Vec<Bar> = cells
        .iter()
        .map(|((bucket, op), share)| Bar {
            label: format!("{} {}", LIMITS[*bucket].1, op.name()),
            value: *share,
            colour: op_colour(*op),
            error: 0.0,
            title: format!(
                "{} calls of {}: {}",
                op.name(),
                LIMITS[*bucket].1,
                percent(*share)
            ),
            marked: false,
        })
        .collect();
    bars("sizes", &bars_, percent)
}

fn heat(out: &mut String, report: &Report) {
    if report.ranks.is_empty() {
        out.push_str(
            "<section id=\"imbalance\"><h2>Imbalance across ranks</h2><p>Per-rank times are in \
             reports of version 3 on; this one has each site's fastest and slowest rank only \
             (in the table).</p></section>\n",
        );
        return;
    }
    let n = report.ranks.len();
    let group = n.div_ceil(HEAT_COLUMNS);
    let columns: Vec<String> = (0..n)
        .step_by(group)
        .map(|first| {
            let last = (first + group).min(n) - 1;
            let (a, b) = (report.ranks[first].rank, report.ranks[last].rank);
            if a == b {
                format!("rank {a} ({})", report.ranks[first].host)
            } else {
                format!("ranks {a}-{b} (largest)")
            }
        })
        .collect();
    let rows: Vec<(String, Vec<Option<f64>>)> = report
        .sites
        .iter()
        .take(TOP_SITES)
        .map(|s| {
            let cells = s
                .ranks
                .time_by_rank_s
                .chunks(group)
                .map(|c| c.iter().flatten().copied().reduce(f64::max))
                .collect();
            (format!("{} {}", s.op.name(), s.location), cells)
        })
        .collect();
    let _ = writeln!(
        out,
        "<section id=\"imbalance\"><h2>Imbalance across ranks</h2><p class=\"note\">Each rank's \
         time in the {} sites with most time (rows), per rank (columns). A light cell in a dark \
         row is a rank that spent less there: usually one that arrived late and waited less, \
         while the others waited for it.</p>{}</section>",
        rows.len(),
        svg::heat_map(&rows, &columns)
    );
}

/// Min, median and max of a site's per-rank times (the median only from version 3).
fn spread(s: &SiteReport) -> (f64, Option<f64>, f64) {
    let mut times: Vec<f64> = s.ranks.time_by_rank_s.iter().flatten().copied().collect();
    times.sort_by(f64::total_cmp);
    let median = (!times.is_empty()).then(|| {
        let m = times.len() / 2;
        if times.len() % 2 == 1 {
            times[m]
        } else {
            (times[m - 1] + times[m]) / 2.0
        }
    });
    (s.ranks.time_s.min, median, s.ranks.time_s.max)
}

fn table(out: &mut String, report: &Report) {
    out.push_str(
        "<section id=\"sites\"><h2>Every site</h2><p class=\"note\">Click a column to sort, type \
         to filter (any text of the row: file, function, operation, codelet, phase), click a \
         location for its details.</p>\
         <input id=\"filter\" type=\"search\" placeholder=\"filter sites\" aria-label=\"filter sites\">\
         <span id=\"shown\"></span>\
         <table id=\"site-table\"><thead><tr>\
         <th data-type=\"num\">#</th><th>location</th><th>op</th>\
         <th data-type=\"num\">share</th><th data-type=\"num\">time</th>\
         <th data-type=\"num\">calls</th><th data-type=\"num\">bytes/call</th>\
         <th data-type=\"num\">p50</th><th data-type=\"num\">p99</th>\
         <th data-type=\"num\">min rank</th><th data-type=\"num\">median rank</th>\
         <th data-type=\"num\">max rank</th><th>codelet</th><th>tuning</th>\
         <th data-type=\"num\">saved</th></tr></thead><tbody>\n",
    );
    for (i, s) in report.sites.iter().enumerate() {
        let (min, median, max) = spread(s);
        let untimed = s.time.timed_calls == Some(0);
        let q = |us: f64| {
            if untimed { "-".to_string() } else { micros(us) }
        };
        let per_call = s.bytes / s.calls.max(1);
        let (phase, saved_text, saved_v) = match &s.tuning {
            Some(t) => (
                format!("{} {}", t.phase, t.winner.as_deref().unwrap_or("")),
                saved(t),
                t.saving.as_ref().map_or(0.0, |v| v.saved_s),
            ),
            None => ("-".to_string(), "-".to_string(), 0.0),
        };
        let _ = writeln!(
            out,
            "<tr id=\"row-{i}\"><td data-v=\"{i}\">{}</td><td><a href=\"#site-{i}\">{}</a></td>\
             <td class=\"op-{}\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>\
             <td data-v=\"{}\">{}</td><td data-v=\"{per_call}\">{}</td>\
             <td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>\
             <td data-v=\"{min}\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{max}\">{}</td>\
             <td>{}</td><td>{}</td><td data-v=\"{saved_v}\">{}</td></tr>",
            i + 1,
            esc(&s.location),
            s.op.name(),
            s.op.name(),
            s.time.share,
            esc(&share(s)),
            s.time.total_s,
            esc(&micros(s.time.total_s * 1e6)),
            s.calls,
            s.calls,
            esc(&bytes(per_call)),
            s.time.p50_us,
            esc(&q(s.time.p50_us)),
            s.time.p99_us,
            esc(&q(s.time.p99_us)),
            esc(&micros(min * 1e6)),
            median.unwrap_or(-1.0),
            median.map_or("-".to_string(), |m| esc(&micros(m * 1e6))),
            esc(&micros(max * 1e6)),
            esc(&s.codelet),
            esc(&phase),
            esc(&saved_text),
        );
    }
    out.push_str("</tbody></table></section>\n");
}

/// Sites whose searches were drawn already: calls of one operation and size from several lines
/// are tuned together (one search), and a real application has many such lines.
type Drawn<'a> = Vec<(usize, &'a TuningData)>;

fn details(out: &mut String, report: &Report) {
    out.push_str("<section id=\"details\"><h2>Sites in detail</h2>\n");
    let mut drawn: Drawn = Vec::new();
    for (i, s) in report.sites.iter().enumerate() {
        let _ = write!(
            out,
            "<details class=\"site\" id=\"site-{i}\"><summary>{}. {} <span class=\"op-{}\">{}</span> \
             {}</summary><div class=\"body\">",
            i + 1,
            esc(&s.location),
            s.op.name(),
            s.op.name(),
            esc(&share(s))
        );
        site_detail(out, report, s, i, &mut drawn);
        out.push_str("</div></details>\n");
    }
    out.push_str("</section>\n");
}

fn site_detail<'a>(
    out: &mut String,
    report: &Report,
    s: &'a SiteReport,
    index: usize,
    drawn: &mut Drawn<'a>,
) {
    let _ = write!(
        out,
        "<dl><dt>signature</dt><dd>{}</dd><dt>where</dt><dd>{} {}</dd>\
         <dt>calls</dt><dd>{} per rank ({} to {} over {} ranks), {} timed in all</dd>\
         <dt>bytes</dt><dd>{} per rank, {} per call</dd>\
         <dt>time</dt><dd>{} on the slowest rank{}</dd>",
        esc(&s.signature),
        esc(&s.object),
        esc(&s.address),
        s.calls,
        s.ranks.calls.min,
        s.ranks.calls.max,
        s.ranks.count,
        s.time
            .timed_calls
            .map_or("(not recorded)".to_string(), |n| n.to_string()),
        esc(&bytes(s.bytes)),
        esc(&bytes(s.bytes / s.calls.max(1))),
        esc(&micros(s.time.total_s * 1e6)),
        if s.time.estimated_s > 0.0 {
            format!(
                ", of which {} estimated \u{b1}{}",
                esc(&micros(s.time.estimated_s * 1e6)),
                esc(&micros(s.time.error_s * 1e6))
            )
        } else {
            String::new()
        }
    );
    if let Some(p) = s.period_us {
        let _ = write!(
            out,
            "<dt>period</dt><dd>{} from one completion of the episode to the next</dd>",
            esc(&micros(p))
        );
    }
    let codelets: Vec<String> = s
        .codelets
        .iter()
        .map(|(name, n)| format!("{} {n}", esc(name)))
        .collect();
    let _ = write!(
        out,
        "<dt>calls per codelet</dt><dd>{}</dd></dl>",
        codelets.join(", ")
    );
    if s.time.timed_calls != Some(0) {
        let q = [
            s.time.min_us,
            s.time.p50_us,
            s.time.p90_us,
            s.time.p99_us,
            s.time.max_us,
        ];
        let _ = write!(
            out,
            "<h4>One call's duration (all timed calls of all ranks)</h4>{}",
            svg::distribution(q, micros)
        );
    }
    ranks_detail(out, report, s);
    if let Some(t) = &s.tuning {
        tuning_detail(out, t);
        let same =
            |d: &&(usize, &TuningData)| d.1.codelets == t.codelets && d.1.timeline == t.timeline;
        match drawn.iter().find(same) {
            Some((first, _)) if !t.timeline.is_empty() => {
                let _ = write!(
                    out,
                    "<p class=\"note\">Its search is drawn with <a href=\"#site-{first}\">site \
                     {}</a>: the same search (calls of one operation and size are tuned \
                     together, whichever line they come from).</p>",
                    first + 1
                );
            }
            _ => {
                search_detail(out, s, t);
                drawn.push((index, t));
            }
        }
    }
    if !s.rank_signatures.is_empty() {
        out.push_str(
            "<h4>Messages of the episode per rank</h4><table class=\"messages\"><tr><th>rank</th>\
             <th>messages in posting order (peer, tag, count \u{d7} datatype)</th></tr>",
        );
        for r in &s.rank_signatures {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                r.rank,
                esc(&r.signature)
            );
        }
        out.push_str("</table>");
        if (s.rank_signatures.len() as u32) < s.ranks.count {
            let _ = write!(
                out,
                "<p class=\"note\">The first {} of {} ranks.</p>",
                s.rank_signatures.len(),
                s.ranks.count
            );
        }
    }
    if !s.notes.is_empty() {
        out.push_str("<h4>Notes</h4><ul class=\"notes\">");
        for n in &s.notes {
            let _ = write!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul>");
    }
}

fn ranks_detail(out: &mut String, report: &Report, s: &SiteReport) {
    let (min, median, max) = spread(s);
    let _ = write!(
        out,
        "<h4>Time per rank</h4><p>min {}, median {}, max {}</p>",
        esc(&micros(min * 1e6)),
        median.map_or("-".to_string(), |m| esc(&micros(m * 1e6))),
        esc(&micros(max * 1e6))
    );
    let times = &s.ranks.time_by_rank_s;
    if times.is_empty() || times.len() > RANK_BARS {
        return;
    }
    let per_rank: Vec<Bar> = report
        .ranks
        .iter()
        .zip(times)
        .map(|(r, t)| Bar {
            label: format!("rank {} ({})", r.rank, r.host),
            value: t.unwrap_or(0.0) * 1e6,
            colour: op_colour(s.op),
            error: 0.0,
            title: match t {
                Some(t) => format!("rank {}: {}", r.rank, micros(t * 1e6)),
                None => format!("rank {}: no calls", r.rank),
            },
            marked: false,
        })
        .collect();
    out.push_str(&bars("ranks", &per_rank, micros));
}

fn tuning_detail(out: &mut String, t: &TuningData) {
    let _ = write!(
        out,
        "<h4>Tuning</h4><dl><dt>phase</dt><dd>{}</dd><dt>winner</dt><dd>{}</dd>\
         <dt>searched</dt><dd>{} calls in {} search{}, {} rounds in the last</dd>\
         <dt>saved in this run</dt><dd class=\"saved\">{}</dd>",
        esc(&t.phase),
        esc(t.winner.as_deref().unwrap_or("-")),
        t.search_instances,
        t.searches,
        if t.searches == 1 { "" } else { "es" },
        t.rounds,
        esc(&saved(t))
    );
    if let Some(v) = &t.saving {
        let _ = write!(
            out,
            "<dt>how</dt><dd>{} {} per call {}, {} {} per production call, over {} \
             production calls (mean over ranks); 95% interval {} to {}</dd>",
            esc(&v.replaced),
            esc(&micros(v.replaced_us)),
            v.replaced_in.describe(),
            esc(t.winner.as_deref().unwrap_or("the winner")),
            esc(&micros(v.winner_us)),
            v.calls,
            esc(&micros(v.low_s * 1e6)),
            esc(&micros(v.high_s * 1e6))
        );
    }
    if let Some(p) = &t.prediction {
        let _ = write!(out, "<dt>history</dt><dd>{}</dd>", esc(&p.describe()));
    }
    if let Some(reason) = &t.reason {
        let _ = write!(out, "<dt>why</dt><dd>{}</dd>", esc(reason));
    }
    out.push_str("</dl>");
}

/// A search's estimates and timeline.
fn search_detail(out: &mut String, s: &SiteReport, t: &TuningData) {
    if !t.codelets.is_empty() {
        let estimates: Vec<Bar> = t
            .codelets
            .iter()
            .map(|c| Bar {
                label: c.name.clone(),
                value: c.estimate_us,
                colour: codelet_colour(&c.name),
                error: c.error_us,
                title: format!(
                    "{}: {} \u{b1}{}",
                    c.name,
                    micros(c.estimate_us),
                    micros(c.error_us)
                ),
                marked: t.winner.as_deref() == Some(c.name.as_str()),
            })
            .collect();
        let whose = if s.op == Op::Halo {
            "the first rank reporting: halo episodes are tuned per rank"
        } else {
            "the slowest rank's"
        };
        let _ = write!(
            out,
            "<h4>Estimates of the last search ({whose}, \u{b1} standard error; the winner \
             outlined)</h4>{}",
            bars("estimates", &estimates, micros)
        );
    }
    if !t.timeline.is_empty() {
        let mut names: Vec<&str> = t
            .timeline
            .iter()
            .filter_map(|e| match e {
                crate::Event::Sample { codelet, .. } => Some(codelet.as_str()),
                _ => None,
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        let legend: Vec<String> = names
            .iter()
            .map(|n| {
                format!(
                    "<span class=\"key\" style=\"background:{}\"></span>{}",
                    codelet_colour(n),
                    esc(n)
                )
            })
            .collect();
        let _ = write!(
            out,
            "<h4>Timeline (samples as timed on the first rank reporting)</h4><p class=\"note\">\
             Calls are counted per search: calls of one operation and size from several lines \
             are tuned together and counted together, so the numbers can exceed this site's \
             calls.</p>\
             <p class=\"legend\"><span class=\"key warmup\"></span>warm-up \
             <span class=\"key search\"></span>search <span class=\"key production\"></span>\
             production \u{25bc} drift check (red: search reopened) | {}</p>{}",
            legend.join(" "),
            timeline::timeline(&t.timeline, s.calls)
        );
        if t.timeline_dropped > 0 {
            let _ = write!(
                out,
                "<p class=\"note\">{} later events not kept.</p>",
                t.timeline_dropped
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
