//! Background responses (`POST /v1/responses` with `background: true`): the gateway owns the
//! generation. It is sent upstream as a stream (whatever the provider), its events go to a
//! resumable stream's log, and the client gets the response id at once; `GET
//! /v1/responses/{id}` polls it (the final response object once it ended), `?stream=true`
//! streams it (`starting_after` = the last `sequence_number` the client has), and `POST
//! /v1/responses/{id}/cancel` stops it.

use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::admission::Run;
use super::resume::sse_response;
use super::{full, Failure, GatewayBody};
use crate::error::GatewayError;
use crate::generation::Generation;
use crate::resume::{self, Lookup, Reader, Stream};
use crate::route::Operation;
use sluice_telemetry::EndReason;

/// A Responses request's body with `background: true`, rewritten for the upstream: a stream,
/// without `background` (the gateway keeps it). `None` for every other request: a body
/// without the word pays one scan.
pub(crate) fn take_background(op: Operation, body: &[u8]) -> Option<Bytes> {
    if op != Operation::Responses || memchr::memmem::find(body, b"\"background\"").is_none() {
        return None;
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object_mut()?;
    if o.get("background") != Some(&Value::Bool(true)) {
        return None;
    }
    o.remove("background");
    o.insert("stream".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

/// The stream a background request's relay feeds, made now (so the id can be answered at
/// once); `None` when the caps leave no room.
pub(crate) fn make_stream(
    state: &Generation,
    route: &sluice_config::RouteConfig,
    owner: Option<&str>,
) -> Result<Arc<Stream>, Box<Failure>> {
    let cfg = route
        .resumable
        .unwrap_or(sluice_config::ResumableConfig::DEFAULT);
    state.shared.resume.admit(owner, cfg, true).ok_or_else(|| {
        Box::new(Failure::new(
            GatewayError::BackgroundFull,
            EndReason::BadRequest,
        ))
    })
}

/// Starts a background request's attempts on a task of their own and answers at once.
pub(crate) fn start(run: Run, stream: Arc<Stream>, model: String) -> Response<GatewayBody> {
    let registry = run.state.shared.resume.clone();
    let request_id = run.policy.ctx.request_id.clone();
    let s = stream.clone();
    tokio::spawn(async move {
        let r = run.serve().await;
        match r.into_body() {
            // The pump feeds the log now; this first reader is not needed.
            GatewayBody::Resumed(reader) => drop(reader),
            // Failed before any stream: the error is the response's.
            GatewayBody::Full(b) => {
                s.fail(b.unwrap_or_default());
                registry.remove_later(s);
            }
            _ => {
                s.fail(Bytes::from_static(
                    b"{\"error\":{\"message\":\"the upstream did not stream\"}}",
                ));
                registry.remove_later(s);
            }
        }
    });
    let id = response_id(&stream);
    let body = json!({
        "id": id,
        "object": "response",
        "created_at": crate::clock::now_unix(),
        "status": "queued",
        "background": true,
        "model": model,
        "output": [],
    });
    let mut r = full(
        StatusCode::OK,
        "application/json",
        Bytes::from(body.to_string()),
    );
    r.headers_mut()
        .insert(crate::headers::REQUEST_ID, request_id);
    r
}

fn response_id(s: &Stream) -> String {
    format!("resp_{}", s.id_str())
}

/// `GET /v1/responses/{id}[?stream=true&starting_after=N]` and `POST .../cancel`.
pub(crate) fn stored(
    state: &Generation,
    parts: &http::request::Parts,
    request_id: &HeaderValue,
) -> Result<Response<GatewayBody>, Box<Failure>> {
    let identity = state.keys.identify(&parts.headers);
    state.keys.screen(&identity).map_err(Failure::keys)?;
    let owner = crate::admit::Keys::stream_owner(&identity).map_err(Failure::keys)?;
    let owner = owner.as_deref().map(|k| k.id());
    let path = parts.uri.path();
    let rest = path.strip_prefix("/v1/responses/").unwrap_or_default();
    let (id, cancel) = match rest.strip_suffix("/cancel") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    let not_found = || {
        Box::new(Failure::new(
            GatewayError::StreamNotFound(id.to_string()),
            EndReason::BadRequest,
        ))
    };
    let sid = state.shared.resume.response(id).ok_or_else(not_found)?;
    let stream = match state.shared.resume.lookup(&sid, owner) {
        Lookup::Found(s) => s,
        Lookup::Gone => {
            return Err(Box::new(Failure::new(
                GatewayError::StreamGone(format!("the background response `{id}` has expired")),
                EndReason::BadRequest,
            )))
        }
        Lookup::NotFound => return Err(not_found()),
    };
    if cancel {
        stream.cancel();
        let mut obj = poll_object(&stream, id);
        if obj["status"] != "completed" && obj["status"] != "failed" {
            obj["status"] = json!("cancelled");
        }
        return Ok(json_response(obj, request_id));
    }
    let query = parts.uri.query().unwrap_or("");
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    if param("stream") == Some("true") {
        let from = match param("starting_after") {
            None => 0,
            Some(n) => n
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_add(1))
                .ok_or_else(|| {
                    Failure::bad_request(GatewayError::BadField {
                        field: "starting_after",
                        expected: "a sequence number",
                        found: "something else",
                    })
                })?,
        };
        let reader = Reader::attach(stream.clone(), from).map_err(|e| match e {
            resume::AttachError::Evicted { first_kept } => Box::new(Failure::new(
                GatewayError::StreamGone(format!(
                    "the events after {} are no longer kept (the oldest kept is {first_kept})",
                    from - 1
                )),
                EndReason::BadRequest,
            )),
            resume::AttachError::Ahead => not_found(),
        })?;
        return Ok(sse_response(
            GatewayBody::Resumed(Box::new(reader)),
            stream.id_str(),
            request_id,
        ));
    }
    Ok(json_response(poll_object(&stream, id), request_id))
}

fn json_response(v: Value, request_id: &HeaderValue) -> Response<GatewayBody> {
    let mut r = full(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    );
    r.headers_mut()
        .insert(crate::headers::REQUEST_ID, request_id.clone());
    r
}

/// The response object as a poll sees it: the last one the events carried (the final one
/// once the stream ended), with the gateway's id; `queued` before any event.
fn poll_object(stream: &Stream, id: &str) -> Value {
    let snap = stream.snapshot();
    if let Some(err) = snap.failure {
        let error: Value = serde_json::from_slice(&err).unwrap_or(Value::Null);
        return json!({
            "id": id, "object": "response", "status": "failed", "background": true,
            "error": error.get("error").cloned().unwrap_or(error), "output": [],
        });
    }
    let mut last = None;
    for ev in snap.events.iter().rev() {
        if let Some(r) = response_in(ev) {
            last = Some(r);
            break;
        }
    }
    let mut obj = last.unwrap_or_else(|| json!({ "object": "response", "output": [] }));
    obj["id"] = json!(id);
    obj["background"] = json!(true);
    let status = obj["status"].as_str().unwrap_or("").to_string();
    let settled = matches!(
        status.as_str(),
        "completed" | "failed" | "incomplete" | "cancelled"
    );
    // Cancelled while it ran: its last event is the `response.failed` the stop wrote, but
    // what happened to it is the cancel.
    if snap.cancelled && status != "completed" {
        obj["status"] = json!("cancelled");
    } else if snap.events.is_empty() {
        obj["status"] = json!("queued");
    } else if snap.ended && !settled {
        obj["status"] = json!("failed");
    } else if !snap.ended && status.is_empty() {
        obj["status"] = json!("in_progress");
    }
    obj
}

/// The `response` object an event carries (`response.created`, `.in_progress`,
/// `.completed`, ...), if any.
fn response_in(ev: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(ev).ok()?;
    let data: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect::<Vec<_>>()
        .join("\n");
    if !data.contains("\"response\"") {
        return None;
    }
    let v: Value = serde_json::from_str(&data).ok()?;
    v.get("response").filter(|r| r.is_object()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_responses_request_with_background_true_is_taken() {
        let body = br#"{"model":"m","input":"hi","background":true}"#;
        let out = take_background(Operation::Responses, body).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["stream"], true);
        assert!(v.get("background").is_none(), "{v}");
        assert_eq!(v["input"], "hi");
        for (op, body) in [
            (
                Operation::Responses,
                &br#"{"model":"m","background":false}"#[..],
            ),
            (
                Operation::Responses,
                br#"{"model":"m","input":"\"background\""}"#,
            ),
            (
                Operation::ChatCompletions,
                br#"{"model":"m","background":true}"#,
            ),
        ] {
            assert!(take_background(op, body).is_none());
        }
    }

    #[test]
    fn a_poll_sees_the_last_response_object_with_the_gateways_id() {
        let s = Stream::new(
            [b'a'; 32],
            None,
            std::time::Duration::from_secs(1),
            1 << 20,
            true,
        );
        assert_eq!(poll_object(&s, "resp_x")["status"], "queued");
        s.push(Bytes::from_static(
            b"id: x-0\nevent: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"up\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
        ));
        let o = poll_object(&s, "resp_x");
        assert_eq!(
            (o["id"].as_str(), o["status"].as_str()),
            (Some("resp_x"), Some("in_progress"))
        );
        s.push(Bytes::from_static(
            b"id: x-1\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"up\",\"status\":\"completed\",\"output\":[1]}}\n\n",
        ));
        s.end();
        let o = poll_object(&s, "resp_x");
        assert_eq!(o["status"], "completed");
        assert_eq!(o["output"], json!([1]));
        // Ended without a final object: failed, not forever in progress.
        let t = Stream::new(
            [b'b'; 32],
            None,
            std::time::Duration::from_secs(1),
            1 << 20,
            true,
        );
        t.push(Bytes::from_static(
            b"data: {\"type\":\"response.output_text.delta\"}\n\n",
        ));
        t.end();
        assert_eq!(poll_object(&t, "resp_y")["status"], "failed");
    }
}
