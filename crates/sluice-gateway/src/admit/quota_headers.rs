//! `x-ratelimit-limit-*`, `x-ratelimit-remaining-*`, `x-ratelimit-reset-*`: the headers the
//! OpenAI API sends and clients read (`requests`, `tokens`), plus `concurrency` and `budget`.
//! With several checks of one kind (the key's, the key's on this model, the route's), the one
//! with the least left speaks: it is the one that will refuse first.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sluice_state::{CheckKind, Quota};

use crate::config::{Config, Limits};

/// The `x-ratelimit-limit-*` values of every configured limit, formatted once at startup.
///
/// NOTE: the strings are leaked on purpose: there is one per distinct configured limit, they
/// live as long as the config, and a `'static` value is cloned into a response for free (no
/// allocation, no reference count), where formatting it per response cost an allocation.
#[derive(Debug, Default)]
pub(crate) struct LimitValues {
    counts: HashMap<u64, HeaderValue, IntHash>,
    money: HashMap<u64, HeaderValue, IntHash>,
}

impl LimitValues {
    pub(crate) fn new(config: &Config) -> Self {
        let mut v = LimitValues::default();
        let mut add = |l: &Limits| {
            let counts = [
                l.requests.map(|r| r.limit),
                l.tokens.map(|t| t.limit),
                l.concurrency,
            ];
            for n in counts.into_iter().flatten() {
                v.counts.entry(n).or_insert_with(|| leak(n.to_string()));
            }
        };
        for r in &config.routes {
            add(&r.limits);
        }
        for k in &config.keys {
            add(&k.limits);
            for m in &k.model_limits {
                add(&m.limits);
            }
        }
        for b in config.keys.iter().filter_map(|k| k.budget) {
            let mut buf = Buf::default();
            write_money(&mut buf, b.limit_micros);
            let s = buf.as_str().to_string();
            v.money.entry(b.limit_micros).or_insert_with(|| leak(s));
        }
        v
    }

    fn count(&self, n: u64) -> HeaderValue {
        self.counts
            .get(&n)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from(n))
    }

    fn money(&self, micros: u64) -> HeaderValue {
        self.money
            .get(&micros)
            .cloned()
            .unwrap_or_else(|| money_value(micros))
    }
}

fn leak(s: String) -> HeaderValue {
    HeaderValue::from_static(Box::leak(s.into_boxed_str()))
}

/// Hashes the integer keys of [`LimitValues`]: a multiply is enough for a map no client can
/// fill.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IntHash;

impl BuildHasher for IntHash {
    type Hasher = IntHasher;
    fn build_hasher(&self) -> IntHasher {
        IntHasher(0)
    }
}

#[derive(Debug)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

static KINDS: [(CheckKind, [HeaderName; 3]); 4] = [
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

/// The headers of `quotas` (skipping the indices set in `hidden`), appended to `out`: at most
/// 11 pairs. The per-request values are written into one buffer and handed out as slices of
/// it: one allocation for all of them, where a value each cost eight.
pub(crate) fn collect(
    out: &mut Vec<(HeaderName, HeaderValue)>,
    quotas: &[Quota],
    hidden: u32,
    values: &LimitValues,
) {
    let mut buf = bytes::BytesMut::with_capacity(128);
    // (index in `out`, range in `buf`) of the values written per request.
    let mut written = [(0usize, 0usize, 0usize); 11];
    let mut n = 0;
    let mut write = |out: &mut Vec<(HeaderName, HeaderValue)>, name: &HeaderName, b: &Buf| {
        if let Some(slot) = written.get_mut(n) {
            let start = buf.len();
            buf.extend_from_slice(&b.bytes[..b.len]);
            *slot = (out.len(), start, buf.len());
            n += 1;
            out.push((name.clone(), HeaderValue::from_static("0")));
        }
    };
    for (kind, [limit, remaining, reset]) in &KINDS {
        let mut tightest: Option<&Quota> = None;
        for (i, q) in quotas.iter().enumerate() {
            if q.kind != *kind || hidden & (1 << i) != 0 {
                continue;
            }
            let better = tightest
                .is_none_or(|t| (q.remaining, t.reset_after) < (t.remaining, q.reset_after));
            if better {
                tightest = Some(q);
            }
        }
        let Some(q) = tightest else { continue };
        let mut b = Buf::default();
        if *kind == CheckKind::Budget {
            out.push((limit.clone(), values.money(q.limit)));
            write_money(&mut b, q.remaining);
        } else {
            out.push((limit.clone(), values.count(q.limit)));
            b.num(q.remaining);
        }
        write(out, remaining, &b);
        if *kind != CheckKind::Concurrency {
            let mut b = Buf::default();
            write_reset(&mut b, q.reset_after);
            write(out, reset, &b);
        }
    }
    let shared = buf.freeze();
    for &(i, a, b) in &written[..n] {
        if let (Some(slot), Ok(v)) = (
            out.get_mut(i),
            HeaderValue::from_maybe_shared(shared.slice(a..b)),
        ) {
            slot.1 = v;
        }
    }
}

/// Inserts the headers of `quotas` into `h` (for responses built in one piece).
pub(crate) fn insert(h: &mut HeaderMap, quotas: &[Quota], hidden: u32) {
    let mut pairs = Vec::with_capacity(11);
    collect(&mut pairs, quotas, hidden, &LimitValues::default());
    for (n, v) in pairs {
        h.insert(n, v);
    }
}

fn money_value(micros: u64) -> HeaderValue {
    let mut b = Buf::default();
    write_money(&mut b, micros);
    b.value()
}

/// A small stack buffer for header values: numbers and units only, so always a valid value.
pub(crate) struct Buf {
    bytes: [u8; 48],
    len: usize,
}

impl Default for Buf {
    fn default() -> Self {
        Buf {
            bytes: [0; 48],
            len: 0,
        }
    }
}

impl Buf {
    fn push(&mut self, s: &[u8]) {
        let end = (self.len + s.len()).min(self.bytes.len());
        self.bytes[self.len..end].copy_from_slice(&s[..end - self.len]);
        self.len = end;
    }

    fn num(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    /// `n` with exactly `width` digits (leading zeros).
    fn padded(&mut self, n: u64, width: usize) {
        let mut digits = [b'0'; 20];
        let mut n = n;
        for d in digits[..width].iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.push(&digits[..width]);
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII digits, `.` and unit letters are ever pushed.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }

    fn value(&self) -> HeaderValue {
        HeaderValue::from_bytes(&self.bytes[..self.len])
            .unwrap_or_else(|_| HeaderValue::from_static("0"))
    }
}

/// Micro-units as an amount with at least two decimals: `20.00`, `0.0125`, `0.000001`.
pub(crate) fn write_money(b: &mut Buf, micros: u64) {
    b.num(micros / 1_000_000);
    b.push(b".");
    let mut frac = micros % 1_000_000;
    let mut width = 6;
    while width > 2 && frac % 10 == 0 {
        frac /= 10;
        width -= 1;
    }
    b.padded(frac, width);
}

/// A reset time as the OpenAI API writes it (Go's duration format): `250ms`, `1s`, `1.5s`,
/// `6m0s`, `2h0m0s`.
pub(crate) fn write_reset(b: &mut Buf, d: Duration) {
    if d < Duration::from_secs(1) {
        // Never "0ms" for a counter that is not full yet.
        b.num(d.as_micros().div_ceil(1000) as u64);
        b.push(b"ms");
        return;
    }
    let total_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (h, rest) = (total_ms / 3_600_000, total_ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    if h > 0 {
        b.num(h);
        b.push(b"h");
    }
    if h > 0 || m > 0 {
        b.num(m);
        b.push(b"m");
    }
    b.num(rest / 1000);
    let mut ms = rest % 1000;
    if ms > 0 {
        b.push(b".");
        let mut width = 3;
        while ms % 10 == 0 {
            ms /= 10;
            width -= 1;
        }
        b.padded(ms, width);
    }
    b.push(b"s");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reset_value(d: Duration) -> String {
        let mut b = Buf::default();
        write_reset(&mut b, d);
        b.as_str().to_string()
    }

    #[test]
    fn resets_in_gos_format() {
        assert_eq!(reset_value(Duration::ZERO), "0ms");
        assert_eq!(reset_value(Duration::from_micros(1500)), "2ms");
        assert_eq!(reset_value(Duration::from_secs(1)), "1s");
        assert_eq!(reset_value(Duration::from_millis(1500)), "1.5s");
        assert_eq!(reset_value(Duration::from_secs(360)), "6m0s");
        assert_eq!(reset_value(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(reset_value(Duration::from_millis(61_250)), "1m1.25s");
        assert_eq!(reset_value(Duration::from_millis(3_600_001)), "1h0m0.001s");
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
