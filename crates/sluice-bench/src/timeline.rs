//! Every request of a run on the run's clock, and what the report's charts are made of: a
//! latency histogram and per-second latency and throughput.

use serde::Serialize;

use crate::summary::percentile_f64;

/// One request, on the run's clock.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// When it started (open model: when it was due), milliseconds after the run began.
    pub start_ms: f64,
    /// How long it took (to its end, or to its failure).
    pub latency_ms: f64,
    /// It succeeded.
    pub ok: bool,
}

impl Sample {
    /// When it ended, milliseconds after the run began.
    pub fn end_ms(&self) -> f64 {
        self.start_ms + self.latency_ms
    }
}

/// One second of a run: the requests that ended in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the run began (this second is `[second, second + 1)`).
    pub second: u64,
    /// Successes that ended in this second.
    pub ok: u64,
    /// Failures that ended in this second.
    pub failed: u64,
    /// Median latency of those successes (0 when there were none).
    pub p50_ms: f64,
    /// 99th percentile latency of those successes.
    pub p99_ms: f64,
    /// Largest latency of those successes.
    pub max_ms: f64,
}

/// Per-second throughput and latency, from the first second to the last one in which a
/// request ended (empty seconds included, so a stall shows as a gap).
pub fn per_second(samples: &[Sample]) -> Vec<Second> {
    let Some(last) = samples
        .iter()
        .map(|s| s.end_ms().max(0.0) as u64 / 1000)
        .max()
    else {
        return Vec::new();
    };
    let mut out: Vec<Second> = (0..=last)
        .map(|second| Second {
            second,
            ..Second::default()
        })
        .collect();
    let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); out.len()];
    for s in samples {
        let i = s.end_ms().max(0.0) as usize / 1000;
        if s.ok {
            out[i].ok += 1;
            latencies[i].push(s.latency_ms);
        } else {
            out[i].failed += 1;
        }
    }
    for (sec, mut l) in out.iter_mut().zip(latencies) {
        l.sort_unstable_by(f64::total_cmp);
        sec.p50_ms = percentile_f64(&l, 0.5);
        sec.p99_ms = percentile_f64(&l, 0.99);
        sec.max_ms = l.last().copied().unwrap_or(0.0);
    }
    out
}

/// One bar of the latency histogram: successes with `lo_ms <= latency < hi_ms`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Lower edge, milliseconds.
    pub lo_ms: f64,
    /// Upper edge (exclusive), milliseconds.
    pub hi_ms: f64,
    /// Successes in the bucket.
    pub count: u64,
}

/// Buckets per factor of ten: edges at 10^(k/10) ms, each about 26% wider than the last.
const BUCKETS_PER_DECADE: f64 = 10.0;

/// The smallest edge: latencies under 1 µs share the first bucket.
const MIN_EDGE_MS: f64 = 0.001;

fn bucket_of(ms: f64) -> i32 {
    (ms.max(MIN_EDGE_MS).log10() * BUCKETS_PER_DECADE).floor() as i32
}

fn edge(k: i32) -> f64 {
    10f64.powf(f64::from(k) / BUCKETS_PER_DECADE)
}

/// The latency histogram of the successes, on logarithmic buckets from the one holding the
/// fastest to the one holding the slowest (empty ones between included).
pub fn histogram(samples: &[Sample]) -> Vec<Bucket> {
    let ks: Vec<i32> = samples
        .iter()
        .filter(|s| s.ok)
        .map(|s| bucket_of(s.latency_ms))
        .collect();
    let (Some(&lo), Some(&hi)) = (ks.iter().min(), ks.iter().max()) else {
        return Vec::new();
    };
    let mut out: Vec<Bucket> = (lo..=hi)
        .map(|k| Bucket {
            lo_ms: edge(k),
            hi_ms: edge(k + 1),
            count: 0,
        })
        .collect();
    for k in ks {
        out[(k - lo) as usize].count += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(start_ms: f64, latency_ms: f64, ok: bool) -> Sample {
        Sample {
            start_ms,
            latency_ms,
            ok,
        }
    }

    #[test]
    fn seconds_count_by_end_and_keep_empty_ones() {
        let v = [
            s(0.0, 10.0, true),
            s(100.0, 30.0, true),
            s(900.0, 200.0, false),
            s(2500.0, 100.0, true),
        ];
        let p = per_second(&v);
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].ok, p[0].failed), (2, 0));
        assert_eq!((p[0].p50_ms, p[0].max_ms), (10.0, 30.0));
        assert_eq!((p[1].ok, p[1].failed, p[1].max_ms), (0, 1, 0.0));
        assert_eq!((p[2].second, p[2].ok, p[2].p99_ms), (2, 1, 100.0));
        assert!(per_second(&[]).is_empty());
    }

    #[test]
    fn histogram_buckets_are_logarithmic_and_hold_every_success() {
        let v = [
            s(0.0, 1.0, true),
            s(0.0, 1.1, true),
            s(0.0, 95.0, true),
            s(0.0, 5000.0, false),
        ];
        let h = histogram(&v);
        assert_eq!(h.iter().map(|b| b.count).sum::<u64>(), 3);
        // 1 ms .. 100 ms: 20 buckets of 10 per decade.
        assert_eq!(h.len(), 20);
        assert!((h[0].lo_ms - 1.0).abs() < 1e-9);
        assert_eq!(h[0].count, 2);
        assert_eq!(h[19].count, 1);
        assert!(h[19].lo_ms <= 95.0 && 95.0 < h[19].hi_ms);
        assert!(h.windows(2).all(|w| (w[0].hi_ms - w[1].lo_ms).abs() < 1e-9));
        assert!(histogram(&[s(0.0, 1.0, false)]).is_empty());
    }
}
