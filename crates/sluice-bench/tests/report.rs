//! The HTML report as a document: well-formed, self-contained, escaped, and its charts hold
//! exactly the samples it was given.

use sluice_bench::{Mark, Page, Sample, Section};

fn sample(start_ms: f64, latency_ms: f64, ok: bool) -> Sample {
    Sample {
        start_ms,
        latency_ms,
        ok,
    }
}

fn parse(html: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(html, opts).unwrap()
}

fn sum(doc: &roxmltree::Document<'_>, svg_id: &str, class: &str) -> u64 {
    let svg = doc
        .descendants()
        .find(|n| n.attribute("id") == Some(svg_id))
        .unwrap_or_else(|| panic!("no {svg_id}"));
    // The legend's swatches share the class but carry no count.
    svg.descendants()
        .filter(|n| n.attribute("class") == Some(class))
        .filter_map(|n| n.attribute("data-count"))
        .map(|c| c.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_page_is_well_formed_escaped_and_holds_its_samples() {
    let samples: Vec<Sample> = (0..300)
        .map(|i| sample(i as f64 * 10.0, 1.0 + (i % 9) as f64, i % 10 != 0))
        .collect();
    let page = Page {
        title: "a <run> & more".into(),
        facts: vec![("what".into(), "\"quoted\" <b>".into())],
        sections: vec![
            Section {
                title: "one".into(),
                latency: "send to end".into(),
                samples: samples.clone(),
                marks: vec![Mark {
                    at_ms: 1500.0,
                    label: "phase <2>".into(),
                }],
                facts: vec![],
            },
            Section {
                title: "empty".into(),
                ..Section::default()
            },
        ],
        json: Some(serde_json::json!({"note": "</script><script>alert(1)</script>"})),
    };
    let html = page.html();
    assert!(html.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
    assert!(!html.contains("<script>alert"), "the JSON broke out");
    let doc = parse(&html);
    let title = doc.descendants().find(|n| n.has_tag_name("title")).unwrap();
    assert_eq!(title.text(), Some("a <run> & more"));
    // 270 successes, 30 failures, over three seconds.
    assert_eq!(sum(&doc, "s0-histogram", "bar"), 270);
    assert_eq!(sum(&doc, "s0-throughput", "ok"), 270);
    assert_eq!(sum(&doc, "s0-throughput", "failed"), 30);
    let seconds = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("second"))
        .count();
    assert_eq!(seconds, 3);
    let mark = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("mark"))
        .unwrap();
    assert_eq!(mark.attribute("data-at-ms"), Some("1500"));
    // The JSON reads back as it was.
    let json = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("report-json"))
        .unwrap()
        .text()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["note"], "</script><script>alert(1)</script>");
    // An empty section still has its three charts, saying so.
    for chart in ["histogram", "latency-over-time", "throughput"] {
        let svg = doc
            .descendants()
            .find(|n| n.attribute("id") == Some(&format!("s1-{chart}")))
            .unwrap();
        assert!(svg.descendants().any(|n| n.text() == Some("no requests")));
    }
}
