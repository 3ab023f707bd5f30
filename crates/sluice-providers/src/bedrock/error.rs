//! Bedrock's errors, classified for the policy stage.
//!
//! A REST-JSON error names its type in the `x-amzn-ErrorType` header
//! (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`), or in the
//! body's `__type` (`com.amazon.coral.service#ThrottlingException`), with the text in the
//! body's `message` (`Message` from some front ends). Inside a ConverseStream the same
//! exceptions arrive as event-stream messages with `:message-type: exception` and
//! `:exception-type` the union member's name (`throttlingException`).
//!
//! | type | status | class |
//! |---|---|---|
//! | `ThrottlingException` | 429 | rate limited |
//! | `ServiceQuotaExceededException` | 400 | rate limited ("resubmit your request later"), as 429 |
//! | `ModelNotReadyException` | 429 | overloaded (the SDKs retry it; another target may be ready) |
//! | `ServiceUnavailableException` | 503 | overloaded |
//! | `InternalServerException` | 500 | server error |
//! | `ModelTimeoutException` | 408 | server error |
//! | `ModelErrorException`, `ModelStreamErrorException` | 424 | server error ("retry your request") |
//! | `ValidationException` | 400 | context length when the message says the input is too long, else invalid request |
//! | `AccessDeniedException`, `UnrecognizedClientException`, `InvalidSignatureException`, `ExpiredTokenException` | 403 | auth |
//! | `ResourceNotFoundException` | 404 | invalid request |
//! | `ConflictException` | 400 | invalid request |
//!
//! Anything else is classified by its status and body as [`crate::error::classify`] does.

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::api::Family;
use crate::error::{ErrorClass, ProviderError};

/// Messages of a `ValidationException` that say the prompt does not fit the model: Bedrock's
/// own ("Input is too long for requested model"), the Anthropic models' ("prompt is too
/// long"), Llama's ("maximum context length"), Cohere's ("too many tokens").
const CONTEXT_MARKERS: [&str; 8] = [
    "too long",
    "max tokens",
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "too many input tokens",
    "exceeds the maximum number of tokens",
];

/// The class and status of a Bedrock error type (either spelling: `ThrottlingException` or the
/// stream's `throttlingException`), or `None` for a type not in the table.
pub fn exception_class(kind: &str, message: &str) -> Option<(ErrorClass, StatusCode)> {
    let kind = kind.strip_suffix("Exception").unwrap_or(kind);
    let (class, status) = match kind.to_ascii_lowercase().as_str() {
        "throttling" => (ErrorClass::RateLimited, 429),
        "servicequotaexceeded" => (ErrorClass::RateLimited, 429),
        "modelnotready" => (ErrorClass::Overloaded, 429),
        "serviceunavailable" => (ErrorClass::Overloaded, 503),
        "internalserver" => (ErrorClass::ServerError, 500),
        "modeltimeout" => (ErrorClass::ServerError, 408),
        "modelerror" | "modelstreamerror" => (ErrorClass::ServerError, 424),
        "validation" => {
            let m = message.to_ascii_lowercase();
            if CONTEXT_MARKERS.iter().any(|n| m.contains(n)) {
                (ErrorClass::ContextLength, 400)
            } else {
                (ErrorClass::InvalidRequest, 400)
            }
        }
        "accessdenied"
        | "unrecognizedclient"
        | "invalidsignature"
        | "expiredtoken"
        | "incompletesignature"
        | "missingauthenticationtoken" => (ErrorClass::Auth, 403),
        "resourcenotfound" => (ErrorClass::InvalidRequest, 404),
        "conflict" => (ErrorClass::InvalidRequest, 400),
        _ => return None,
    };
    Some((
        class,
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
    ))
}

/// The error type a response names: `x-amzn-ErrorType` up to its `:`, else the body's
/// `__type` after its `#`, else the body's `code`.
fn error_type(headers: &HeaderMap, body: &Value) -> Option<String> {
    if let Some(t) = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or(v).trim())
        .filter(|v| !v.is_empty())
    {
        return Some(t.to_string());
    }
    ["__type", "code"].iter().find_map(|k| {
        body.get(*k)
            .and_then(Value::as_str)
            .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
            .filter(|t| !t.is_empty())
    })
}

fn message(body: &Value) -> Option<String> {
    ["message", "Message"].iter().find_map(|k| {
        body.get(*k)
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
    })
}

/// Reads a Bedrock error response into a [`ProviderError`]: the class from the error type
/// (table in the [module docs](self)), the code the type's name, the message the body's, and
/// the retry hint from `Retry-After` when given.
///
/// `now_unix` (seconds since the epoch) resolves an HTTP-date `Retry-After`.
pub fn classify(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> ProviderError {
    let mut err = crate::error::classify(Family::OpenAi, status, headers, body, now_unix);
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(m) = message(&v) {
        err.message = crate::error::capped(&m).to_string();
    }
    if let Some(kind) = error_type(headers, &v) {
        if let Some((class, _)) = exception_class(&kind, &err.message) {
            err.class = class;
        }
        err.code = Some(kind);
    }
    err
}

/// Reads an exception inside a ConverseStream (`:exception-type`, and the payload
/// `{"message": ..}`) into a [`ProviderError`] with the status the exception stands for.
pub fn classify_stream_exception(exception_type: &str, payload: &[u8]) -> ProviderError {
    let v: Value = serde_json::from_slice(payload).unwrap_or(Value::Null);
    let message = message(&v)
        .map(|m| crate::error::capped(&m).to_string())
        .unwrap_or_else(|| format!("the Bedrock stream reported {exception_type}"));
    let (class, status) = exception_class(exception_type, &message)
        .unwrap_or((ErrorClass::ServerError, StatusCode::INTERNAL_SERVER_ERROR));
    ProviderError {
        class,
        status,
        code: Some(exception_type.to_string()),
        message,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(kind: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-amzn-errortype", kind.parse().unwrap());
        h
    }

    #[test]
    fn the_table() {
        let rows = [
            (
                "ThrottlingException",
                429,
                "Too many requests, please wait before trying again.",
                ErrorClass::RateLimited,
            ),
            (
                "ServiceQuotaExceededException",
                400,
                "Your request exceeds the service quota",
                ErrorClass::RateLimited,
            ),
            (
                "ModelNotReadyException",
                429,
                "Model is not ready",
                ErrorClass::Overloaded,
            ),
            (
                "ServiceUnavailableException",
                503,
                "Service unavailable",
                ErrorClass::Overloaded,
            ),
            (
                "InternalServerException",
                500,
                "Internal error",
                ErrorClass::ServerError,
            ),
            (
                "ModelTimeoutException",
                408,
                "Model timed out",
                ErrorClass::ServerError,
            ),
            (
                "ModelErrorException",
                424,
                "The model failed",
                ErrorClass::ServerError,
            ),
            (
                "ValidationException",
                400,
                "Input is too long for requested model.",
                ErrorClass::ContextLength,
            ),
            (
                "ValidationException",
                400,
                "prompt is too long: 210000 tokens > 200000 maximum",
                ErrorClass::ContextLength,
            ),
            (
                "ValidationException",
                400,
                "messages: roles must alternate",
                ErrorClass::InvalidRequest,
            ),
            (
                "AccessDeniedException",
                403,
                "You don't have access to the model with the specified model ID.",
                ErrorClass::Auth,
            ),
            (
                "UnrecognizedClientException",
                403,
                "The security token included in the request is invalid.",
                ErrorClass::Auth,
            ),
            (
                "ResourceNotFoundException",
                404,
                "Model not found",
                ErrorClass::InvalidRequest,
            ),
        ];
        for (kind, status, message, class) in rows {
            let body = serde_json::json!({ "message": message }).to_string();
            let e = classify(
                StatusCode::from_u16(status).unwrap(),
                &headers(&format!(
                    "{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
                )),
                body.as_bytes(),
                0,
            );
            assert_eq!(e.class, class, "{kind}: {message}");
            assert_eq!(e.code.as_deref(), Some(kind));
            assert_eq!(e.message, message);
            assert_eq!(e.status.as_u16(), status);
        }
    }

    #[test]
    fn type_from_the_body_and_retry_after() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        let e = classify(
            StatusCode::TOO_MANY_REQUESTS,
            &h,
            br#"{"__type":"com.amazon.coral.service#ThrottlingException","Message":"Rate exceeded"}"#,
            0,
        );
        assert_eq!(e.class, ErrorClass::RateLimited);
        assert_eq!(e.code.as_deref(), Some("ThrottlingException"));
        assert_eq!(e.message, "Rate exceeded");
        assert_eq!(e.retry_after, Some(std::time::Duration::from_secs(3)));
        // No type at all: the status decides.
        let e = classify(StatusCode::BAD_GATEWAY, &HeaderMap::new(), b"<html>", 0);
        assert_eq!(e.class, ErrorClass::ServerError);
    }

    #[test]
    fn stream_exceptions() {
        let e = classify_stream_exception("throttlingException", br#"{"message":"slow down"}"#);
        assert_eq!((e.class, e.status.as_u16()), (ErrorClass::RateLimited, 429));
        let e = classify_stream_exception(
            "modelStreamErrorException",
            br#"{"message":"boom","originalStatusCode":500}"#,
        );
        assert_eq!((e.class, e.status.as_u16()), (ErrorClass::ServerError, 424));
        let e =
            classify_stream_exception("validationException", br#"{"message":"Input is too long"}"#);
        assert_eq!(e.class, ErrorClass::ContextLength);
        let e = classify_stream_exception("newException", b"not json");
        assert_eq!((e.class, e.status.as_u16()), (ErrorClass::ServerError, 500));
        assert!(e.message.contains("newException"));
    }
}
