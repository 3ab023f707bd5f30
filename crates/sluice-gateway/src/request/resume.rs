//! A reconnect to a resumable stream (`Last-Event-ID`): the events after that id from the
//! stream's log, then the live rest. Answered before the key's limits: the generation being
//! read already holds its place there, and its usage is recorded once, by its own request.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::{Failure, GatewayBody};
use crate::error::GatewayError;
use crate::generation::Generation;
use crate::headers::{REQUEST_ID, X_ACCEL_BUFFERING};
use crate::resume::{self, Lookup, Reader};
use sluice_telemetry::EndReason;

/// Times an id Redis does not know is asked again (every `STREAM_LOG_POLL`) before a 404.
const OWNER_RETRIES: u32 = 25;

/// The answer to a request with `Last-Event-ID: {stream}-{seq}`, read by key `owner`.
pub(crate) async fn resume(
    state: &Generation,
    last_event_id: &HeaderValue,
    owner: Option<&str>,
    request_id: &HeaderValue,
) -> Result<Response<GatewayBody>, Box<Failure>> {
    let raw = last_event_id.as_bytes();
    let shown = || String::from_utf8_lossy(raw).into_owned();
    let not_found = || {
        Box::new(Failure::new(
            GatewayError::StreamNotFound(shown()),
            EndReason::BadRequest,
        ))
    };
    let (id, seq) = resume::parse_event_id(raw).ok_or_else(not_found)?;
    let stream = match state.shared.resume.lookup(&id, owner) {
        Lookup::Found(s) => s,
        Lookup::Gone => {
            return Err(Box::new(Failure::new(
                GatewayError::StreamGone(format!(
                    "the resumable stream `{}` has expired",
                    String::from_utf8_lossy(&id)
                )),
                EndReason::BadRequest,
            )))
        }
        Lookup::NotFound => {
            // Maybe another instance's: its log in Redis, if the store has one.
            let Some(logs) = state.shared.resume.logs() else {
                return Err(not_found());
            };
            let hex = String::from_utf8_lossy(&id).into_owned();
            // The stream's owner is written as it starts, off its request path: a reconnect
            // right after may come first, so an unknown id is asked again for a moment.
            let mut found = logs.owner(&hex).await;
            for _ in 0..OWNER_RETRIES {
                if !matches!(found, Ok(None)) {
                    break;
                }
                tokio::time::sleep(sluice_state::STREAM_LOG_POLL).await;
                found = logs.owner(&hex).await;
            }
            return match found {
                Ok(Some(o)) if o == owner.unwrap_or("") => Ok(sse_response(
                    GatewayBody::Mounted(resume::remote_body(logs, hex.clone(), seq)),
                    &hex,
                    request_id,
                )),
                _ => Err(not_found()),
            };
        }
    };
    let from = seq.checked_add(1).ok_or_else(not_found)?;
    let reader = Reader::attach(stream.clone(), from).map_err(|e| match e {
        resume::AttachError::Evicted { first_kept } => Box::new(Failure::new(
            GatewayError::StreamGone(format!(
                "the events after `{}` are no longer kept (the stream's log went past its \
                 `max_bytes` while no client read it; the oldest kept is {first_kept})",
                shown()
            )),
            EndReason::BadRequest,
        )),
        resume::AttachError::Ahead => not_found(),
    })?;
    Ok(sse_response(
        GatewayBody::Resumed(Box::new(reader)),
        stream.id_str(),
        request_id,
    ))
}

/// A stream's answer head: an event stream, with its id.
pub(crate) fn sse_response(
    body: GatewayBody,
    stream_id: &str,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    h.insert(REQUEST_ID, request_id.clone());
    h.insert(resume::X_SLUICE_RESUMABLE, HeaderValue::from_static("on"));
    if let Ok(v) = HeaderValue::from_str(stream_id) {
        h.insert(resume::X_SLUICE_STREAM_ID, v);
    }
    r
}
