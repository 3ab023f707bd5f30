//! Reads a `--report` HTML page back and checks its charts against the run's numbers.

// Each test file uses a part of it.
#![allow(dead_code)]

use std::collections::HashMap;

/// One section's three charts, as the page draws them.
#[derive(Debug, Default)]
pub struct Charts {
    /// Histogram bars: `(lo_ms, hi_ms, count)`.
    pub histogram: Vec<(f64, f64, u64)>,
    /// Latency over time, per second with successes: `(second, p50, p99, max)`.
    pub latency: Vec<(u64, f64, f64, f64)>,
    /// Throughput per second: `(second, ok, failed)`.
    pub throughput: Vec<(u64, u64, u64)>,
    /// Labels of the marks on the time charts.
    pub marks: Vec<String>,
}

impl Charts {
    pub fn histogram_total(&self) -> u64 {
        self.histogram.iter().map(|b| b.2).sum()
    }
    pub fn ok_total(&self) -> u64 {
        self.throughput.iter().map(|t| t.1).sum()
    }
    pub fn failed_total(&self) -> u64 {
        self.throughput.iter().map(|t| t.2).sum()
    }
    pub fn max_latency(&self) -> f64 {
        self.latency.iter().map(|l| l.3).fold(0.0, f64::max)
    }
}

/// The page's sections (by title) and its embedded JSON report. Panics unless the page is a
/// well-formed, self-contained HTML document.
pub fn read(html: &str) -> (Vec<(String, Charts)>, serde_json::Value) {
    assert!(html.starts_with("<!DOCTYPE html>"), "no doctype");
    // Self-contained: nothing to fetch.
    for banned in ["<link", " src=", "url(", "@import", " href="] {
        assert!(!html.contains(banned), "the page loads something: {banned}");
    }
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(html, opts)
        .unwrap_or_else(|e| panic!("the report is not well-formed: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "html");
    let attr = |n: roxmltree::Node<'_, '_>, a: &str| -> f64 {
        n.attribute(a)
            .unwrap_or_else(|| panic!("no {a}"))
            .parse()
            .unwrap()
    };
    let mut sections = Vec::new();
    for s in root.descendants().filter(|n| n.has_tag_name("section")) {
        let id = s.attribute("id").unwrap();
        let mut charts = Charts::default();
        let svg = |suffix: &str| {
            s.descendants()
                .find(|n| {
                    n.has_tag_name("svg") && n.attribute("id") == Some(&format!("{id}-{suffix}"))
                })
                .unwrap_or_else(|| panic!("section {id} has no {suffix} chart"))
        };
        for r in svg("histogram")
            .descendants()
            .filter(|n| n.attribute("class") == Some("bar"))
        {
            charts.histogram.push((
                attr(r, "data-lo-ms"),
                attr(r, "data-hi-ms"),
                attr(r, "data-count") as u64,
            ));
        }
        let latency = svg("latency-over-time");
        for r in latency
            .descendants()
            .filter(|n| n.attribute("class") == Some("second"))
        {
            charts.latency.push((
                attr(r, "data-second") as u64,
                attr(r, "data-p50-ms"),
                attr(r, "data-p99-ms"),
                attr(r, "data-max-ms"),
            ));
        }
        for m in latency
            .descendants()
            .filter(|n| n.attribute("class") == Some("mark"))
        {
            charts.marks.push(
                m.descendants()
                    .find(|n| n.is_text())
                    .unwrap()
                    .text()
                    .unwrap()
                    .to_string(),
            );
        }
        let mut per: HashMap<u64, (u64, u64)> = HashMap::new();
        for r in svg("throughput").descendants() {
            let (Some(class), Some(sec)) = (r.attribute("class"), r.attribute("data-second"))
            else {
                continue;
            };
            let e = per.entry(sec.parse().unwrap()).or_default();
            match class {
                "ok" => e.0 += attr(r, "data-count") as u64,
                "failed" => e.1 += attr(r, "data-count") as u64,
                other => panic!("unexpected bar {other}"),
            }
        }
        let mut t: Vec<_> = per.into_iter().map(|(s, (o, f))| (s, o, f)).collect();
        t.sort();
        charts.throughput = t;
        sections.push((s.attribute("data-title").unwrap().to_string(), charts));
    }
    let json = root
        .descendants()
        .find(|n| n.attribute("id") == Some("report-json"))
        .and_then(|n| n.text())
        .expect("the page embeds its JSON report");
    (sections, serde_json::from_str(json).unwrap())
}
