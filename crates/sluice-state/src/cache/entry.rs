//! What the cache keeps of a response ([`CachedResponse`]), what names it ([`CacheKey`]), and
//! its stored form in Redis (the envelope).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, StatusCode};

use crate::idempotency::{decode_headers, encode_headers, headers_len};
use crate::StateError;

/// Bytes an entry costs the memory bound beyond its content: the index slot, the node, the
/// `Arc` and the response's own fields. An estimate, so that many tiny entries are bounded too.
pub(crate) const ENTRY_OVERHEAD: usize = 192;
/// The same per stored event (its `Bytes` and offset).
pub(crate) const EVENT_OVERHEAD: usize = 48;

/// Names one cached answer.
///
/// `digest` is `sluice_providers::cache_key::cache_key(endpoint, served model, canonical body,
/// namespace)`; `route` and `namespace` are kept beside it so a route or a namespace can be
/// purged, and an entry is only answered to the same route and namespace that stored it (a
/// second guard, beside the digest, that one key never sees another's answers).
#[derive(Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// SHA-256 of everything that changes the answer, the namespace included.
    pub digest: [u8; 32],
    /// The route that stores and serves it (for [`crate::CacheScope::Route`]).
    pub route: Arc<str>,
    /// Whose answers these are: the virtual key's id by default, or a name every key of a
    /// sharing route uses (for [`crate::CacheScope::Namespace`]). At most 65,535 bytes.
    pub namespace: Arc<str>,
}

impl CacheKey {
    /// The digest in lowercase hex (its name in Redis, and in logs).
    pub fn hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for b in self.digest {
            out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        out
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheKey")
            .field("digest", &format_args!("{}…", &self.hex()[..12]))
            .field("route", &self.route)
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// A complete success kept for replay (DESIGN.md invariant 14): a non-streaming 200, or a
/// stream that ended with its terminal event and a finish reason. The gateway decides that;
/// the cache refuses any other status ([`crate::PutOutcome::NotCacheable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedResponse {
    /// Its status: 200.
    pub status: StatusCode,
    /// The headers replayed with it (the gateway selects them, as for idempotency records:
    /// e.g. `content-type`; never hop-by-hop headers, `date`, rate-limit or request ids).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The answer: one body, or a stream's events.
    pub body: CachedBody,
    /// The tokens the answer cost upstream: what a hit saves, for the ledger.
    pub usage: CachedUsage,
    /// When the answer completed (wall clock); informational: `Age` comes from the store.
    pub stored_at: SystemTime,
}

/// The answer of a [`CachedResponse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CachedBody {
    /// A non-streaming body.
    Whole(Bytes),
    /// A stream's events in the client's API, each complete (`data: ...\n\n`, with its `event:`
    /// line if any), the terminal one included; a hit on a non-streaming request assembles
    /// them into one body.
    Events(Vec<CachedEvent>),
}

/// One event of a stored stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEvent {
    /// The event's bytes as sent to the client.
    pub bytes: Bytes,
    /// When it was sent, from the start of the response: the pace of a `replay = "paced"`
    /// hit. Stored in whole milliseconds (up to 49 days).
    pub offset: Duration,
}

/// Tokens of a cached answer (the same counts as `sluice_providers::Usage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedUsage {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Generated tokens, reasoning included.
    pub output: u64,
    /// Prompt tokens read from the provider's cache (a subset of `input`).
    pub cached_input: u64,
    /// Reasoning tokens (a subset of `output`).
    pub reasoning: u64,
}

impl CachedResponse {
    /// The bytes it counts against a route's `max_bytes`: body or events, header names and
    /// values.
    pub fn stored_len(&self) -> usize {
        let content = match &self.body {
            CachedBody::Whole(body) => body.len(),
            CachedBody::Events(events) => events.iter().map(|e| e.bytes.len()).sum(),
        };
        content + headers_len(&self.headers)
    }

    /// Whether it was a stream.
    pub fn is_stream(&self) -> bool {
        matches!(self.body, CachedBody::Events(_))
    }

    /// What it costs the memory store's byte bound: [`CachedResponse::stored_len`] plus an
    /// estimate of the structures around it.
    pub(crate) fn footprint(&self) -> usize {
        let events = match &self.body {
            CachedBody::Whole(_) => 0,
            CachedBody::Events(events) => events.len(),
        };
        self.stored_len() + ENTRY_OVERHEAD + EVENT_OVERHEAD * events
    }

    /// The same response holding one buffer of its own: the relay's `Bytes` may be slices of
    /// larger upstream reads, which a cached entry would otherwise keep alive unaccounted.
    pub(crate) fn compact(self) -> CachedResponse {
        let body = match self.body {
            CachedBody::Whole(body) => CachedBody::Whole(Bytes::copy_from_slice(&body)),
            CachedBody::Events(events) => {
                let total = events.iter().map(|e| e.bytes.len()).sum();
                let mut buf = BytesMut::with_capacity(total);
                for e in &events {
                    buf.extend_from_slice(&e.bytes);
                }
                let mut all = buf.freeze();
                CachedBody::Events(
                    events
                        .into_iter()
                        .map(|e| CachedEvent {
                            bytes: all.split_to(e.bytes.len()),
                            offset: e.offset,
                        })
                        .collect(),
                )
            }
        };
        CachedResponse { body, ..self }
    }
}

// === envelope ===

/// Marks the envelope's format; another value is read as a miss (written by another version).
const MAGIC: &[u8; 4] = b"SQC1";
const WHOLE: u8 = 0;
const EVENTS: u8 = 1;

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .min(u128::from(u64::MAX)) as u64
}

/// An entry as Redis keeps it: one binary value, big-endian.
///
/// ```text
/// "SQC1" | u64 stored_at (Unix ms) | u64 TTL ms | u16 status | 4 × u64 usage
///        | u16 len, route | u16 len, namespace | u32 len, headers
///        | u8 0 | body                                  (a whole body: the rest)
///        | u8 1 | u32 n | n × (u32 offset ms, u32 len) | the events' bytes, one after another
/// ```
///
/// NOTE: binary rather than JSON: bodies and events are stored as they are (no escaping), and
/// reading it back slices one buffer instead of parsing.
pub(crate) fn encode(key: &CacheKey, entry: &CachedResponse, ttl: Duration) -> Vec<u8> {
    let headers = encode_headers(&entry.headers);
    let mut out = BytesMut::with_capacity(
        entry.stored_len() + headers.len() + key.route.len() + key.namespace.len() + 96,
    );
    out.put_slice(MAGIC);
    out.put_u64(unix_ms(entry.stored_at));
    out.put_u64(ttl.as_millis().min(u128::from(u64::MAX)) as u64);
    out.put_u16(entry.status.as_u16());
    let u = entry.usage;
    for n in [u.input, u.output, u.cached_input, u.reasoning] {
        out.put_u64(n);
    }
    for name in [&key.route, &key.namespace] {
        out.put_u16(name.len() as u16);
        out.put_slice(name.as_bytes());
    }
    out.put_u32(headers.len() as u32);
    out.put_slice(&headers);
    match &entry.body {
        CachedBody::Whole(body) => {
            out.put_u8(WHOLE);
            out.put_slice(body);
        }
        CachedBody::Events(events) => {
            out.put_u8(EVENTS);
            out.put_u32(events.len() as u32);
            for e in events {
                out.put_u32(e.offset.as_millis().min(u128::from(u32::MAX)) as u32);
                out.put_u32(e.bytes.len() as u32);
            }
            for e in events {
                out.put_slice(&e.bytes);
            }
        }
    }
    out.to_vec()
}

/// An envelope read back: the entry, the route and namespace that stored it, its TTL.
pub(crate) struct Decoded {
    pub entry: CachedResponse,
    pub route: Bytes,
    pub namespace: Bytes,
    pub ttl: Duration,
}

/// A cursor over an envelope; running short is [`StateError::Corrupt`].
struct Reader {
    buf: Bytes,
}

impl Reader {
    fn take(&mut self, n: usize) -> Result<Bytes, StateError> {
        if self.buf.len() < n {
            return Err(StateError::Corrupt("truncated cache entry"));
        }
        Ok(self.buf.split_to(n))
    }

    fn u16(&mut self) -> Result<u16, StateError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, StateError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, StateError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Ok(u64::from_be_bytes(a))
    }
}

/// The reverse of [`encode`]. The body and events are slices of `buf`, not copies.
pub(crate) fn decode(buf: Bytes) -> Result<Decoded, StateError> {
    let mut r = Reader { buf };
    if &r.take(4)?[..] != MAGIC {
        return Err(StateError::Corrupt("cache entry of another format"));
    }
    let stored_at = UNIX_EPOCH + Duration::from_millis(r.u64()?);
    let ttl = Duration::from_millis(r.u64()?);
    let status = StatusCode::from_u16(r.u16()?).map_err(|_| StateError::Corrupt("status code"))?;
    let usage = CachedUsage {
        input: r.u64()?,
        output: r.u64()?,
        cached_input: r.u64()?,
        reasoning: r.u64()?,
    };
    let len = r.u16()?;
    let route = r.take(usize::from(len))?;
    let len = r.u16()?;
    let namespace = r.take(usize::from(len))?;
    let len = r.u32()?;
    let headers = decode_headers(&r.take(len as usize)?)?;
    let body = match r.take(1)?[0] {
        WHOLE => CachedBody::Whole(std::mem::take(&mut r.buf)),
        EVENTS => {
            let n = r.u32()? as usize;
            if n > r.buf.len() / 8 {
                return Err(StateError::Corrupt("truncated cache entry"));
            }
            let mut spans = Vec::with_capacity(n);
            for _ in 0..n {
                spans.push((r.u32()?, r.u32()?));
            }
            let mut events = Vec::with_capacity(n);
            for (offset, len) in spans {
                events.push(CachedEvent {
                    bytes: r.take(len as usize)?,
                    offset: Duration::from_millis(u64::from(offset)),
                });
            }
            if !r.buf.is_empty() {
                return Err(StateError::Corrupt("trailing bytes in cache entry"));
            }
            CachedBody::Events(events)
        }
        _ => return Err(StateError::Corrupt("cache entry body kind")),
    };
    Ok(Decoded {
        entry: CachedResponse {
            status,
            headers,
            body,
            usage,
            stored_at,
        },
        route,
        namespace,
        ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn key(route: &str, namespace: &str) -> CacheKey {
        CacheKey {
            digest: [7; 32],
            route: Arc::from(route),
            namespace: Arc::from(namespace),
        }
    }

    fn stream() -> CachedResponse {
        let big =
            Bytes::from_static(b"data: {\"a\":1}\n\ndata: [DONE]\n\nunrelated upstream bytes");
        CachedResponse {
            status: StatusCode::OK,
            headers: vec![(
                HeaderName::from_static("content-type"),
                HeaderValue::from_static("text/event-stream"),
            )],
            body: CachedBody::Events(vec![
                CachedEvent {
                    bytes: big.slice(0..15),
                    offset: Duration::from_millis(3),
                },
                CachedEvent {
                    bytes: big.slice(15..29),
                    offset: Duration::from_millis(250),
                },
            ]),
            usage: CachedUsage {
                input: 12,
                output: 3,
                cached_input: 0,
                reasoning: 1,
            },
            stored_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        }
    }

    #[test]
    fn envelopes_round_trip_and_damage_is_corrupt() {
        let key = key("chat", "key:k42");
        for entry in [
            stream(),
            CachedResponse {
                body: CachedBody::Whole(Bytes::from_static(b"{\"id\":1}")),
                ..stream()
            },
        ] {
            let bytes = Bytes::from(encode(&key, &entry, Duration::from_secs(3600)));
            let back = decode(bytes.clone()).unwrap();
            assert_eq!(back.entry, entry);
            assert_eq!(&back.route[..], b"chat");
            assert_eq!(&back.namespace[..], b"key:k42");
            assert_eq!(back.ttl, Duration::from_secs(3600));
            for cut in [3, 20, 70, bytes.len() - 1] {
                if entry.is_stream() || cut < 70 {
                    assert!(decode(bytes.slice(..cut)).is_err(), "cut at {cut}");
                }
            }
            let mut other = bytes.to_vec();
            other[3] = b'2';
            assert!(decode(Bytes::from(other)).is_err());
        }
    }

    #[test]
    fn compacting_drops_the_rest_of_the_upstream_buffer() {
        let entry = stream();
        let compact = entry.clone().compact();
        assert_eq!(compact, entry);
        let CachedBody::Events(events) = &compact.body else {
            unreachable!()
        };
        // Both events are slices of one buffer holding exactly their bytes.
        assert_eq!(
            events[0].bytes.as_ptr().wrapping_add(events[0].bytes.len()),
            events[1].bytes.as_ptr()
        );
        assert_eq!(compact.stored_len(), 29 + "content-type".len() + 17);
    }
}
