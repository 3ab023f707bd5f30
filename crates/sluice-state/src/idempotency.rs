//! Idempotency records: the first request with an `Idempotency-Key` runs, duplicates wait for
//! it or are refused, and its response is replayed for a while.
//!
//! [`crate::Store::idempotency_begin`] answers [`crate::Begin`]; the winner holds an
//! [`crate::IdempotencyGuard`] and ends it with `complete` (store the response for replay) or
//! `release` / drop (forget the record, so a retry runs again).
//!
//! This module is what both backends and the store share about a record (its name, the
//! stored response, what a backend found); the guard and [`crate::Begin`] hold the store, so
//! they live in `store.rs`, which keeps this module below `memory.rs`, `redis_backend.rs` and
//! the store.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::StateError;

/// Longest scope or idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A digest of the request body (e.g. SHA-256, computed by the gateway): a duplicate with a
/// different digest is a [`Begin::Mismatch`](crate::Begin::Mismatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BodyHash(pub [u8; 32]);

/// A completed response kept for replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// Its status.
    pub status: StatusCode,
    /// The headers to replay (the gateway selects them: e.g. `content-type`, `x-request-id`;
    /// never hop-by-hop headers).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The whole body.
    pub body: Bytes,
}

impl StoredResponse {
    /// The bytes it counts against [`crate::IdempotencyConfig::max_response_bytes`]: body,
    /// header names and values.
    pub fn stored_len(&self) -> usize {
        self.body.len() + headers_len(&self.headers)
    }

    /// The headers in the stored format of [`encode_headers`].
    pub(crate) fn encode_headers(&self) -> Vec<u8> {
        encode_headers(&self.headers)
    }

    /// The reverse of [`StoredResponse::encode_headers`], for records read back from Redis.
    pub(crate) fn decode(status: u16, headers: &[u8], body: Bytes) -> Result<Self, StateError> {
        let status =
            StatusCode::from_u16(status).map_err(|_| StateError::Corrupt("status code"))?;
        Ok(StoredResponse {
            status,
            headers: decode_headers(headers)?,
            body,
        })
    }
}

/// Bytes of header names and values: what headers count against a stored response's bound.
pub(crate) fn headers_len(headers: &[(HeaderName, HeaderValue)]) -> usize {
    headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum::<usize>()
}

/// `[u16 name length][name][u32 value length][value]` per header, big-endian: the stored
/// form of replayed headers (idempotency records and cache entries).
pub(crate) fn encode_headers(headers: &[(HeaderName, HeaderValue)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(headers_len(headers) + 6 * headers.len());
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// The reverse of [`encode_headers`].
pub(crate) fn decode_headers(headers: &[u8]) -> Result<Vec<(HeaderName, HeaderValue)>, StateError> {
    let mut list = Vec::new();
    let mut rest = headers;
    let take = |n: usize, rest: &mut &[u8]| -> Result<Vec<u8>, StateError> {
        if rest.len() < n {
            return Err(StateError::Corrupt("truncated headers"));
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head.to_vec())
    };
    while !rest.is_empty() {
        let len = take(2, &mut rest)?;
        let name = take(u16::from_be_bytes([len[0], len[1]]) as usize, &mut rest)?;
        let len = take(4, &mut rest)?;
        let value = take(
            u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize,
            &mut rest,
        )?;
        let name = HeaderName::from_bytes(&name).map_err(|_| StateError::Corrupt("header name"))?;
        let value =
            HeaderValue::from_bytes(&value).map_err(|_| StateError::Corrupt("header value"))?;
        list.push((name, value));
    }
    Ok(list)
}

/// What [`IdempotencyGuard::complete`](crate::IdempotencyGuard::complete) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Stored: duplicates get it until the TTL passes.
    Stored,
    /// Larger than the byte bound (or the memory store's total bound): not stored, the record
    /// was released, so a retry runs again.
    TooLarge,
    /// The record was gone (its in-flight TTL passed and it expired or was taken over).
    Lost,
}

/// The record a raw backend call refers to.
#[derive(Clone, Debug)]
pub(crate) struct RecordId {
    /// The record's name within the store: `<scope len>:<scope>:<key>`.
    pub name: Box<str>,
    /// Proves ownership of the in-flight record.
    pub token: u64,
}

/// What a backend found at begin (the guard is built by the store).
#[derive(Debug)]
pub(crate) enum BeginRaw {
    Fresh,
    InFlight,
    Done(StoredResponse),
    Mismatch,
}

/// The record's name: scope and key, length-prefixed so no two pairs collide.
pub(crate) fn record_name(scope: &str, key: &str) -> Result<Box<str>, StateError> {
    if scope.is_empty()
        || key.is_empty()
        || scope.len() > MAX_IDEMPOTENCY_KEY_LEN
        || key.len() > MAX_IDEMPOTENCY_KEY_LEN
    {
        return Err(StateError::InvalidIdempotencyKey);
    }
    Ok(format!("{}:{scope}:{key}", scope.len()).into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_corrupt_input_is_an_error() {
        let response = StoredResponse {
            status: StatusCode::CREATED,
            headers: vec![
                (
                    HeaderName::from_static("content-type"),
                    HeaderValue::from_static("application/json"),
                ),
                (
                    HeaderName::from_static("x-request-id"),
                    HeaderValue::from_bytes(b"\xffid").unwrap(),
                ),
            ],
            body: Bytes::from_static(b"{}"),
        };
        let encoded = response.encode_headers();
        let back = StoredResponse::decode(201, &encoded, response.body.clone()).unwrap();
        assert_eq!(back, response);
        assert!(StoredResponse::decode(201, &encoded[..encoded.len() - 1], Bytes::new()).is_err());
        assert!(StoredResponse::decode(1000, &[], Bytes::new()).is_err());
    }

    #[test]
    fn record_names_do_not_collide_and_are_bounded() {
        assert_ne!(
            record_name("a:b", "c").unwrap(),
            record_name("a", "b:c").unwrap()
        );
        assert!(record_name("", "k").is_err());
        assert!(record_name("s", &"k".repeat(256)).is_err());
    }
}
