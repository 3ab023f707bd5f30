//! W3C Trace Context: the `traceparent` header a request arrives with and the one sent
//! upstream (<https://www.w3.org/TR/trace-context/>).

use http::HeaderValue;

/// The `sampled` bit of the trace flags.
const SAMPLED: u8 = 0x01;

/// A span's place in a trace, as `traceparent` carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The parent (or, sent upstream, our) span id; 8 bytes, never all zero.
    pub span_id: [u8; 8],
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// Parses `00-<32 hex>-<16 hex>-<2 hex>`. Later versions are read by their version-00
    /// prefix, as the spec asks; version `ff`, all-zero ids and upper-case hex are refused.
    pub fn parse(value: &[u8]) -> Option<TraceContext> {
        if value.len() < 55 {
            return None;
        }
        let version = hex_u8(&value[0..2])?;
        if version == 0xff || (version == 0 && value.len() != 55) {
            return None;
        }
        if version != 0 && value.get(55).is_some_and(|&b| b != b'-') {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_u8(&value[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_u8(&value[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_u8(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Whether the caller recorded its span (and asks us to record ours).
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The `traceparent` header value (version 00).
    pub fn header(&self) -> HeaderValue {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        // Only hex digits and dashes: always a valid header value.
        HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("00"))
    }
}

fn hex_u8(two: &[u8]) -> Option<u8> {
    let d = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(d(two[0])? << 4 | d(two[1])?)
}

/// Lower-case hex, as `traceparent` and OTLP/JSON spell ids.
pub fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
}

/// A random, non-zero trace id.
pub fn new_trace_id(rng: &mut fastrand::Rng) -> [u8; 16] {
    loop {
        let id = rng.u128(..).to_be_bytes();
        if id != [0; 16] {
            return id;
        }
    }
}

/// A random, non-zero span id.
pub fn new_span_id(rng: &mut fastrand::Rng) -> [u8; 8] {
    loop {
        let id = rng.u64(..).to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// OpenTelemetry's `TraceIdRatioBased`: the low 8 bytes of the id against ratio × 2^63, so
/// every service with the same ratio keeps the same traces.
pub fn ratio_sampled(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    (x as f64) < ratio * (1u64 << 63) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip_and_refusals() {
        let v = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = TraceContext::parse(v).unwrap();
        assert!(c.sampled());
        assert_eq!(c.header().as_bytes(), v);
        assert_eq!(c.trace_id[0], 0x4b);
        let unsampled =
            TraceContext::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().sampled());
        // A future version with more fields is read by its 00 prefix.
        assert!(TraceContext::parse(
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"
        )
        .is_some());
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"",
        ] {
            assert!(
                TraceContext::parse(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn ratio_sampling_keeps_about_the_ratio() {
        let mut rng = fastrand::Rng::with_seed(7);
        let kept = (0..20_000)
            .filter(|_| ratio_sampled(&new_trace_id(&mut rng), 0.1))
            .count();
        assert!((1_700..2_300).contains(&kept), "{kept}");
        assert!(ratio_sampled(&[1; 16], 1.0));
        assert!(!ratio_sampled(&[1; 16], 0.0));
    }
}
