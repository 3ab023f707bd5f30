//! Error responses, built here and nowhere else: the client's API's error shape and status
//! for a failure before the response started (an SSE error event after it is the relay's),
//! with the request id, the key's refusal headers, and which upstream and how many attempts.

use super::*;

use http::header::{self, HeaderValue};
use http::Response;
use sluice_providers::Family;

use crate::error::GatewayError;
use crate::headers::{self, REQUEST_ID};
use sluice_telemetry::EndReason;

use crate::outcome::Finish;

pub(crate) fn error_response(
    family: Family,
    e: &GatewayError,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let mut r = full(e.status(), "application/json", e.body(family));
    r.headers_mut().insert(REQUEST_ID, request_id.clone());
    if let GatewayError::Keys(k) = e {
        k.add_headers(r.headers_mut());
    }
    r
}

/// Why a request ended before its response started: what the client gets, and the end reason
/// that is logged.
pub(crate) struct Failure {
    error: GatewayError,
    reason: EndReason,
    /// `x-sluice-guardrails`, when guardrails refused it.
    guardrails: Option<HeaderValue>,
}

impl Failure {
    pub(crate) fn new(error: GatewayError, reason: EndReason) -> Self {
        Failure {
            error,
            reason,
            guardrails: None,
        }
    }

    /// With the guardrails' verdicts as a header.
    pub(crate) fn with_header(mut self, guardrails: Option<HeaderValue>) -> Self {
        self.guardrails = guardrails;
        self
    }

    pub(crate) fn bad_request(error: GatewayError) -> Self {
        Failure::new(error, EndReason::BadRequest)
    }

    pub(crate) fn keys(error: crate::admit::KeyError) -> Self {
        let reason = error.end_reason();
        Failure::new(GatewayError::Keys(Box::new(error)), reason)
    }
}

/// Records the failure once and answers in the client API's error format.
pub(crate) fn fail(
    family: Family,
    log: &mut Finish,
    f: Failure,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    log.status = f.error.status().as_u16();
    // The whole story (addresses, OS errors) goes to the log; the client gets `message()`.
    log.error = Some(f.error.to_string());
    log.finish(f.reason);
    let mut r = error_response(family, &f.error, request_id);
    if let Some(v) = f.guardrails {
        r.headers_mut().append(crate::guard::X_SLUICE_GUARDRAILS, v);
    }
    r
}

/// The client's error response when every attempt failed.
pub(crate) fn answer_failure(
    family: Family,
    mut reply: Reply,
    log: &mut Finish,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    log.status = reply.status.as_u16();
    log.error = reply.detail.take();
    log.finish(reply.reason);
    match reply.answer {
        // The upstream's own error, in its own words (the client speaks its format).
        Some(a) if a.family == family => {
            let mut h = headers::client_response_headers(a.headers.clone(), request_id);
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(a.body.len()));
            let mut r = Response::new(GatewayBody::Full(Some(a.body)));
            *r.status_mut() = a.status;
            *r.headers_mut() = h;
            attempts_header(&mut r, log);
            r
        }
        // Another family's error, re-expressed in the client's (Anthropic 529 → OpenAI 503).
        Some(a) => {
            let (status, body) = sluice_providers::error::client_error(family, &a.error);
            let mut r = full(status, "application/json", body);
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            if let Some(ra) = a.error.retry_after {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, headers::retry_after(ra));
            }
            attempts_header(&mut r, log);
            r
        }
        None => {
            let body = sluice_providers::error::error_body(
                family,
                reply.status,
                &reply.code,
                &reply.message,
            );
            let mut r = full(reply.status, "application/json", body);
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            attempts_header(&mut r, log);
            r
        }
    }
}

pub(crate) fn attempts_header(r: &mut Response<GatewayBody>, log: &Finish) {
    let name = if log.upstream.is_empty() {
        None
    } else {
        HeaderValue::from_str(&log.upstream).ok()
    };
    served_headers(r, name, log.attempts.len());
}

/// `x-sluice-upstream` and `x-sluice-attempts`, from the upstream's name as a header value
/// (made once per config for the success path, see [`Generation::upstream_header`]).
pub(crate) fn served_headers(
    r: &mut Response<GatewayBody>,
    name: Option<HeaderValue>,
    attempts: usize,
) {
    if let Some(v) = name {
        r.headers_mut().insert(X_SLUICE_UPSTREAM, v);
    }
    if attempts > 0 {
        r.headers_mut()
            .insert(X_SLUICE_ATTEMPTS, attempts_value(attempts));
    }
}

/// `attempts` as a header value: a static one for the usual few (formatting one allocates).
pub(crate) fn attempts_value(attempts: usize) -> HeaderValue {
    static FEW: [HeaderValue; 4] = [
        HeaderValue::from_static("0"),
        HeaderValue::from_static("1"),
        HeaderValue::from_static("2"),
        HeaderValue::from_static("3"),
    ];
    match FEW.get(attempts) {
        Some(v) => v.clone(),
        None => HeaderValue::from(attempts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_count_is_its_decimal_whether_kept_or_formatted() {
        for n in [0, 1, 2, 3, 4, 9, 10, 123, usize::MAX] {
            assert_eq!(attempts_value(n), HeaderValue::from(n), "{n}");
        }
    }
}
