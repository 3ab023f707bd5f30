//! Resumable streams: the opt-in exception to cascading cancellation (DESIGN invariant 4).
//!
//! A resumable stream's relay is not the client's body: a task of its own (the relay's
//! `pump`)
//! drives it, giving every event an `id: {stream}-{seq}` line and appending it to the stream's
//! bounded log ([`Stream`]); each client connection is a [`Reader`] of that log. When the last
//! reader goes away the generation runs on, detached, for the route's `keep`, then is dropped
//! (which cancels the upstream as any relay's drop does). A reconnect with `Last-Event-ID`
//! becomes a new reader from the event after that id: the log first, then the live rest, each
//! event once and in order, because readers only ever read the log.
//!
//! The relay and its request record (ticket, usage, ledger line) belong to the pump, so a
//! detached generation keeps counting against its key's concurrency and token limits until
//! it ends, and its usage is recorded once, by the relay, whoever read it.
//!
//! Bounds: a stream's log holds at most `max_bytes` of events. While a reader is attached the
//! pump waits for it rather than drop what it has not read; while none is, the oldest events
//! go (asking for them is a 410). The [`Registry`] caps the streams and the bytes their logs
//! may hold (each reserves its `max_bytes` at start): past either, a new stream is served as
//! an ordinary one and says so, and nothing already admitted is ever cut for room.
//!
//! A route without resumable streams never comes here: its relay is the client's body as
//! before.

mod log;
mod mirror;
mod reader;
mod registry;
mod remote;

pub(crate) use log::{AttachError, Stream};
pub(crate) use reader::Reader;
pub(crate) use registry::{Lookup, Registry};
pub(crate) use remote::remote_body;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// A background response's stream, made at admission (in the request's extensions), which
/// the relay then feeds instead of a new one.
#[derive(Clone)]
pub(crate) struct Background(pub(crate) std::sync::Arc<Stream>);

/// A request's choice: `on` makes a stream resumable on any route, `off` keeps one ordinary
/// on a resumable route. Also the answer's: `on`, or `off; reason=capacity` when the caps
/// are reached.
pub(crate) const X_SLUICE_RESUMABLE: HeaderName = HeaderName::from_static("x-sluice-resumable");
/// The answer's: the id of a resumable stream (the part of each event id before the `-`).
pub(crate) const X_SLUICE_STREAM_ID: HeaderName = HeaderName::from_static("x-sluice-stream-id");
/// The reconnect's: the last event the client has (SSE's own header).
pub(crate) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// What a request asked with `x-sluice-resumable`.
pub(crate) fn requested(h: &HeaderMap) -> Option<bool> {
    let v = h.get(&X_SLUICE_RESUMABLE)?.as_bytes();
    if v.eq_ignore_ascii_case(b"on") || v == b"1" || v.eq_ignore_ascii_case(b"true") {
        Some(true)
    } else if v.eq_ignore_ascii_case(b"off") || v == b"0" || v.eq_ignore_ascii_case(b"false") {
        Some(false)
    } else {
        None
    }
}

/// Whether a request's stream is resumable, and with what bounds: `x-sluice-resumable`
/// decides when sent, else the route (`resumable`). A `Last-Event-ID` is a reconnect only
/// where this says so; elsewhere it is an ordinary header.
pub(crate) fn applies(
    route: Option<sluice_config::ResumableConfig>,
    h: &HeaderMap,
) -> Option<sluice_config::ResumableConfig> {
    match requested(h) {
        Some(false) => None,
        Some(true) => Some(route.unwrap_or(sluice_config::ResumableConfig::DEFAULT)),
        None => route,
    }
}

/// Who a resumable stream made by this request belongs to (see `Keys::stream_owner`), in
/// the request's extensions when its stream may be resumable; `Refused` for a revoked key
/// on a keys-off route, whose stream is then an ordinary one.
#[derive(Clone)]
pub(crate) enum Owner {
    /// Anyone without a key (no key, or one the gateway does not know).
    Anyone,
    /// The key with this id (the id only: this layer sits below the keys').
    Key(std::sync::Arc<str>),
    /// Nobody: the stream is not made resumable.
    Refused,
}

/// The header a stream refused for capacity carries.
pub(crate) fn refused_header() -> HeaderValue {
    HeaderValue::from_static("off; reason=capacity")
}

/// A stream id: 32 hex digits of a random 128-bit number.
pub(crate) type StreamId = [u8; 32];

/// `{stream}-{seq}` split, or `None` when it is not one of ours.
pub(crate) fn parse_event_id(v: &[u8]) -> Option<(StreamId, u64)> {
    if v.len() < 34 || v[32] != b'-' {
        return None;
    }
    let mut id = [0u8; 32];
    id.copy_from_slice(&v[..32]);
    if !id.iter().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let seq = std::str::from_utf8(&v[33..]).ok()?.parse().ok()?;
    Some((id, seq))
}

/// A fresh random stream id.
pub(crate) fn new_stream_id() -> StreamId {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut raw).is_err() {
        // The OS's generator failed (it does not in practice): fall back to a weaker one.
        for b in &mut raw {
            *b = fastrand::u8(..);
        }
    }
    let mut id = [0u8; 32];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in raw.iter().enumerate() {
        id[2 * i] = HEX[usize::from(b >> 4)];
        id[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_round_trip_and_others_are_not_ours() {
        let id = new_stream_id();
        let mut v = id.to_vec();
        v.extend_from_slice(b"-42");
        assert_eq!(parse_event_id(&v), Some((id, 42)));
        assert_eq!(parse_event_id(b"42"), None);
        assert_eq!(parse_event_id(&v[..33]), None);
        let mut bad = v.clone();
        bad[0] = b'z';
        assert_eq!(parse_event_id(&bad), None);
        assert_ne!(new_stream_id(), id);
    }
}
