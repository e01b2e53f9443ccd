//! A tuned key's timeline as SVG: what ran at each call (warm-up, search with each sample,
//! decision, production, drift checks).

use std::fmt::Write;

use super::esc;
use super::svg::{LogAxis, codelet_colour};
use crate::Event;
use crate::text::micros;

/// One stretch of calls in one phase.
#[derive(Debug, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    pub first: u64,
    pub last: u64,
    pub label: String,
}

/// The phases of a key called `calls` times, from its events.
pub fn phases(events: &[Event], calls: u64) -> Vec<Phase> {
    let end = events.iter().map(Event::call).max().unwrap_or(0).max(calls);
    let mut out = Vec::new();
    let mut from = 1;
    let mut current: (&'static str, String) = ("warmup", "warm-up".to_string());
    let mut close =
        |out: &mut Vec<Phase>, to: u64, next: (&'static str, String), from: &mut u64| {
            let cur = std::mem::replace(&mut current, next);
            if to >= *from {
                out.push(Phase {
                    name: cur.0,
                    first: *from,
                    last: to,
                    label: cur.1,
                });
            }
            *from = to + 1;
        };
    for e in events {
        match e {
            Event::Search { call, search } => close(
                &mut out,
                call - 1,
                ("search", format!("search {search}")),
                &mut from,
            ),
            Event::Decision { call, winner } => close(
                &mut out,
                *call,
                ("production", format!("production: {winner}")),
                &mut from,
            ),
            Event::Sample { .. } | Event::Drift { .. } => {}
        }
    }
    close(&mut out, end, ("", String::new()), &mut from);
    out
}

const W: f64 = 720.0;
const H: f64 = 150.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 14.0;
const PLOT_H: f64 = 110.0;

/// The timeline of a key called `calls` times; a second panel zooms on the searches when they
/// take less than a third of the run.
pub fn timeline(events: &[Event], calls: u64) -> String {
    let phases = phases(events, calls);
    let end = phases.last().map_or(1, |p| p.last).max(1);
    let mut out = panel(events, &phases, 1, end, "every call");
    let searched: Vec<&Phase> = phases.iter().filter(|p| p.name == "search").collect();
    if let (Some(first), Some(last)) = (searched.first(), searched.last())
        && (last.last - first.first + 1) * 3 < end
    {
        out.push_str(&panel(
            events,
            &phases,
            first.first,
            last.last,
            "the search calls",
        ));
    }
    out
}

fn panel(events: &[Event], phases: &[Phase], from: u64, to: u64, what: &str) -> String {
    let span = (to - from + 1) as f64;
    let x = |call: u64| LEFT + (call.saturating_sub(from)) as f64 / span * (W - LEFT - 10.0);
    let width =
        |first: u64, last: u64| ((last - first + 1) as f64 / span * (W - LEFT - 10.0)).max(1.0);
    let samples: Vec<(u64, &str, f64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Sample { call, codelet, us } if (from..=to).contains(call) => {
                Some((*call, codelet.as_str(), *us))
            }
            _ => None,
        })
        .collect();
    let lo = samples.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    let hi = samples.iter().map(|s| s.2).fold(0.0, f64::max);
    let axis = if samples.is_empty() {
        LogAxis::new(1.0, 10.0, 0.0, PLOT_H)
    } else {
        LogAxis::new(lo * 0.8, hi * 1.25, 0.0, PLOT_H)
    };
    let y = |us: f64| TOP + PLOT_H - axis.at(us);
    let mut s = format!(
        r#"<svg class="plot timeline" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img"><title>{}</title>"#,
        esc(&format!("calls {from} to {to}: {what}"))
    );
    for p in phases.iter().filter(|p| p.last >= from && p.first <= to) {
        let (first, last) = (p.first.max(from), p.last.min(to));
        let _ = write!(
            s,
            r#"<rect class="phase {}" x="{:.1}" y="{TOP}" width="{:.1}" height="{PLOT_H}"><title>{}: calls {}..{}</title></rect>"#,
            p.name,
            x(first),
            width(first, last),
            esc(&p.label),
            p.first,
            p.last
        );
    }
    for d in axis.ticks() {
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ccc"/><text class="small" x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - 10.0,
            LEFT - 4.0,
            y(d) + 3.0,
            esc(&micros(d)),
            yy = y(d),
        );
    }
    for (call, codelet, us) in &samples {
        let _ = write!(
            s,
            r#"<circle class="sample" cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"><title>call {call}: {} {}</title></circle>"#,
            x(*call) + width(*call, *call) / 2.0,
            y(*us),
            codelet_colour(codelet),
            esc(codelet),
            esc(&micros(*us))
        );
    }
    for e in events {
        match e {
            Event::Decision { call, winner } if (from..=to).contains(call) => {
                let xx = x(*call) + width(*call, *call);
                let _ = write!(
                    s,
                    r##"<line class="decision" x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#000" stroke-dasharray="4 2"/><text class="small" x="{:.1}" y="{}">decided: {}</text>"##,
                    TOP + PLOT_H,
                    xx + 3.0,
                    TOP + 10.0,
                    esc(winner)
                );
            }
            Event::Drift {
                call,
                ratio,
                reopened,
            } if (from..=to).contains(call) => {
                let xx = x(*call);
                let fill = if *reopened { "#d62728" } else { "#777" };
                let _ = write!(
                    s,
                    r#"<path class="drift" d="M{:.1},{} l4,-7 l-8,0 z" fill="{fill}"><title>drift check at call {call}: ratio {ratio:.2}{}</title></path>"#,
                    xx,
                    TOP,
                    if *reopened { ", search reopened" } else { "" }
                );
            }
            _ => {}
        }
    }
    let _ = write!(
        s,
        r#"<text class="small" x="{LEFT}" y="{}">call {from}</text><text class="small" x="{}" y="{}" text-anchor="end">call {to} ({})</text></svg>"#,
        H - 6.0,
        W - 10.0,
        H - 6.0,
        esc(what)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(call: u64, codelet: &str, us: f64) -> Event {
        Event::Sample {
            call,
            codelet: codelet.into(),
            us,
        }
    }

    fn events() -> Vec<Event> {
        vec![
            Event::Search { call: 4, search: 1 },
            sample(4, "native", 10.0),
            sample(5, "ring", 5.0),
            Event::Decision {
                call: 5,
                winner: "ring".into(),
            },
            Event::Drift {
                call: 261,
                ratio: 2.0,
                reopened: true,
            },
            Event::Search {
                call: 261,
                search: 2,
            },
            sample(261, "native", 10.0),
            Event::Decision {
                call: 262,
                winner: "native".into(),
            },
        ]
    }

    #[test]
    fn phases_follow_the_events() {
        let got: Vec<(&str, u64, u64)> = phases(&events(), 1000)
            .iter()
            .map(|p| (p.name, p.first, p.last))
            .collect();
        assert_eq!(
            got,
            [
                ("warmup", 1, 3),
                ("search", 4, 5),
                ("production", 6, 260),
                ("search", 261, 262),
                ("production", 263, 1000)
            ]
        );
        assert_eq!(phases(&[], 7).len(), 1, "never searched: all warm-up");
    }

    #[test]
    fn timeline_draws_samples_decisions_and_drift() {
        let svg = timeline(&events(), 1000);
        // Every sample, in both panels: the searches take far less than a third of the run.
        assert_eq!(svg.matches(r#"class="plot timeline""#).count(), 2);
        assert_eq!(svg.matches(r#"class="sample""#).count(), 6);
        assert_eq!(svg.matches(r#"class="decision""#).count(), 4);
        assert!(svg.contains("ratio 2.00, search reopened"));
        assert!(svg.contains("production: ring: calls 6..260"));
    }
}
