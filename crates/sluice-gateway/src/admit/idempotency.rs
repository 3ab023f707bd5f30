//! `Idempotency-Key`: the first request with a key runs; a duplicate of a non-streaming one
//! waits for it and gets its response; a duplicate of a stream gets 409; the same key with
//! another body gets 422. Completed non-streaming successes are replayed for
//! `state.idempotency.replay_ttl` (bounded in bytes by `max_response_bytes`). Records are
//! scoped by the virtual key's id, so two tenants' keys never meet.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use sluice_state::{Begin, BodyHash, Completion, IdempotencyGuard, StoredResponse};
use tokio::time::Instant;

use super::{KeyError, Keys, VirtualKey};
use crate::headers::REQUEST_ID;

/// The request header (a constant: a `&str` name is parsed and hashed on every use).
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The scope of requests without a virtual key.
const ANONYMOUS_SCOPE: &str = "-";

/// Marks a replayed response (Stripe's name for it).
const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The response headers kept with a stored response; the rest describe one exchange.
const KEPT: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    HeaderName::from_static("x-sluice-upstream"),
    HeaderName::from_static("x-sluice-dropped-params"),
];

/// What to do with a request, as far as its `Idempotency-Key` goes.
#[derive(Debug)]
pub(crate) enum IdempotencyStart {
    /// No `Idempotency-Key`.
    None,
    /// Run it; complete or drop the guard when it ends.
    Run(IdempotencyGuard),
    /// Answer with the stored response.
    Replay(StoredResponse),
}

impl Keys {
    /// Looks up the request's `Idempotency-Key` record. A non-streaming duplicate of a request
    /// in flight waits for it until `deadline`.
    ///
    /// # Errors
    /// 400 (a bad header), 409 (a stream's duplicate, or a wait that ran out), 422 (another
    /// body), 503 (the store failed, `fail_closed`).
    pub(crate) async fn idempotency(
        &self,
        key: Option<&VirtualKey>,
        headers: &HeaderMap,
        path: &str,
        body: &Bytes,
        stream: bool,
        deadline: Instant,
    ) -> Result<IdempotencyStart, KeyError> {
        // Seldom sent: ruled out by a look at the names before any hashing.
        let Some(value) = crate::headers::get(headers, &IDEMPOTENCY_KEY) else {
            return Ok(IdempotencyStart::None);
        };
        let value = value
            .to_str()
            .ok()
            .filter(|v| !v.is_empty() && v.len() <= sluice_state::MAX_IDEMPOTENCY_KEY_LEN)
            .ok_or(KeyError::IdempotencyKeyInvalid)?;
        let scope = key.map_or(ANONYMOUS_SCOPE, VirtualKey::id);
        let hash = body_hash(path, body);
        let store = &self.inner.store;
        let ttl = self.inner.replay_ttl;
        let metrics = &self.inner.metrics;
        let fail = |e: KeyError| {
            metrics.idempotency(match &e {
                KeyError::IdempotencyInFlight => "in_flight",
                KeyError::IdempotencyMismatch => "mismatch",
                _ => "error",
            });
            self.refused(&e);
            Err(e)
        };
        let mut begin = match store.idempotency_begin(scope, value, hash, ttl).await {
            Ok(b) => b,
            Err(e) => return fail(KeyError::State(e)),
        };
        let mut waited = false;
        if matches!(begin, Begin::InFlight) && !stream {
            waited = true;
            begin = match store
                .idempotency_wait(scope, value, hash, ttl, deadline)
                .await
            {
                Ok(b) => b,
                Err(e) => return fail(KeyError::State(e)),
            };
        }
        match begin {
            Begin::Fresh(guard) => {
                metrics.idempotency("fresh");
                Ok(IdempotencyStart::Run(guard))
            }
            Begin::Done(stored) => {
                metrics.idempotency(if waited { "waited" } else { "replayed" });
                Ok(IdempotencyStart::Replay(stored))
            }
            Begin::InFlight => fail(KeyError::IdempotencyInFlight),
            Begin::Mismatch => fail(KeyError::IdempotencyMismatch),
        }
    }
}

/// SHA-256 of the endpoint and the body: the same key on another endpoint is another request.
fn body_hash(path: &str, body: &[u8]) -> BodyHash {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(path.as_bytes());
    ctx.update(&[0]);
    ctx.update(body);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    BodyHash(out)
}

/// What of a finished non-streaming response is kept for replay: a success's status, body
/// and content headers. `None` for anything else, whose record is released so a retry runs
/// again.
pub(crate) fn to_store(
    status: StatusCode,
    headers: &http::HeaderMap,
    body: Option<&Bytes>,
) -> Option<StoredResponse> {
    let body = match body {
        Some(b) if status.is_success() => b.clone(),
        _ => return None,
    };
    let headers = KEPT
        .iter()
        .filter_map(|n| headers.get(n).map(|v| (n.clone(), v.clone())))
        .collect();
    Some(StoredResponse {
        status,
        headers,
        body,
    })
}

/// Stores `stored` for replay, or releases the record. Bounded by the store's call deadline.
pub(crate) async fn complete(keys: &Keys, guard: IdempotencyGuard, stored: Option<StoredResponse>) {
    let Some(stored) = stored else {
        if let Err(e) = guard.release().await {
            tracing::debug!(error = %e, "idempotency record not released; it expires");
        }
        return;
    };
    match guard.complete(stored).await {
        Ok(Completion::Stored) => {}
        Ok(Completion::TooLarge) => keys.inner.metrics.idempotency("too_large"),
        Ok(Completion::Lost) => keys.inner.metrics.idempotency("lost"),
        Err(e) => {
            keys.inner.metrics.idempotency("error");
            tracing::debug!(error = %e, "idempotency record not stored");
        }
    }
}

/// The stored response, as this request's answer.
pub(crate) fn replay(stored: StoredResponse, request_id: &HeaderValue) -> Response<Bytes> {
    let StoredResponse {
        status,
        headers,
        body,
    } = stored;
    let mut r = Response::new(body);
    *r.status_mut() = if status.as_u16() < 200 {
        StatusCode::OK
    } else {
        status
    };
    let h = r.headers_mut();
    for (n, v) in headers {
        h.insert(n, v);
    }
    h.insert(REQUEST_ID, request_id.clone());
    h.insert(REPLAYED, HeaderValue::from_static("true"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_body_on_another_endpoint_hashes_differently() {
        let a = body_hash("/v1/chat/completions", b"{}");
        assert_eq!(a, body_hash("/v1/chat/completions", b"{}"));
        assert_ne!(a, body_hash("/v1/responses", b"{}"));
        assert_ne!(a, body_hash("/v1/chat/completions", b"{ }"));
    }
}
