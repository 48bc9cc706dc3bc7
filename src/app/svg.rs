//! A hand-written SVG bar chart (no dependency): bars with ± sd whiskers, a dashed step line
//! for a per-bar ceiling (the roofline), label lines and a note under each bar. `locus bench
//! --svg` draws its arms with it; the file is written atomically.

use std::fmt::Write as _;
use std::path::Path;

use super::AppError;

/// One bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Lines under the bar (mode, threads, …).
    pub label: Vec<String>,
    /// The bar's height; `None` draws no bar (a failed arm).
    pub value: Option<f64>,
    /// The whisker's half-length.
    pub sd: f64,
    /// The ceiling drawn over this bar.
    pub roof: Option<f64>,
    /// A line under the labels, emphasised (locality).
    pub note: String,
}

/// A whole chart.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub subtitle: String,
    /// Small monospace text at the bottom (the command that made the data).
    pub footer: String,
    pub y_label: String,
    pub bars: Vec<Bar>,
}

const SLOT: f64 = 120.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 92.0;
const PLOT_H: f64 = 300.0;
const LINE: f64 = 15.0;
const BAR_FILL: &str = "#4c78a8";
const ROOF: &str = "#c0392b";
/// A white outline under text drawn over lines, so both stay legible where they cross.
const HALO: &str = r#"stroke="white" stroke-width="3" paint-order="stroke""#;

/// `&`, `<`, `>`, `"` escaped for SVG text and attributes.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c if (c as u32) < 0x20 => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// The smallest 1, 2, 2.5 or 5 × 10^k step giving at most five ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    if !(max > 0.0 && max.is_finite()) {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Breaks `text` into lines of at most `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for w in text.split(' ') {
        if !cur.is_empty() && cur.chars().count() + 1 + w.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(w);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A tick value with as many decimals as the step needs (`0`, `2.5`, `0.25`).
fn fmt_tick(v: f64, step: f64) -> String {
    let mut decimals = 0;
    while decimals < 6
        && ((step * 10f64.powi(decimals)).round() - step * 10f64.powi(decimals)).abs() > 1e-6
    {
        decimals += 1;
    }
    format!("{v:.*}", decimals as usize)
}

/// The chart as an SVG document.
pub fn bar_chart(c: &Chart) -> String {
    let n = c.bars.len().max(1);
    let width = (LEFT + RIGHT + n as f64 * SLOT).max(640.0);
    let slot = (width - LEFT - RIGHT) / n as f64;
    let label_lines = c.bars.iter().map(|b| b.label.len()).max().unwrap_or(0) + 1;
    let footer = wrap(&c.footer, ((width - 20.0) / 6.6) as usize);
    let base_y = TOP + PLOT_H;
    let height =
        base_y + 12.0 + LINE * (label_lines as f64 + 1.0) + LINE * footer.len() as f64 + 8.0;
    let top_value = c
        .bars
        .iter()
        .flat_map(|b| {
            [
                b.value
                    .map(|v| v + if b.sd.is_finite() { b.sd.abs() } else { 0.0 }),
                b.roof,
            ]
        })
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let step = tick_step(top_value * 1.05);
    let y_max = (top_value * 1.05 / step).ceil().max(1.0) * step;
    let y = |v: f64| base_y - (v.max(0.0) / y_max) * PLOT_H;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.0}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        LEFT - 60.0,
        escape(&c.title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.0}" y="44" fill="#444">{}</text>"##,
        LEFT - 60.0,
        escape(&c.subtitle)
    );
    // Legend.
    let lx = LEFT - 60.0;
    let _ = writeln!(
        s,
        r#"<rect x="{lx:.0}" y="58" width="14" height="10" fill="{BAR_FILL}"/><text x="{:.0}" y="67">mean, whisker ± sd</text>"#,
        lx + 20.0
    );
    let _ = writeln!(
        s,
        r#"<line x1="{:.0}" y1="63" x2="{:.0}" y2="63" stroke="{ROOF}" stroke-width="2" stroke-dasharray="6 3"/><text x="{:.0}" y="67">roofline: read bandwidth of the arm's nodes ÷ weight bytes per token</text>"#,
        lx + 150.0,
        lx + 176.0,
        lx + 182.0
    );
    // Grid and y axis.
    let mut v = 0.0;
    while v <= y_max + step * 0.01 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT:.0}" y1="{yy:.1}" x2="{:.0}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="#444">{}</text>"##,
            width - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            fmt_tick(v, step)
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate({:.0},{:.0}) rotate(-90)" text-anchor="middle" fill="#444">{}</text>"##,
        LEFT - 50.0,
        TOP + PLOT_H / 2.0,
        escape(&c.y_label)
    );
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT:.0}" y1="{base_y:.1}" x2="{:.0}" y2="{base_y:.1}" stroke="#222"/>"##,
        width - RIGHT
    );
    // Bars, whiskers, values, labels; the value and roofline texts go on top of the line.
    let mut over = String::new();
    let bar_w = slot * 0.55;
    for (i, b) in c.bars.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let sd = if b.sd.is_finite() { b.sd.abs() } else { 0.0 };
        match b.value.filter(|v| v.is_finite()) {
            Some(v) => {
                let top = y(v);
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{top:.1}" width="{bar_w:.1}" height="{:.1}" fill="{BAR_FILL}"/>"#,
                    cx - bar_w / 2.0,
                    base_y - top
                );
                let (lo, hi) = (y(v - sd), y(v + sd));
                let _ = writeln!(
                    s,
                    r##"<path d="M{cx:.1} {lo:.1}V{hi:.1}M{:.1} {lo:.1}h12M{:.1} {hi:.1}h12" stroke="#222" stroke-width="1.5" fill="none"/>"##,
                    cx - 6.0,
                    cx - 6.0
                );
                let _ = writeln!(
                    over,
                    r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-weight="bold" {HALO}>{} ± {}</text>"#,
                    hi - 6.0,
                    fmt_value(v),
                    fmt_value(sd)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="{ROOF}">no result</text>"#,
                    base_y - 8.0
                );
            }
        }
        for (k, line) in b.label.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                base_y + 16.0 + LINE * k as f64,
                escape(line)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"#,
            base_y + 16.0 + LINE * b.label.len() as f64,
            escape(&b.note)
        );
    }
    // The roofline: a step line over the bars that have one.
    let mut path = String::new();
    let mut open = false;
    let mut last_label: Option<String> = None;
    for (i, b) in c.bars.iter().enumerate() {
        match b.roof.filter(|r| r.is_finite() && *r > 0.0) {
            Some(r) => {
                let (x0, x1, yy) = (
                    LEFT + slot * i as f64 + 4.0,
                    LEFT + slot * (i as f64 + 1.0) - 4.0,
                    y(r),
                );
                let _ = write!(
                    path,
                    "{}{x0:.1} {yy:.1}L{x1:.1} {yy:.1}",
                    if open { "L" } else { "M" }
                );
                open = true;
                // Labelled where the value changes, not over every bar.
                let label = fmt_value(r);
                if last_label.as_deref() != Some(label.as_str()) {
                    let _ = writeln!(
                        over,
                        r#"<text x="{x0:.1}" y="{:.1}" font-size="11" fill="{ROOF}" {HALO}>roofline {label}</text>"#,
                        yy - 5.0,
                    );
                    last_label = Some(label);
                }
            }
            None => {
                open = false;
                last_label = None;
            }
        }
    }
    if !path.is_empty() {
        let _ = writeln!(
            s,
            r#"<path d="{path}" stroke="{ROOF}" stroke-width="2" stroke-dasharray="6 3" fill="none"/>"#
        );
    }
    s.push_str(&over);
    let fy = base_y + 16.0 + LINE * label_lines as f64 + 6.0;
    for (k, line) in footer.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="10" y="{:.1}" font-family="DejaVu Sans Mono, monospace" font-size="11" fill="#555">{}</text>"##,
            fy + LINE * k as f64,
            escape(line)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes `svg` to `path` atomically ([`crate::sys::fs::AtomicFile`]: a temporary file beside
/// the target, then a rename; never over a device, a FIFO or a directory).
pub fn write(path: &Path, svg: &str) -> Result<(), AppError> {
    crate::sys::fs::write_atomic(path, svg.as_bytes()).map_err(AppError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(bars: Vec<Bar>) -> Chart {
        Chart {
            title: "t <&>".into(),
            subtitle: "s".into(),
            footer: "locus bench -m \"x\"".into(),
            y_label: "tokens/s".into(),
            bars,
        }
    }

    #[test]
    fn draws_every_bar_whisker_roof_and_note() {
        let bar = |v: Option<f64>, roof: Option<f64>| Bar {
            label: vec!["mirror".into(), "t=2".into()],
            value: v,
            sd: 1.5,
            roof,
            note: "locality 100.0%".into(),
        };
        let svg = bar_chart(&chart(vec![
            bar(Some(40.0), Some(120.0)),
            bar(Some(41.0), Some(120.0)),
            bar(None, None),
        ]));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(
            svg.matches(&format!("fill=\"{BAR_FILL}\"/>")).count(),
            3,
            "2 bars + legend"
        );
        assert_eq!(svg.matches("locality 100.0%").count(), 3);
        assert_eq!(svg.matches("roofline 120").count(), 1, "labelled once");
        assert!(svg.contains("no result"));
        assert!(svg.contains("t &lt;&amp;&gt;") && svg.contains("&quot;x&quot;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn scale_covers_the_tallest_mark() {
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(12.0), 2.5);
        assert_eq!(tick_step(0.0), 1.0);
        assert_eq!(fmt_tick(40.0, 20.0), "40");
        assert_eq!(fmt_tick(5.0, 2.5), "5.0");
        assert_eq!(fmt_tick(0.5, 0.25), "0.50");
        assert_eq!(tick_step(f64::NAN), 1.0);
        let svg = bar_chart(&chart(vec![Bar {
            label: vec![],
            value: Some(f64::NAN),
            sd: f64::INFINITY,
            roof: Some(f64::INFINITY),
            note: String::new(),
        }]));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert!(bar_chart(&chart(vec![])).contains("</svg>"));
    }
}
