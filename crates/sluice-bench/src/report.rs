//! `--report FILE.html`: one self-contained page per run (inline SVG and CSS, no script to
//! load, no CDN) with, per section, the latency histogram, latency over time and the
//! per-second throughput, plus the run's numbers and its whole JSON report.
//!
//! The page is also well-formed XML (every element closed, attributes quoted), so a test can
//! read it back with an XML parser and check the charts hold the run's numbers: every bar and
//! point carries its value in `data-*` attributes (and a `<title>` tooltip for people).

use std::fmt::Write as _;
use std::path::Path;

use crate::timeline::{histogram, per_second, Sample};

/// A labelled instant on the time charts (e.g. a phase starting).
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// Milliseconds after the run began.
    pub at_ms: f64,
    /// What starts there.
    pub label: String,
}

/// One part of a report: three charts over one set of requests.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Heading, e.g. `requests` or `lanes: Sluice (stream / short)`.
    pub title: String,
    /// What the latency measures, e.g. `send to the end of the body`.
    pub latency: String,
    /// The requests.
    pub samples: Vec<Sample>,
    /// Instants to mark on the time charts.
    pub marks: Vec<Mark>,
    /// Numbers shown above the charts, `(name, value)`.
    pub facts: Vec<(String, String)>,
}

/// A whole report page.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The page's title and heading, e.g. `sluice bench rps`.
    pub title: String,
    /// Numbers of the whole run, `(name, value)`.
    pub facts: Vec<(String, String)>,
    /// The sections, each with its three charts.
    pub sections: Vec<Section>,
    /// The run's JSON report, embedded as `<script type="application/json" id="report-json">`.
    pub json: Option<serde_json::Value>,
}

const W: f64 = 760.0;
const H: f64 = 240.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = 44.0;

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:800px;color:#1b1f23}\
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-top:1px solid #ddd;padding-top:16px}\
h3{font-size:14px;margin:18px 0 4px}table.facts{border-collapse:collapse}\
table.facts td{padding:1px 14px 1px 0}table.facts td:first-child{color:#57606a}\
svg{display:block;background:#fafbfc;border:1px solid #e1e4e8}\
.axis line,.axis path{stroke:#8c959f}.axis text,.mark text,.legend text{font-size:11px;fill:#57606a}\
.axis .grid{stroke:#eaeef2}.bar{fill:#0969da}.ok{fill:#2da44e}.failed{fill:#cf222e}\
.p50{stroke:#0969da;fill:none;stroke-width:1.5}.p99{stroke:#bf8700;fill:none;stroke-width:1.5}\
.max{stroke:#cf222e;fill:none;stroke-width:1;stroke-dasharray:3 2}\
.second{fill:transparent}.second:hover{fill:rgba(0,0,0,.06)}\
.mark line{stroke:#6e7781;stroke-dasharray:4 3}.empty{font-size:13px;fill:#57606a}";

/// Escapes text for HTML and XML alike.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// JSON that is safe inside `<script>` in HTML and XML: `<`, `>` and `&` only occur inside
/// JSON strings, where `\u003c` etc. mean the same.
fn script_json(v: &serde_json::Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Numbers for axes and tooltips: `0.42`, `3.1`, `37`, `2,400`.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1.0 {
        format!("{v:.2}")
    } else if a < 10.0 {
        format!("{v:.1}")
    } else {
        let n = v.round() as i64;
        let s = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            out.insert(0, '-');
        }
        out
    }
}

/// The top of a y axis of four steps that holds `v`: four times a 1, 2, 2.5 or 5 × 10^n
/// step.
fn axis_top(v: f64) -> f64 {
    let step = v / 4.0;
    if step <= 0.0 || !step.is_finite() {
        return 4.0;
    }
    let p = 10f64.powf(step.log10().floor());
    let m = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|m| m * p >= step * (1.0 - 1e-12))
        .unwrap_or(10.0);
    4.0 * m * p
}

/// The smallest 1, 2 or 5 × 10^n at least `v` (1 for `v` ≤ 0).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v * (1.0 - 1e-12) {
            return m * p;
        }
    }
    10.0 * p
}

impl Page {
    /// The page as one HTML document.
    pub fn html(&self) -> String {
        let mut o = String::with_capacity(64 * 1024);
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n\
             <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n",
            t = esc(&self.title)
        );
        facts(&mut o, &self.facts);
        for (i, s) in self.sections.iter().enumerate() {
            section(&mut o, i, s);
        }
        if let Some(j) = &self.json {
            let _ = writeln!(
                o,
                "<script type=\"application/json\" id=\"report-json\">{}</script>",
                script_json(j)
            );
        }
        o.push_str("</body>\n</html>\n");
        o
    }

    /// Writes the page to `path`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.html())
    }
}

fn facts(o: &mut String, facts: &[(String, String)]) {
    if facts.is_empty() {
        return;
    }
    o.push_str("<table class=\"facts\">\n");
    for (k, v) in facts {
        let _ = writeln!(o, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
    }
    o.push_str("</table>\n");
}

fn section(o: &mut String, i: usize, s: &Section) {
    let _ = writeln!(
        o,
        "<section id=\"s{i}\" data-title=\"{}\">\n<h2>{}</h2>",
        esc(&s.title),
        esc(&s.title)
    );
    facts(o, &s.facts);
    let _ = writeln!(
        o,
        "<h3>Latency histogram ({}), successes</h3>",
        esc(&s.latency)
    );
    histogram_svg(o, i, &s.samples);
    let _ = writeln!(
        o,
        "<h3>Latency over time ({}): p50, p99 and max of the successes ending in each second</h3>",
        esc(&s.latency)
    );
    latency_svg(o, i, s);
    o.push_str("<h3>Throughput: requests ending in each second (successes, failures)</h3>\n");
    throughput_svg(o, i, s);
    o.push_str("</section>\n");
}

fn svg_open(o: &mut String, id: String, class: &str) {
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{id}\" class=\"chart {class}\" \
         width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\">"
    );
}

fn empty(o: &mut String) {
    let _ = writeln!(
        o,
        "<text class=\"empty\" x=\"{}\" y=\"{}\">no requests</text></svg>",
        W / 2.0 - 40.0,
        H / 2.0
    );
}

/// The y axis from 0 to `top` with five gridlines, labelled in `unit`.
fn y_axis(o: &mut String, top: f64, unit: &str) {
    let plot_h = H - TOP - BOTTOM;
    o.push_str("<g class=\"axis y\">");
    for k in 0..=4 {
        let v = top * f64::from(k) / 4.0;
        let y = TOP + plot_h - plot_h * f64::from(k) / 4.0;
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            num(v)
        );
    }
    let _ = writeln!(
        o,
        "<text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">{}</text></g>",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        esc(unit)
    );
}

fn histogram_svg(o: &mut String, i: usize, samples: &[Sample]) {
    svg_open(o, format!("s{i}-histogram"), "histogram");
    let buckets = histogram(samples);
    if buckets.is_empty() {
        return empty(o);
    }
    let top = axis_top(buckets.iter().map(|b| b.count).max().unwrap_or(0) as f64);
    y_axis(o, top, "requests");
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let bw = plot_w / buckets.len() as f64;
    o.push_str("<g class=\"bars\">");
    for (k, b) in buckets.iter().enumerate() {
        let h = plot_h * b.count as f64 / top;
        let _ = write!(
            o,
            "<rect class=\"bar\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{h:.2}\" \
             data-lo-ms=\"{}\" data-hi-ms=\"{}\" data-count=\"{}\"><title>{} to {} ms: {}</title></rect>",
            LEFT + bw * k as f64 + 0.5,
            TOP + plot_h - h,
            (bw - 1.0).max(0.5),
            b.lo_ms,
            b.hi_ms,
            b.count,
            num(b.lo_ms),
            num(b.hi_ms),
            b.count
        );
    }
    o.push_str("</g>\n<g class=\"axis x\">");
    // Label the edges near 1, 2 and 5 × 10^n (every bucket is a tenth of a decade).
    let step = (buckets.len() / 12).max(1);
    for (k, b) in buckets.iter().enumerate() {
        let mantissa = b.lo_ms / 10f64.powf(b.lo_ms.log10().floor());
        let round = [1.0, 2.0, 5.0]
            .iter()
            .any(|m| (mantissa - m).abs() / m < 0.02);
        if round || (buckets.len() <= 12 && k % step == 0) {
            let x = LEFT + bw * k as f64;
            let _ = write!(
                o,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y:.1}\" y2=\"{:.1}\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                TOP + plot_h + 4.0,
                TOP + plot_h + 16.0,
                num(b.lo_ms),
                y = TOP + plot_h,
            );
        }
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">milliseconds (logarithmic)</text></g></svg>",
        LEFT + plot_w / 2.0,
        H - 8.0
    );
}

/// The x axis in seconds, `0..=secs`, and the marks.
fn time_axis(o: &mut String, secs: f64, marks: &[Mark]) {
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let step = nice_ceiling(secs / 8.0).max(1.0);
    o.push_str("<g class=\"axis x\">");
    let mut t = 0.0;
    while t <= secs + 1e-9 {
        let x = LEFT + plot_w * t / secs;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + plot_h,
            TOP + plot_h + 4.0,
            TOP + plot_h + 16.0,
            num(t)
        );
        t += step;
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds</text></g>",
        LEFT + plot_w / 2.0,
        H - 8.0
    );
    for (k, m) in marks.iter().enumerate() {
        let x = LEFT + plot_w * (m.at_ms / 1000.0) / secs;
        // Every other label one line lower, so that close marks do not overprint.
        let y = if k % 2 == 0 { TOP - 6.0 } else { TOP + 10.0 };
        let _ = writeln!(
            o,
            "<g class=\"mark\" data-at-ms=\"{}\"><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\"/>\
             <text x=\"{:.1}\" y=\"{y:.1}\">{}</text></g>",
            m.at_ms,
            TOP + plot_h,
            x + 3.0,
            esc(&m.label)
        );
    }
}

/// Seconds the time charts span: every second a request ended in, and every mark.
fn span_secs(s: &Section, last_second: u64) -> f64 {
    let marks = s
        .marks
        .iter()
        .map(|m| (m.at_ms / 1000.0).ceil())
        .fold(0.0, f64::max);
    ((last_second + 1) as f64).max(marks).max(1.0)
}

fn legend(o: &mut String, items: &[(&str, &str)]) {
    // Bottom right, beside the axis title.
    let mut x = W - RIGHT - 60.0 * items.len() as f64;
    o.push_str("<g class=\"legend\">");
    for (class, label) in items {
        let _ = write!(
            o,
            "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
            H - 18.0,
            x + 14.0,
            H - 9.0
        );
        x += 60.0;
    }
    o.push_str("</g>\n");
}

fn latency_svg(o: &mut String, i: usize, s: &Section) {
    svg_open(o, format!("s{i}-latency-over-time"), "latency-over-time");
    let seconds = per_second(&s.samples);
    let Some(last) = seconds.last() else {
        return empty(o);
    };
    let secs = span_secs(s, last.second);
    let top = axis_top(seconds.iter().map(|p| p.max_ms).fold(0.0, f64::max));
    y_axis(o, top, "milliseconds");
    time_axis(o, secs, &s.marks);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let x_of = |sec: u64| LEFT + plot_w * (sec as f64 + 0.5) / secs;
    let y_of = |ms: f64| TOP + plot_h - plot_h * ms / top;
    for (class, f) in [
        (
            "max",
            (|p: &crate::timeline::Second| p.max_ms) as fn(&_) -> f64,
        ),
        ("p99", |p| p.p99_ms),
        ("p50", |p| p.p50_ms),
    ] {
        let points: Vec<String> = seconds
            .iter()
            .filter(|p| p.ok > 0)
            .map(|p| format!("{:.1},{:.1}", x_of(p.second), y_of(f(p))))
            .collect();
        let _ = writeln!(
            o,
            "<polyline class=\"{class}\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    o.push_str("<g class=\"seconds\">");
    let col = plot_w / secs;
    for p in seconds.iter().filter(|p| p.ok > 0) {
        let _ = write!(
            o,
            "<rect class=\"second\" x=\"{:.1}\" y=\"{TOP}\" width=\"{col:.1}\" height=\"{plot_h:.1}\" \
             data-second=\"{}\" data-ok=\"{}\" data-p50-ms=\"{}\" data-p99-ms=\"{}\" data-max-ms=\"{}\">\
             <title>second {}: p50 {} ms, p99 {} ms, max {} ms ({} ok)</title></rect>",
            LEFT + col * p.second as f64,
            p.second,
            p.ok,
            p.p50_ms,
            p.p99_ms,
            p.max_ms,
            p.second,
            num(p.p50_ms),
            num(p.p99_ms),
            num(p.max_ms),
            p.ok
        );
    }
    o.push_str("</g>\n");
    legend(o, &[("p50", "p50"), ("p99", "p99"), ("max", "max")]);
    o.push_str("</svg>\n");
}

fn throughput_svg(o: &mut String, i: usize, s: &Section) {
    svg_open(o, format!("s{i}-throughput"), "throughput");
    let seconds = per_second(&s.samples);
    let Some(last) = seconds.last() else {
        return empty(o);
    };
    let secs = span_secs(s, last.second);
    let top = axis_top(
        seconds
            .iter()
            .map(|p| (p.ok + p.failed) as f64)
            .fold(0.0, f64::max),
    );
    y_axis(o, top, "requests per second");
    time_axis(o, secs, &s.marks);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let col = plot_w / secs;
    o.push_str("<g class=\"bars\">");
    for p in &seconds {
        let x = LEFT + col * p.second as f64 + 1.0;
        let h_ok = plot_h * p.ok as f64 / top;
        let h_failed = plot_h * p.failed as f64 / top;
        let _ = write!(
            o,
            "<rect class=\"ok\" x=\"{x:.1}\" y=\"{:.2}\" width=\"{:.1}\" height=\"{h_ok:.2}\" \
             data-second=\"{}\" data-count=\"{}\"><title>second {}: {} ok</title></rect>\
             <rect class=\"failed\" x=\"{x:.1}\" y=\"{:.2}\" width=\"{:.1}\" height=\"{h_failed:.2}\" \
             data-second=\"{}\" data-count=\"{}\"><title>second {}: {} failed</title></rect>",
            TOP + plot_h - h_ok,
            (col - 2.0).max(0.5),
            p.second,
            p.ok,
            p.second,
            p.ok,
            TOP + plot_h - h_ok - h_failed,
            (col - 2.0).max(0.5),
            p.second,
            p.failed,
            p.second,
            p.failed
        );
    }
    o.push_str("</g>\n");
    legend(o, &[("ok", "ok"), ("failed", "failed")]);
    o.push_str("</svg>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_nice_ceilings() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.4213), "0.42");
        assert_eq!(num(3.04), "3.0");
        assert_eq!(num(2400.2), "2,400");
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(101.0), 200.0);
        assert_eq!(nice_ceiling(0.3), 0.5);
        assert_eq!(axis_top(26.0), 40.0);
        assert_eq!(axis_top(100.0), 100.0);
        assert_eq!(axis_top(0.0), 4.0);
    }

    #[test]
    fn text_and_json_cannot_break_out_of_the_page() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let v = serde_json::json!({"e": "</script><b>&"});
        let s = script_json(&v);
        assert!(!s.contains('<') && !s.contains('&'), "{s}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap(), v);
    }
}
