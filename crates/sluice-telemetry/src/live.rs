//! The gateway's live state for the dashboard: plain atomic counters, latency histograms the
//! feed reads in windows, and the start times of the streams running now. Written on the
//! request path with relaxed atomics (and one short lock per stream start and end); read once
//! per dashboard tick, whatever the number of viewers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::EndReason;

/// Buckets of [`LatencyHistogram`]: upper bounds 0.25 ms × 2^(i/2), up to about 4.6 min.
pub const LATENCY_BUCKETS: usize = 42;

/// A latency histogram with fixed log-spaced buckets, cumulative since start; the feed
/// subtracts two reads to get a window.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The upper bound of bucket `i`, in milliseconds.
pub fn bucket_bound_ms(i: usize) -> f64 {
    0.25 * 2f64.powf(i as f64 / 2.0)
}

impl LatencyHistogram {
    pub fn observe(&self, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        // ms ≤ 0.25 × 2^(i/2)  ⇔  i ≥ 2·log2(ms / 0.25)
        let i = if ms <= 0.25 {
            0
        } else {
            ((2.0 * (ms / 0.25).log2()).ceil() as usize).min(LATENCY_BUCKETS - 1)
        };
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> [u64; LATENCY_BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }
}

/// The `q` quantile (0..1) of a bucket histogram, as its bucket's upper bound in ms; `None`
/// when empty.
pub fn quantile_ms(counts: &[u64; LATENCY_BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(bucket_bound_ms(i));
        }
    }
    Some(bucket_bound_ms(LATENCY_BUCKETS - 1))
}

/// Tokens and spend of one API key (filled in by the key stage when it lands).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyUsage {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Spend in millionths of the currency unit.
    pub spend_micros: u64,
}

/// Keys tracked for the dashboard at most; later ones are summed under `other`.
const MAX_KEYS: usize = 1000;

/// Counters and distributions the dashboard shows.
#[derive(Debug, Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub end_reasons: [AtomicU64; EndReason::ALL.len()],
    pub retries: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Tokens the upstreams reported (input plus output), all requests.
    pub tokens: AtomicU64,
    /// What the requests cost, in micro-dollars, as far as priced.
    pub spend_micros: AtomicU64,
    /// Request start → upstream response head.
    pub first_byte: LatencyHistogram,
    /// Streams: request start → first event sent to the client.
    pub first_event: LatencyHistogram,
    streams: Arc<StreamSet>,
    keys: Mutex<BTreeMap<String, KeyUsage>>,
}

/// Start times of the streams running now.
#[derive(Debug, Default)]
struct StreamSet {
    next: AtomicU64,
    started: Mutex<BTreeMap<(Instant, u64), ()>>,
}

/// A stream in [`Live`]'s set while this lives.
#[derive(Debug)]
pub struct StreamTicket {
    set: Arc<StreamSet>,
    key: (Instant, u64),
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        self.set.started.lock().remove(&self.key);
    }
}

/// The streams running now, as the dashboard shows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamAges {
    pub count: usize,
    pub oldest: Duration,
    pub mean: Duration,
}

impl Live {
    pub fn end(&self, reason: EndReason) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.end_reasons[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Registers a stream that started at `started`; it leaves the set when the ticket drops.
    pub fn stream(&self, started: Instant) -> StreamTicket {
        let key = (started, self.streams.next.fetch_add(1, Ordering::Relaxed));
        self.streams.started.lock().insert(key, ());
        StreamTicket {
            set: self.streams.clone(),
            key,
        }
    }

    pub fn stream_ages(&self, now: Instant) -> StreamAges {
        let set = self.streams.started.lock();
        let count = set.len();
        let Some(((oldest, _), _)) = set.first_key_value() else {
            return StreamAges::default();
        };
        let total: Duration = set
            .keys()
            .map(|(t, _)| now.saturating_duration_since(*t))
            .sum();
        StreamAges {
            count,
            oldest: now.saturating_duration_since(*oldest),
            mean: total / count as u32,
        }
    }

    /// Hook for the key stage: a request of `key` used these tokens and cost this much.
    #[allow(dead_code)] // called once API keys land (issue: keys and budgets)
    pub fn key_usage(&self, key: &str, input: u64, output: u64, spend_micros: u64) {
        let mut keys = self.keys.lock();
        let name = if keys.len() >= MAX_KEYS && !keys.contains_key(key) {
            "other"
        } else {
            key
        };
        let e = keys.entry(name.to_string()).or_default();
        e.requests += 1;
        e.input_tokens += input;
        e.output_tokens += output;
        e.spend_micros += spend_micros;
    }

    /// Per-key usage, highest spend first, at most `n`.
    pub fn top_keys(&self, n: usize) -> Vec<(String, KeyUsage)> {
        let keys = self.keys.lock();
        let mut v: Vec<_> = keys.iter().map(|(k, u)| (k.clone(), u.clone())).collect();
        v.sort_by(|a, b| {
            b.1.spend_micros
                .cmp(&a.1.spend_micros)
                .then(b.1.requests.cmp(&a.1.requests))
        });
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_land_in_the_right_bucket() {
        let h = LatencyHistogram::default();
        for _ in 0..98 {
            h.observe(Duration::from_millis(10));
        }
        h.observe(Duration::from_millis(900));
        h.observe(Duration::from_millis(900));
        let c = h.read();
        let p50 = quantile_ms(&c, 0.5).unwrap();
        let p99 = quantile_ms(&c, 0.99).unwrap();
        assert!((10.0..=14.2).contains(&p50), "{p50}");
        assert!((900.0..=1273.0).contains(&p99), "{p99}");
        assert_eq!(quantile_ms(&[0; LATENCY_BUCKETS], 0.5), None);
    }

    #[tokio::test(start_paused = true)]
    async fn stream_tickets_track_the_oldest() {
        let live = Live::default();
        let a = live.stream(Instant::now());
        tokio::time::advance(Duration::from_secs(3)).await;
        let b = live.stream(Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        let ages = live.stream_ages(Instant::now());
        assert_eq!((ages.count, ages.oldest), (2, Duration::from_secs(4)));
        drop(a);
        assert_eq!(
            live.stream_ages(Instant::now()).oldest,
            Duration::from_secs(1)
        );
        drop(b);
        assert_eq!(live.stream_ages(Instant::now()), StreamAges::default());
    }
}
