//! `x-ratelimit-limit-*`, `x-ratelimit-remaining-*`, `x-ratelimit-reset-*`: the headers the
//! OpenAI API sends and clients read (`requests`, `tokens`), plus `concurrency` and `budget`.
//! With several checks of one kind (the key's, the key's on this model, the route's), the one
//! with the least left speaks: it is the one that will refuse first.

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sluice_state::{CheckKind, Quota};

const KINDS: [(CheckKind, [HeaderName; 3]); 4] = [
    (
        CheckKind::Requests,
        [
            HeaderName::from_static("x-ratelimit-limit-requests"),
            HeaderName::from_static("x-ratelimit-remaining-requests"),
            HeaderName::from_static("x-ratelimit-reset-requests"),
        ],
    ),
    (
        CheckKind::Tokens,
        [
            HeaderName::from_static("x-ratelimit-limit-tokens"),
            HeaderName::from_static("x-ratelimit-remaining-tokens"),
            HeaderName::from_static("x-ratelimit-reset-tokens"),
        ],
    ),
    (
        CheckKind::Concurrency,
        [
            HeaderName::from_static("x-ratelimit-limit-concurrency"),
            HeaderName::from_static("x-ratelimit-remaining-concurrency"),
            HeaderName::from_static("x-ratelimit-reset-concurrency"),
        ],
    ),
    (
        CheckKind::Budget,
        [
            HeaderName::from_static("x-ratelimit-limit-budget"),
            HeaderName::from_static("x-ratelimit-remaining-budget"),
            HeaderName::from_static("x-ratelimit-reset-budget"),
        ],
    ),
];

/// Inserts the headers of `quotas`, skipping the indices set in `hidden`.
pub(crate) fn insert(h: &mut HeaderMap, quotas: &[Quota], hidden: u32) {
    for (kind, [limit, remaining, reset]) in &KINDS {
        let tightest = quotas
            .iter()
            .enumerate()
            .filter(|(i, q)| q.kind == *kind && hidden & (1 << i) == 0)
            .map(|(_, q)| q)
            .min_by_key(|q| (q.remaining, std::cmp::Reverse(q.reset_after)));
        let Some(q) = tightest else { continue };
        if *kind == CheckKind::Budget {
            h.insert(limit.clone(), money_value(q.limit));
            h.insert(remaining.clone(), money_value(q.remaining));
        } else {
            h.insert(limit.clone(), HeaderValue::from(q.limit));
            h.insert(remaining.clone(), HeaderValue::from(q.remaining));
        }
        if *kind != CheckKind::Concurrency {
            if let Ok(v) = HeaderValue::from_str(&reset_value(q.reset_after)) {
                h.insert(reset.clone(), v);
            }
        }
    }
}

fn money_value(micros: u64) -> HeaderValue {
    HeaderValue::from_str(&super::refusal::money(micros))
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A reset time as the OpenAI API writes it (Go's duration format): `250ms`, `1s`, `1.5s`,
/// `6m0s`, `2h0m0s`.
pub(crate) fn reset_value(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        // Never "0ms" for a counter that is not full yet.
        let ms = d.as_micros().div_ceil(1000);
        return format!("{ms}ms");
    }
    let total_ms = d.as_millis();
    let (h, rest) = (total_ms / 3_600_000, total_ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let s = format!("{}.{:03}", rest / 1000, rest % 1000);
        format!("{}s", s.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_in_gos_format() {
        assert_eq!(reset_value(Duration::ZERO), "0ms");
        assert_eq!(reset_value(Duration::from_micros(1500)), "2ms");
        assert_eq!(reset_value(Duration::from_secs(1)), "1s");
        assert_eq!(reset_value(Duration::from_millis(1500)), "1.5s");
        assert_eq!(reset_value(Duration::from_secs(360)), "6m0s");
        assert_eq!(reset_value(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(reset_value(Duration::from_millis(61_250)), "1m1.25s");
    }

    #[test]
    fn the_tightest_check_of_each_kind_speaks() {
        let q = |kind, limit, remaining, reset_ms| Quota {
            kind,
            limit,
            remaining,
            used: limit - remaining,
            reset_after: Duration::from_millis(reset_ms),
        };
        let quotas = [
            q(CheckKind::Requests, 600, 500, 10_000),
            q(CheckKind::Requests, 10, 3, 700),
            q(CheckKind::Tokens, 1000, 900, 6000),
            q(CheckKind::Budget, 20_000_000, 19_987_500, 3_600_000),
            q(CheckKind::Budget, 1 << 50, 1 << 49, 1),
        ];
        let mut h = HeaderMap::new();
        insert(&mut h, &quotas, 1 << 4);
        assert_eq!(h["x-ratelimit-limit-requests"], "10");
        assert_eq!(h["x-ratelimit-remaining-requests"], "3");
        assert_eq!(h["x-ratelimit-reset-requests"], "700ms");
        assert_eq!(h["x-ratelimit-remaining-tokens"], "900");
        assert_eq!(h["x-ratelimit-reset-tokens"], "6s");
        assert_eq!(h["x-ratelimit-limit-budget"], "20.00");
        assert_eq!(h["x-ratelimit-remaining-budget"], "19.9875");
        assert!(!h.contains_key("x-ratelimit-limit-concurrency"));
    }
}
