//! Latency summaries: exact percentiles over every sample (runs are bounded, so keeping them
//! all is cheap and avoids a histogram's rounding).

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// The nearest-rank percentile (`q` in 0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// [`percentile`] over sorted milliseconds; 0 when there are none.
pub fn percentile_f64(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// Summarises samples in milliseconds (any order). The samples' own values, not a round
    /// trip through `Duration`, which can move one by a unit in the last place: a report's
    /// charts, drawn from the samples, must show the same maximum as its summary.
    pub fn of_ms(samples: impl IntoIterator<Item = f64>) -> Summary {
        let mut ms: Vec<f64> = samples.into_iter().map(|v| v.max(0.0)).collect();
        if ms.is_empty() {
            return Summary::default();
        }
        ms.sort_unstable_by(f64::total_cmp);
        Summary {
            count: ms.len(),
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
            p50_ms: percentile_f64(&ms, 0.50),
            p90_ms: percentile_f64(&ms, 0.90),
            p95_ms: percentile_f64(&ms, 0.95),
            p99_ms: percentile_f64(&ms, 0.99),
            p999_ms: percentile_f64(&ms, 0.999),
            max_ms: ms[ms.len() - 1],
        }
    }

    /// Summarises `samples` (any order).
    pub fn of(mut samples: Vec<Duration>) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let total: Duration = samples.iter().sum();
        Summary {
            count: samples.len(),
            mean_ms: ms(total) / samples.len() as f64,
            p50_ms: ms(percentile(&samples, 0.50)),
            p90_ms: ms(percentile(&samples, 0.90)),
            p95_ms: ms(percentile(&samples, 0.95)),
            p99_ms: ms(percentile(&samples, 0.99)),
            p999_ms: ms(percentile(&samples, 0.999)),
            max_ms: ms(*samples.last().unwrap_or(&Duration::ZERO)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_summarised_as_they_are() {
        // 10.655005 ms went through `Duration` as 10.655005000000001.
        let s = Summary::of_ms([3.5, 10.655005, 1.25]);
        assert_eq!(s.max_ms, 10.655005);
        assert_eq!((s.count, s.p50_ms), (3, 3.5));
        assert_eq!(s.mean_ms, (3.5 + 10.655005 + 1.25) / 3.0);
        assert_eq!(Summary::of_ms([]), Summary::default());
        assert_eq!(Summary::of_ms([-1.0]).max_ms, 0.0);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<_> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&s, 0.5), ms(50));
        assert_eq!(percentile(&s, 0.99), ms(99));
        assert_eq!(percentile(&s, 1.0), ms(100));
        assert_eq!(percentile(&s, 0.0), ms(1));
        assert_eq!(percentile(&[ms(7)], 0.999), ms(7));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn summary_of_unsorted_samples() {
        let s = Summary::of(vec![ms(30), ms(10), ms(20), ms(40)]);
        assert_eq!(s.count, 4);
        assert_eq!(s.p50_ms, 20.0);
        assert_eq!(s.p95_ms, 40.0);
        assert_eq!(s.max_ms, 40.0);
        assert_eq!(s.mean_ms, 25.0);
        assert_eq!(Summary::of(vec![]).count, 0);
    }
}
