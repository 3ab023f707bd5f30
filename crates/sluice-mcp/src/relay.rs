//! The response bodies the gateway sends: a whole JSON message, one routed request's SSE
//! stream (`CallStream`: progress notifications as they come, then the answer), or the
//! server streams of a session merged into one (`MergeStream`).
//!
//! Both streams are pull-based (no task per stream): the upstream is read only when hyper asks
//! for the next frame, so a slow client slows its upstream and holds one message at most.
//! Dropping the body drops the upstream response (HTTP/1.1: the connection is closed) and, for
//! an unfinished call on a handshake-era upstream session, sends `notifications/cancelled`
//! there in a short background task bounded by the server's list timeout. A stream never ends
//! silently: a broken, silent or timed-out upstream ends it with a JSON-RPC error for the
//! request's id.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use serde_json::{json, Map, Value};
use sluice_sse::{Encoder, LineEnding, OutEvent};
use tokio::time::{Instant, Sleep};

use crate::error::UpstreamError;
use crate::jsonrpc::{self, Peeked, Rejection};
use crate::session::UpstreamState;
use crate::telemetry::{CallFinish, CallOutcome, McpMetrics};
use crate::upstream::{CallCtx, MessageStream, Upstream};

/// The body of every answer of the MCP gateway. Never fails: errors are JSON-RPC messages.
pub struct McpBody {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Call(Box<CallStream>),
    Merge(Box<MergeStream>),
}

impl std::fmt::Debug for McpBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match &self.kind {
            Kind::Full(_) => "full",
            Kind::Call(_) => "call stream",
            Kind::Merge(_) => "merged stream",
        };
        f.debug_tuple("McpBody").field(&k).finish()
    }
}

impl McpBody {
    /// A whole body (possibly empty).
    pub fn full(b: impl Into<Bytes>) -> McpBody {
        let b = b.into();
        McpBody {
            kind: Kind::Full((!b.is_empty()).then_some(b)),
        }
    }

    /// No body.
    pub fn empty() -> McpBody {
        McpBody {
            kind: Kind::Full(None),
        }
    }

    pub(crate) fn call(s: CallStream) -> McpBody {
        McpBody {
            kind: Kind::Call(Box::new(s)),
        }
    }

    pub(crate) fn merge(s: MergeStream) -> McpBody {
        McpBody {
            kind: Kind::Merge(Box::new(s)),
        }
    }
}

impl Body for McpBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Call(s) => s.poll_next(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
            Kind::Merge(s) => s.poll_next(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// A JSON answer.
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> Response<McpBody> {
    let mut r = Response::new(McpBody::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A bodiless answer.
pub(crate) fn empty_response(status: StatusCode) -> Response<McpBody> {
    let mut r = Response::new(McpBody::empty());
    *r.status_mut() = status;
    r
}

/// An SSE answer.
pub(crate) fn sse_response(body: McpBody) -> Response<McpBody> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

fn event(data: &[u8]) -> Bytes {
    // JSON from serde or an upstream has no raw line breaks in practice; the encoder splits
    // them into several `data:` lines if it does.
    let text = String::from_utf8_lossy(data);
    let mut out = BytesMut::with_capacity(data.len() + 24);
    Encoder::new(LineEnding::Lf).event(
        &mut out,
        &OutEvent {
            event: Some("message"),
            data: &text,
            ..Default::default()
        },
    );
    out.freeze()
}

fn ping() -> Bytes {
    Bytes::from_static(b": ping\n\n")
}

/// What cancels an unfinished call on a handshake-era upstream session.
pub(crate) struct CancelUpstream {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) state: UpstreamState,
    pub(crate) authorization: Option<HeaderValue>,
    pub(crate) origin: u64,
}

impl CancelUpstream {
    pub(crate) fn fire(self, id: &Value, reason: &str) {
        if !matches!(self.state, UpstreamState::Session { .. }) {
            // Stateless and 2026-07-28 servers learn it from the closed stream; stdio calls
            // cancel themselves when their reply is dropped.
            return;
        }
        let mut msg = Map::new();
        msg.insert("jsonrpc".into(), "2.0".into());
        msg.insert("method".into(), "notifications/cancelled".into());
        msg.insert(
            "params".into(),
            json!({ "requestId": id, "reason": reason }),
        );
        // Owned and bounded: `notify` gives up after the server's list timeout. Off the
        // dropping path, which may be a hyper connection task mid-teardown.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let ctx = CallCtx {
                    authorization: self.authorization.as_ref(),
                    params: Vec::new(),
                    origin: self.origin,
                };
                self.upstream
                    .notify(&self.state, msg, "notifications/cancelled", &ctx)
                    .await;
            });
        }
    }
}

/// One routed request's answer as SSE: the upstream's messages, re-framed (their SSE ids are
/// the upstream's, meaningless to the client, so they are dropped), until the response.
pub(crate) struct CallStream {
    source: MessageStream,
    id: Value,
    server: String,
    metrics: McpMetrics,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    heartbeat: Duration,
    idle: Pin<Box<Sleep>>,
    finish: Option<CallFinish>,
    cancel: Option<CancelUpstream>,
    done: bool,
    /// The client speaks 2026-07-28: answers get `resultType` if the server left it out.
    modern: bool,
}

impl CallStream {
    /// A stream of `source`'s messages for request `id`, ended by a timeout error after
    /// `timeout`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        source: MessageStream,
        id: Value,
        server: &str,
        metrics: McpMetrics,
        timeout: Duration,
        heartbeat: Duration,
        finish: Option<CallFinish>,
        cancel: Option<CancelUpstream>,
    ) -> CallStream {
        let now = Instant::now();
        CallStream {
            source,
            id,
            server: server.to_string(),
            metrics,
            deadline: Box::pin(tokio::time::sleep_until(now + timeout)),
            timeout,
            heartbeat,
            idle: Box::pin(tokio::time::sleep_until(now + heartbeat)),
            finish,
            cancel,
            done: false,
            modern: false,
        }
    }

    /// For a 2026-07-28 client.
    pub(crate) fn modern(mut self, modern: bool) -> CallStream {
        self.modern = modern;
        self
    }

    fn end_with_error(&mut self, code: i64, message: String, outcome: CallOutcome) -> Bytes {
        self.done = true;
        if let Some(f) = &mut self.finish {
            f.finish(outcome, Some(code));
        }
        if let Some(c) = self.cancel.take() {
            c.fire(&self.id, &message);
        }
        event(&jsonrpc::error_body(
            Some(&self.id),
            &Rejection::new(code, message),
        ))
    }

    fn upstream_failed(&mut self, e: &UpstreamError) -> Bytes {
        self.metrics.upstream_error(&self.server, e.metric_label());
        self.end_with_error(
            jsonrpc::CONNECTION_CLOSED,
            format!("MCP server `{}`: {e}", self.server),
            CallOutcome::UpstreamError,
        )
    }

    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.done {
            return Poll::Ready(None);
        }
        // First, so that a server that keeps sending progress cannot outrun its deadline.
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.metrics.upstream_error(&self.server, "timeout");
            let msg = format!(
                "MCP server `{}` did not answer within {:?}; the request was cancelled",
                self.server, self.timeout
            );
            return Poll::Ready(Some(self.end_with_error(
                jsonrpc::REQUEST_TIMEOUT,
                msg,
                CallOutcome::Timeout,
            )));
        }
        loop {
            match self.source.poll_next(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let out = match jsonrpc::peek(&data) {
                        Peeked::Response { error, tool_error } => {
                            self.done = true;
                            self.cancel = None;
                            if let Some(f) = &mut self.finish {
                                let outcome = match (error, tool_error) {
                                    (Some(jsonrpc::REQUEST_CANCELLED), _) => CallOutcome::Cancelled,
                                    (Some(_), _) => CallOutcome::RpcError,
                                    (None, true) => CallOutcome::ToolError,
                                    (None, false) => CallOutcome::Ok,
                                };
                                f.finish(outcome, error);
                            }
                            if self.modern {
                                event(&jsonrpc::with_result_type(data))
                            } else {
                                event(&data)
                            }
                        }
                        Peeked::Notification => event(&data),
                        Peeked::Request | Peeked::Invalid => {
                            tracing::debug!(server = %self.server, "dropped a server-to-client request or an invalid message");
                            continue;
                        }
                    };
                    let next = Instant::now() + self.heartbeat;
                    self.idle.as_mut().reset(next);
                    return Poll::Ready(Some(out));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(self.upstream_failed(&e))),
                Poll::Ready(None) => {
                    let e = UpstreamError::Broken("the stream ended without an answer".into());
                    return Poll::Ready(Some(self.upstream_failed(&e)));
                }
                Poll::Pending => break,
            }
        }
        if self.idle.as_mut().poll(cx).is_ready() {
            let next = Instant::now() + self.heartbeat;
            self.idle.as_mut().reset(next);
            // Registers the timer again before returning.
            let _ = self.idle.as_mut().poll(cx);
            return Poll::Ready(Some(ping()));
        }
        Poll::Pending
    }
}

impl Drop for CallStream {
    fn drop(&mut self) {
        if !self.done {
            if let Some(c) = self.cancel.take() {
                c.fire(&self.id, "the client went away");
            }
        }
        // `finish` settles as cancelled in its own Drop when still unsettled.
    }
}

use std::future::Future as _;

/// The server streams (GET) of a session's upstreams merged into one: notifications as they
/// come from any of them, heartbeats while all are silent; ends when all have ended.
pub(crate) struct MergeStream {
    sources: Vec<(String, MessageStream)>,
    next: usize,
    heartbeat: Duration,
    idle: Pin<Box<Sleep>>,
}

impl MergeStream {
    pub(crate) fn new(sources: Vec<(String, MessageStream)>, heartbeat: Duration) -> MergeStream {
        MergeStream {
            sources,
            next: 0,
            heartbeat,
            idle: Box::pin(tokio::time::sleep(heartbeat)),
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut scanned = 0;
        // Round robin from where the last event came, so one chatty server cannot starve the
        // others.
        while scanned < self.sources.len() {
            let i = self.next % self.sources.len();
            match self.sources[i].1.poll_next(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    if jsonrpc::peek(&data) != Peeked::Notification {
                        continue;
                    }
                    self.next = i + 1;
                    let next = Instant::now() + self.heartbeat;
                    self.idle.as_mut().reset(next);
                    return Poll::Ready(Some(event(&data)));
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(server = %self.sources[i].0, error = %e, "an MCP server stream broke");
                    self.sources.swap_remove(i);
                }
                Poll::Ready(None) => {
                    self.sources.swap_remove(i);
                }
                Poll::Pending => {
                    self.next = i + 1;
                    scanned += 1;
                }
            }
        }
        if self.sources.is_empty() {
            return Poll::Ready(None);
        }
        if self.idle.as_mut().poll(cx).is_ready() {
            let next = Instant::now() + self.heartbeat;
            self.idle.as_mut().reset(next);
            let _ = self.idle.as_mut().poll(cx);
            return Poll::Ready(Some(ping()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{ToolCallRecord, ToolCallSink};
    use parking_lot::Mutex;

    #[derive(Default)]
    struct Sink(Mutex<Vec<ToolCallRecord>>);

    impl ToolCallSink for Sink {
        fn record(&self, rec: &ToolCallRecord) {
            self.0.lock().push(rec.clone());
        }
    }

    fn stream(rx: tokio::sync::mpsc::Receiver<Bytes>, sink: Arc<Sink>) -> CallStream {
        let finish = CallFinish {
            record: Some(ToolCallRecord {
                key_id: None,
                server: "s".into(),
                tool: "t".into(),
                outcome: CallOutcome::Ok,
                error_code: None,
                latency: Duration::ZERO,
                protocol: "2025-11-25",
                traceparent: None,
            }),
            started: Instant::now(),
            sink,
            metrics: McpMetrics::new(),
            span: tracing::Span::none(),
        };
        CallStream::new(
            MessageStream::Channel(rx),
            json!(9),
            "s",
            McpMetrics::new(),
            Duration::from_secs(10),
            Duration::from_secs(3),
            Some(finish),
            None,
        )
    }

    async fn next(s: &mut CallStream) -> Option<Bytes> {
        std::future::poll_fn(|cx| s.poll_next(cx)).await
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_while_silent_then_a_timeout_error_for_the_request() {
        let (_tx, rx) = tokio::sync::mpsc::channel(4);
        let sink = Arc::new(Sink::default());
        let mut s = stream(rx, sink.clone());
        let t0 = Instant::now();
        for i in 1..=3 {
            assert_eq!(next(&mut s).await.unwrap(), ping());
            assert_eq!(t0.elapsed(), Duration::from_secs(3 * i));
        }
        let end = next(&mut s).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        let text = String::from_utf8_lossy(&end);
        assert!(
            text.contains("-32001") && text.contains("\"id\":9"),
            "{text}"
        );
        assert!(next(&mut s).await.is_none());
        assert_eq!(sink.0.lock()[0].outcome, CallOutcome::Timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_then_the_answer_then_the_end() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let sink = Arc::new(Sink::default());
        let mut s = stream(rx, sink.clone());
        tx.send(Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#)).await.unwrap();
        tx.send(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#,
        ))
        .await
        .unwrap();
        tx.send(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":9,"result":{"content":[],"isError":true}}"#,
        ))
        .await
        .unwrap();
        let first = next(&mut s).await.unwrap();
        assert!(first.starts_with(b"event: message\ndata: {") && first.ends_with(b"\n\n"));
        assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
        // The server's request is not relayed (nothing routes its answer back).
        let second = next(&mut s).await.unwrap();
        assert!(String::from_utf8_lossy(&second).contains("\"id\":9"));
        assert!(next(&mut s).await.is_none());
        assert_eq!(sink.0.lock()[0].outcome, CallOutcome::ToolError);
    }

    #[tokio::test]
    async fn a_dropped_stream_settles_as_cancelled() {
        let (_tx, rx) = tokio::sync::mpsc::channel(4);
        let sink = Arc::new(Sink::default());
        drop(stream(rx, sink.clone()));
        assert_eq!(sink.0.lock()[0].outcome, CallOutcome::Cancelled);
    }
}
