//! Charts as inline SVG, drawn on the server: stacked bars over time, and a rate bar. Colours
//! come from CSS classes (`c-events`, `c-ok`, `c-fail`), so the page's stylesheet themes them.
//! Every label is escaped.

use std::fmt::Write as _;

use maud::{html, Markup, PreEscaped};

/// One bar: its label (shown on hover) and its stacked parts, bottom first: (value, CSS class).
#[derive(Debug, Clone)]
pub struct Stack {
    /// Hover label, e.g. the bucket's time.
    pub label: String,
    /// Values, bottom first, with the class that colours each.
    pub parts: Vec<(u64, &'static str)>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 40.0;
const BOTTOM: f64 = 18.0;
const TOP: f64 = 6.0;

fn escape(text: &str) -> String {
    html! { (text) }.into_string()
}

/// A stacked bar chart of `stacks` (oldest left); `first` and `last` label the time axis.
pub fn stacked_bars(title: &str, stacks: &[Stack], first: &str, last: &str) -> Markup {
    let max = stacks
        .iter()
        .map(|s| s.parts.iter().map(|(v, _)| v).sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_h = HEIGHT - BOTTOM - TOP;
    let slot = (WIDTH - LEFT) / stacks.len().max(1) as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" preserveAspectRatio="none">"#,
        escape(title)
    );
    let base = HEIGHT - BOTTOM;
    let _ = write!(
        svg,
        r#"<line class="axis" x1="{LEFT}" y1="{base}" x2="{WIDTH}" y2="{base}"/><line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH}" y2="{TOP}"/>"#
    );
    let _ = write!(
        svg,
        r#"<text class="tick" x="{}" y="{}" text-anchor="end">{max}</text><text class="tick" x="{}" y="{base}" text-anchor="end">0</text>"#,
        LEFT - 4.0,
        TOP + 8.0,
        LEFT - 4.0
    );
    for (i, stack) in stacks.iter().enumerate() {
        let x = LEFT + i as f64 * slot + (slot - bar_w) / 2.0;
        let mut y = base;
        let total: u64 = stack.parts.iter().map(|(v, _)| v).sum();
        let _ = write!(svg, "<g><title>{}: {total}</title>", escape(&stack.label));
        for (value, class) in &stack.parts {
            if *value == 0 {
                continue;
            }
            let h = *value as f64 / max as f64 * plot_h;
            y -= h;
            let _ = write!(
                svg,
                r#"<rect class="{class}" x="{x:.2}" y="{y:.2}" width="{bar_w:.2}" height="{h:.2}"/>"#
            );
        }
        // An invisible full-height target, so hovering an empty bucket shows its label too.
        let _ = write!(
            svg,
            r#"<rect class="hit" x="{:.2}" y="{TOP}" width="{slot:.2}" height="{plot_h:.2}"/></g>"#,
            LEFT + i as f64 * slot
        );
    }
    let _ = write!(
        svg,
        r#"<text class="tick" x="{LEFT}" y="{}">{}</text><text class="tick" x="{WIDTH}" y="{}" text-anchor="end">{}</text></svg>"#,
        HEIGHT - 4.0,
        escape(first),
        HEIGHT - 4.0,
        escape(last)
    );
    PreEscaped(svg)
}

/// A horizontal bar split into succeeded (green) and failed (red) shares; grey when nothing
/// finished.
pub fn rate_bar(succeeded: u64, failed: u64) -> Markup {
    let total = succeeded + failed;
    let w = 120.0;
    let mut svg = format!(r#"<svg class="rate" viewBox="0 0 {w} 10" width="{w}" height="10">"#);
    if total == 0 {
        let _ = write!(
            svg,
            r#"<rect class="c-none" x="0" y="0" width="{w}" height="10"/>"#
        );
    } else {
        let ok = succeeded as f64 / total as f64 * w;
        let _ = write!(
            svg,
            r#"<rect class="c-ok" x="0" y="0" width="{ok:.2}" height="10"/><rect class="c-fail" x="{ok:.2}" y="0" width="{:.2}" height="10"/>"#,
            w - ok
        );
    }
    svg.push_str("</svg>");
    PreEscaped(svg)
}

/// One attempt on a timeline: start and end (ms), and its outcome's CSS class and label.
#[derive(Debug, Clone)]
pub struct Span {
    /// Start, ms.
    pub start: i64,
    /// End, ms.
    pub end: i64,
    /// `c-ok`, `c-fail`, `c-warn` or `c-run`.
    pub class: &'static str,
    /// The row's name at the left (`#1`, a step's key), cut to fit.
    pub row: String,
    /// Hover label.
    pub label: String,
}

/// The narrowest bar of the timeline, in its units (1,200 across): an attempt of a few
/// milliseconds on an axis of minutes still shows as a mark one can see and hover.
pub const MIN_SPAN_WIDTH: f64 = 8.0;

/// Attempts and steps on one time axis from `from` to `to` (ms), one row each. A bar is at least
/// [`MIN_SPAN_WIDTH`] wide, and one near the end is drawn leftwards so it stays on the axis.
pub fn timeline(spans: &[Span], from: i64, to: i64) -> Markup {
    // Wide enough that a full-width page shows it near 1:1, so the labels keep their size.
    const WIDTH: f64 = 1200.0;
    // Room for the row names (`#1`, a step's key).
    const ROW_NAMES: f64 = 96.0;
    let row = 18.0;
    // The time axis below the rows: the start in UTC, then offsets from it.
    const AXIS: f64 = 18.0;
    let rows_h = row * spans.len().max(1) as f64 + 4.0;
    let h = rows_h + AXIS;
    let span_ms = (to - from).max(1) as f64;
    let mut svg = format!(
        r#"<svg class="timeline" viewBox="0 0 {WIDTH} {h}" preserveAspectRatio="xMinYMin meet" role="img" aria-label="attempts and steps">"#
    );
    for (i, s) in spans.iter().enumerate() {
        let w = ((s.end - s.start) as f64 / span_ms * (WIDTH - ROW_NAMES)).max(MIN_SPAN_WIDTH);
        let x =
            (ROW_NAMES + (s.start - from) as f64 / span_ms * (WIDTH - ROW_NAMES)).min(WIDTH - w);
        let y = 2.0 + i as f64 * row;
        let _ = write!(
            svg,
            r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text><g><title>{}</title><rect class="{}" x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{:.1}" rx="2"/></g>"#,
            ROW_NAMES - 4.0,
            y + 12.0,
            escape(&row_name(&s.row)),
            escape(&s.label),
            s.class,
            row - 4.0
        );
    }
    let _ = write!(
        svg,
        r#"<g class="time-axis"><line x1="{ROW_NAMES}" y1="{rows_h:.1}" x2="{WIDTH}" y2="{rows_h:.1}"/>"#
    );
    for i in 0..=4 {
        let at = i as f64 / 4.0;
        let x = ROW_NAMES + at * (WIDTH - ROW_NAMES);
        let text = if i == 0 {
            crate::model::ms_to_time(from)
                .format("%H:%M:%S UTC")
                .to_string()
        } else {
            format!("+{}", offset((at * span_ms) as i64))
        };
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            svg,
            r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
            rows_h + 13.0,
            escape(&text)
        );
    }
    svg.push_str("</g></svg>");
    PreEscaped(svg)
}

/// A time offset for the timeline's axis: `250 ms`, `1.5 s`, `2.5 min`, `3.2 h`.
fn offset(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// A row name short enough for the left margin.
fn row_name(name: &str) -> String {
    const MAX: usize = 12;
    if name.chars().count() <= MAX {
        name.to_string()
    } else {
        let cut: String = name.chars().take(MAX - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_has_a_time_axis_from_its_start_in_utc() {
        let spans = vec![Span {
            start: 1_000,
            end: 3_000,
            class: "c-ok",
            row: "#1".into(),
            label: "attempt 1".into(),
        }];
        // 1970-01-01 00:00:01 UTC to 2 s later.
        let svg = timeline(&spans, 1_000, 3_000).into_string();
        assert!(svg.contains(r#"<g class="time-axis">"#), "{svg}");
        assert!(svg.contains(">00:00:01 UTC</text>"), "{svg}");
        assert!(
            svg.contains(">+500 ms</text>") && svg.contains(">+2.0 s</text>"),
            "{svg}"
        );
        assert_eq!(offset(90_000), "1.5 min");
        assert_eq!(offset(5_400_000), "1.5 h");
    }

    #[test]
    fn bars_scale_to_the_tallest_stack_and_escape_labels() {
        let stacks = vec![
            Stack {
                label: "<a>".into(),
                parts: vec![(2, "c-ok"), (2, "c-fail")],
            },
            Stack {
                label: "b".into(),
                parts: vec![(0, "c-ok")],
            },
        ];
        let svg = stacked_bars("t", &stacks, "12:00", "13:00").into_string();
        assert!(svg.contains("&lt;a&gt;: 4"), "{svg}");
        assert!(!svg.contains("<a>"));
        // The tallest stack fills the plot: its two halves are half the plot height each.
        let half = (HEIGHT - BOTTOM - TOP) / 2.0;
        assert!(svg.contains(&format!(r#"height="{half:.2}""#)), "{svg}");
        assert_eq!(
            svg.matches("class=\"c-ok\"").count(),
            1,
            "zero parts are not drawn"
        );
    }

    /// Found in use: a 3 ms attempt on a two-minute axis was a 2-unit sliver, invisible.
    #[test]
    fn millisecond_attempts_keep_a_visible_width_on_the_axis() {
        let span = |start, end| Span {
            start,
            end,
            class: "c-ok",
            row: "#1".into(),
            label: "attempt".into(),
        };
        let svg = timeline(&[span(0, 3), span(119_997, 120_000)], 0, 120_000).into_string();
        let widths: Vec<f64> = svg
            .split("width=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next()?.parse().ok())
            .collect();
        assert_eq!(widths.len(), 2, "{svg}");
        assert!(widths.iter().all(|w| *w >= MIN_SPAN_WIDTH), "{widths:?}");
        let xs: Vec<f64> = svg
            .split("<rect ")
            .skip(1)
            .filter_map(|s| s.split("x=\"").nth(1)?.split('"').next()?.parse().ok())
            .collect();
        // The bars' x (the time axis's labels after them are not bars); the last bar ends on
        // the axis, not past it.
        let last_bar_x = xs[xs.len() - 1];
        assert!(last_bar_x + MIN_SPAN_WIDTH <= 1200.0 + 1e-9, "{xs:?}");
    }

    #[test]
    fn rate_bar_splits_by_outcome() {
        let svg = rate_bar(3, 1).into_string();
        assert!(
            svg.contains(r#"class="c-ok" x="0" y="0" width="90.00""#),
            "{svg}"
        );
        assert!(rate_bar(0, 0).into_string().contains("c-none"));
    }
}
