//! The JSON text of one SQLite row (see [`super::schema::SQLITE_ROWS`]): an array of records,
//! each an array of its values in [`super::schema::COLUMNS`] order.
//!
//! Written by hand rather than through `serde_json`: a record is 33 values of a handful of
//! shapes (integers, booleans, nulls and short strings that almost never need escaping), and
//! the generic serializer's per-value dispatch was ~1.6 K instructions a record on the
//! writer's thread, which shares the gateway's CPU (`bench/ledger_insert.sh`).

use crate::record::{sat_i64, RequestRecord};

/// A reusable buffer for rows.
#[derive(Debug, Default)]
pub(crate) struct JsonRow {
    out: String,
}

impl JsonRow {
    /// `records` as one row's JSON; the text lives until the next call.
    pub(crate) fn records(&mut self, records: &[RequestRecord]) -> &str {
        self.out.clear();
        self.out.push('[');
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            record(&mut self.out, r);
        }
        self.out.push(']');
        &self.out
    }
}

/// One record as a JSON array, in [`super::schema::COLUMNS`] order.
pub(crate) fn record(out: &mut String, r: &RequestRecord) {
    let t = &r.tokens;
    let capture = r.capture.as_deref();
    out.push('[');
    int(out, r.ts_us);
    out.push(',');
    string(out, &r.request_id);
    for v in [&r.key_id, &r.team, &r.owner] {
        out.push(',');
        opt_string(out, v.as_deref());
    }
    out.push(',');
    string(out, &r.route);
    out.push(',');
    known(out, r.client_api);
    for v in [
        &r.requested_model,
        &r.served_model,
        &r.upstream,
        &r.provider,
    ] {
        out.push(',');
        opt_string(out, v.as_deref());
    }
    out.push(',');
    int(out, i64::from(r.attempts));
    out.push(',');
    if r.attempt_classes.is_empty() {
        out.push_str("null");
    } else {
        // Classes are fixed identifiers (`status_429`, `connect`, ...), joined as the other
        // sinks store them.
        out.push('"');
        for (i, c) in r.attempt_classes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(c);
        }
        out.push('"');
    }
    out.push(',');
    int(out, i64::from(r.status));
    out.push(',');
    known(out, r.end_reason);
    out.push(',');
    boolean(out, r.stream);
    for v in [
        t.input,
        t.output,
        t.cache_read,
        t.cache_write,
        t.cache_write_1h,
        t.reasoning,
    ] {
        out.push(',');
        int(out, sat_i64(v));
    }
    out.push(',');
    int(out, i64::from(r.pricing.code()));
    out.push(',');
    opt_string(out, r.pricing.entry());
    out.push(',');
    opt_int(out, r.pricing.cost_micros());
    out.push(',');
    opt_int(out, r.latency.first_byte_us.map(sat_i64));
    out.push(',');
    opt_int(out, r.latency.first_token_us.map(sat_i64));
    out.push(',');
    int(out, sat_i64(r.latency.total_us));
    out.push(',');
    boolean(out, r.cache_hit);
    out.push(',');
    boolean(out, r.idempotent_replay);
    out.push(',');
    opt_string(out, capture.map(|c| c.prompt.as_str()));
    out.push(',');
    opt_string(out, capture.map(|c| c.response.as_str()));
    out.push(',');
    match capture {
        Some(c) => boolean(out, c.prompt_truncated || c.response_truncated),
        None => out.push_str("null"),
    }
    out.push(',');
    opt_string(out, r.guardrails.as_deref());
    out.push(']');
}

fn boolean(out: &mut String, v: bool) {
    out.push_str(if v { "true" } else { "false" });
}

fn int(out: &mut String, v: i64) {
    out.push_str(itoa::Buffer::new().format(v));
}

fn opt_int(out: &mut String, v: Option<i64>) {
    match v {
        Some(v) => int(out, v),
        None => out.push_str("null"),
    }
}

fn string(out: &mut String, s: &str) {
    out.push('"');
    escaped(out, s);
    out.push('"');
}

fn opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}

/// A string of the gateway's own fixed vocabulary (client APIs, end reasons, attempt
/// classes: lowercase identifiers), which never needs escaping.
fn known(out: &mut String, s: &'static str) {
    debug_assert!(!needs_escape(s.as_bytes()), "{s}");
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// `s` with JSON's escapes (RFC 8259 §7): the quote, the backslash and the control characters;
/// everything else, non-ASCII included, is written as it is. Names and ids almost never hold
/// one, so the check runs eight bytes at a time and the byte loop only when one is there.
fn escaped(out: &mut String, s: &str) {
    if !needs_escape(s.as_bytes()) {
        out.push_str(s);
        return;
    }
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// Whether `b` holds a byte JSON must escape: `"`, `\` or one below 0x20.
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero exactly when the lane's high bit survives here (the classic
    // "has a zero byte" test, exact once the false positives of the borrow are masked by !x).
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        // Bytes below 0x20: those whose top three bits are all zero.
        let low = zero(x & 0xe0e0_e0e0_e0e0_e0e0);
        if low | zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\'))) != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&c| c < 0x20 || c == b'"' || c == b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written text parses as JSON and holds the same strings and integers that
    /// `serde_json` would write, escapes included.
    #[test]
    fn strings_and_integers_round_trip_through_serde_json() {
        let samples = [
            "",
            "plain",
            "quote \" and backslash \\",
            "lines\nand\rtabs\t",
            "controls \u{0}\u{1}\u{1f} and DEL \u{7f}",
            "non-ASCII: é 中文 🦀",
        ];
        for s in samples {
            let mut out = String::new();
            string(&mut out, s);
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, s, "{out}");
        }
        for v in [0, 1, -1, 9, 10, 12_345, i64::MAX, i64::MIN, -987_654_321] {
            let mut out = String::new();
            int(&mut out, v);
            assert_eq!(out, v.to_string());
        }
    }

    /// The eight-at-a-time check agrees with the byte-by-byte one for every byte value at
    /// every position of a word and of the tail.
    #[test]
    fn the_word_check_finds_every_byte_that_needs_escaping() {
        for len in [1, 7, 8, 9, 16, 19] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    let want = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(needs_escape(&s), want, "len {len} at {at} byte {b:#x}");
                }
            }
        }
    }
}
