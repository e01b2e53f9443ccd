//! The page's plots as inline SVG, drawn here rather than by a plotting crate: they are bars,
//! cells and marks on one axis each, a few lines apiece, and so they render with scripts
//! disabled, weigh a few kilobytes for hundreds of sites, and can be checked in unit tests.

use std::fmt::Write;

use super::esc;

/// Colours of the operations, and of codelets by name (a fixed palette, the same name always
/// the same colour across sites and pages).
pub fn op_colour(op: crate::Op) -> &'static str {
    match op {
        crate::Op::Allreduce => "#4e79a7",
        crate::Op::Alltoall => "#f28e2b",
        crate::Op::Allgatherv => "#59a14f",
        crate::Op::Halo => "#b07aa1",
    }
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

pub fn codelet_colour(name: &str) -> &'static str {
    if name == "native" {
        return "#555555";
    }
    // FNV-1a: stable across runs and builds, unlike the standard hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    PALETTE[(hash % PALETTE.len() as u64) as usize]
}

/// One bar of a horizontal bar chart: its label, value, colour, optional error half-width and
/// the text of its tooltip.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub colour: &'static str,
    pub error: f64,
    pub title: String,
    /// Drawn with a dark outline (the winner of a search).
    pub marked: bool,
}

const LABEL_W: f64 = 260.0;
const PLOT_W: f64 = 420.0;
const ROW_H: f64 = 18.0;

/// Horizontal bars with their values written at the end by `format`.
pub fn bars(class: &str, bars: &[Bar], format: impl Fn(f64) -> String) -> String {
    let max = bars
        .iter()
        .map(|b| b.value + b.error)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let height = ROW_H * bars.len() as f64 + 4.0;
    let width = LABEL_W + PLOT_W + 90.0;
    let mut s = format!(
        r#"<svg class="plot {class}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">"#
    );
    for (i, b) in bars.iter().enumerate() {
        let y = i as f64 * ROW_H + 2.0;
        let w = (b.value / max * PLOT_W).max(0.5);
        let stroke = if b.marked {
            r##" stroke="#000" stroke-width="1.5""##
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<g><title>{}</title><text x="{}" y="{}" text-anchor="end">{}</text><rect x="{LABEL_W}" y="{y}" width="{w:.1}" height="{}" fill="{}"{stroke}/>"#,
            esc(&b.title),
            LABEL_W - 6.0,
            y + 12.5,
            esc(&truncate(&b.label, 40)),
            ROW_H - 4.0,
            b.colour,
        );
        if b.error > 0.0 {
            let lo = ((b.value - b.error) / max * PLOT_W).max(0.0) + LABEL_W;
            let hi = (b.value + b.error) / max * PLOT_W + LABEL_W;
            let mid = y + (ROW_H - 4.0) / 2.0;
            let _ = write!(
                s,
                r##"<line class="err" x1="{lo:.1}" x2="{hi:.1}" y1="{mid}" y2="{mid}" stroke="#000"/>"##
            );
        }
        let end = LABEL_W + (b.value + b.error) / max * PLOT_W + 4.0;
        let _ = write!(
            s,
            r#"<text x="{end:.1}" y="{}">{}</text></g>"#,
            y + 12.5,
            esc(&format(b.value))
        );
    }
    s.push_str("</svg>");
    s
}

/// A logarithmic axis from `lo` to `hi` mapped onto `[x0, x0 + width]`.
pub struct LogAxis {
    lo: f64,
    hi: f64,
    x0: f64,
    width: f64,
}

impl LogAxis {
    pub fn new(lo: f64, hi: f64, x0: f64, width: f64) -> LogAxis {
        let lo = lo.max(1e-3);
        let hi = hi.max(lo * 10.0);
        LogAxis { lo, hi, x0, width }
    }

    pub fn at(&self, v: f64) -> f64 {
        let v = v.clamp(self.lo, self.hi);
        self.x0 + (v / self.lo).ln() / (self.hi / self.lo).ln() * self.width
    }

    /// Values for ticks within the axis: powers of ten, and 2 and 5 times them when the axis
    /// spans fewer than three of those.
    pub fn ticks(&self) -> Vec<f64> {
        let first = self.lo.log10().floor() as i32;
        let last = self.hi.log10().ceil() as i32;
        let steps: &[f64] = if last - first < 3 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        (first..=last)
            .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| (self.lo..=self.hi).contains(v))
            .collect()
    }
}

/// A call's time distribution: min, p50, p90, p99 and max on a log axis of microseconds.
pub fn distribution(q: [f64; 5], format: impl Fn(f64) -> String) -> String {
    let (w, h) = (520.0, 54.0);
    let axis = LogAxis::new(q[0] * 0.8, q[4] * 1.25, 20.0, w - 40.0);
    let mut s = format!(
        r#"<svg class="plot dist" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">"#
    );
    let (min, p50, p90, p99, max) = (
        axis.at(q[0]),
        axis.at(q[1]),
        axis.at(q[2]),
        axis.at(q[3]),
        axis.at(q[4]),
    );
    let _ = write!(
        s,
        r##"<line x1="{min:.1}" x2="{max:.1}" y1="16" y2="16" stroke="#333"/><rect x="{p50:.1}" y="8" width="{:.1}" height="16" fill="#9ecae1" stroke="#333"><title>p50 to p90</title></rect><rect x="{p90:.1}" y="8" width="{:.1}" height="16" fill="#deebf7" stroke="#333"><title>p90 to p99</title></rect>"##,
        (p90 - p50).max(1.0),
        (p99 - p90).max(1.0),
    );
    for (x, name, v) in [
        (min, "min", q[0]),
        (p50, "p50", q[1]),
        (p99, "p99", q[3]),
        (max, "max", q[4]),
    ] {
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="6" y2="26" stroke="#000"/><text class="small" x="{x:.1}" y="{}" text-anchor="middle">{name} {}</text>"##,
            if name == "p50" || name == "max" {
                48
            } else {
                38
            },
            esc(&format(v))
        );
    }
    s.push_str("</svg>");
    s
}

/// A heat map: one row per labelled series, one cell per column, shaded by the value over its
/// row's largest (imbalance shows as light cells beside dark ones).
pub fn heat_map(rows: &[(String, Vec<Option<f64>>)], columns: &[String]) -> String {
    let cols = columns.len().max(1);
    let cell_w = (640.0 / cols as f64).clamp(2.0, 28.0);
    let (label_w, cell_h) = (260.0, 14.0);
    let w = label_w + cell_w * cols as f64 + 10.0;
    let h = cell_h * rows.len() as f64 + 20.0;
    let mut s = format!(
        r#"<svg class="plot heat" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img">"#
    );
    for (i, (label, values)) in rows.iter().enumerate() {
        let y = i as f64 * cell_h;
        let max = values.iter().flatten().fold(0.0, |a: f64, &b| a.max(b));
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            label_w - 6.0,
            y + 11.0,
            esc(&truncate(label, 40))
        );
        for (j, v) in values.iter().enumerate() {
            let x = label_w + j as f64 * cell_w;
            let (fill, value) = match v {
                Some(v) if max > 0.0 => (shade(v / max), format!("{:.3} ms", v * 1e3)),
                Some(_) => (shade(0.0), "0".to_string()),
                None => ("#eeeeee".to_string(), "no calls".to_string()),
            };
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y}" width="{:.1}" height="{}" fill="{fill}"><title>{} on {}: {value}</title></rect>"#,
                (cell_w - 0.5).max(1.0),
                cell_h - 1.0,
                esc(label),
                esc(&columns[j.min(columns.len() - 1)]),
            );
        }
    }
    let _ = write!(
        s,
        r#"<text class="small" x="{label_w}" y="{}">{}</text>"#,
        h - 4.0,
        esc(&format!(
            "{} to {}, each row shaded by its largest value",
            columns.first().map_or("", String::as_str),
            columns.last().map_or("", String::as_str)
        ))
    );
    s.push_str("</svg>");
    s
}

/// White to dark blue.
fn shade(fraction: f64) -> String {
    let f = fraction.clamp(0.0, 1.0);
    let c = |from: f64, to: f64| (from + (to - from) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        c(247.0, 8.0),
        c(251.0, 48.0),
        c(255.0, 107.0)
    )
}

pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}\u{2026}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_and_escape_labels() {
        let bar = |label: &str, value: f64| Bar {
            label: label.into(),
            value,
            colour: "#123456",
            error: 0.0,
            title: format!("{label} <b>"),
            marked: false,
        };
        let svg = bars("t", &[bar("a<b", 2.0), bar("c", 1.0)], |v| format!("{v}"));
        assert!(svg.contains(r#"width="420.0""#), "{svg}");
        assert!(svg.contains(r#"width="210.0""#), "{svg}");
        assert!(svg.contains("a&lt;b") && svg.contains("c &lt;b&gt;"));
        assert!(!svg.contains("<b>"));
    }

    #[test]
    fn log_axis_and_shades() {
        let axis = LogAxis::new(1.0, 1000.0, 0.0, 300.0);
        assert!((axis.at(10.0) - 100.0).abs() < 1e-9);
        assert_eq!(axis.at(1e9), 300.0, "clamped");
        assert_eq!(axis.ticks(), [1.0, 10.0, 100.0, 1000.0]);
        let narrow = LogAxis::new(3.0, 30.0, 0.0, 300.0);
        assert_eq!(narrow.ticks(), [5.0, 10.0, 20.0]);
        assert_eq!(shade(0.0), "#f7fbff");
        assert_eq!(shade(1.0), "#08306b");
    }

    #[test]
    fn heat_map_marks_ranks_without_calls() {
        let rows = vec![("site".to_string(), vec![Some(1.0), None, Some(0.5)])];
        let cols: Vec<String> = (0..3).map(|r| format!("rank {r}")).collect();
        let svg = heat_map(&rows, &cols);
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("site on rank 1: no calls"));
        assert!(
            svg.contains(r##"fill="#08306b""##),
            "the row's largest is darkest"
        );
    }

    #[test]
    fn colours_are_stable() {
        assert_eq!(codelet_colour("native"), "#555555");
        assert_eq!(codelet_colour("ring"), codelet_colour("ring"));
        assert_eq!(truncate("abcdef", 4), "abc\u{2026}");
    }
}
