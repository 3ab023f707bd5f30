//! One OpenAI chat request, streaming or not, judged the way its client would judge it: a
//! non-2xx status, a broken connection, an SSE error event or a stream without its `[DONE]`
//! is a failure; latency is the time to the first content for a stream (what a user waits
//! for) and to the end of the body for a call. Used by the scenarios that start their own
//! gateway (`sluice bench failover`, `sluice bench lb`).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_sse::{Decoder, Item};
use sluice_upstream::{Protocol, ResponseBody, Upstream, UpstreamConfig};
use tokio::time::Instant;

use crate::{BenchError, Failure};

/// Streaming or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `"stream": true`; latency to the first content.
    Stream,
    /// Non-streaming; latency to the end of the body.
    Call,
}

impl Kind {
    /// `stream` or `call`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Call => "call",
        }
    }

    /// The request body: a one-message chat for `gpt-4o`.
    pub fn body(self) -> &'static [u8] {
        match self {
            Kind::Stream => {
                br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#
            }
            Kind::Call => br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
        }
    }
}

/// One request's result.
#[derive(Clone, Debug)]
pub struct ChatResult {
    /// Streaming or not.
    pub kind: Kind,
    /// The `x-request-id` (and `Idempotency-Key`) it was sent with.
    pub id: String,
    /// When it was sent.
    pub start: Instant,
    /// Streams: to the first content; calls: to the end of the body; failures: to the
    /// failure.
    pub latency: Duration,
    /// To the end of the response (or the failure).
    pub total: Duration,
    /// Why the client would call it failed, with the first 200 bytes of what it saw.
    pub failure: Option<(Failure, String)>,
    /// The gateway's `x-sluice-attempts` (non-streaming responses and errors carry it).
    pub attempts_header: Option<u32>,
}

impl ChatResult {
    /// It succeeded.
    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }
}

/// An HTTP/1.1 client for a gateway at `addr`, with enough connections for `clients`
/// requests in flight on each lane.
///
/// # Errors
/// [`BenchError::Client`] when the client cannot be built (it always can for an address).
pub fn client(addr: SocketAddr, clients: usize) -> Result<Upstream, BenchError> {
    let mut cfg = UpstreamConfig {
        name: "bench-client".into(),
        base_url: format!("http://{addr}")
            .parse()
            .map_err(|e| BenchError::Url(format!("{addr}: {e}")))?,
        protocol: Protocol::Http1,
        ..UpstreamConfig::default()
    };
    for lane in [&mut cfg.pool.stream, &mut cfg.pool.short] {
        lane.max_connections = Some(clients.max(1) * 2);
    }
    Upstream::new(cfg).map_err(|e| BenchError::Client(e.to_string()))
}

/// Sends one chat request to `/v1/chat/completions` and reads its response to the end, for
/// at most `timeout`. The id goes out as `x-request-id` (the gateway forwards it, so the
/// mocks' records tell which attempts it took) and as `Idempotency-Key`: a client that may
/// be retried after a reset says so, since the gateway resends a request the upstream may
/// have processed only then.
///
/// # Cancel safety
/// Dropping the future drops the request (and its connection, on HTTP/1.1).
pub async fn send(client: &Upstream, kind: Kind, id: &str, timeout: Duration) -> ChatResult {
    let mut req = http::Request::post("/v1/chat/completions")
        .body(Bytes::from_static(kind.body()))
        .expect("a valid request");
    let h = req.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(idv) = HeaderValue::from_str(id) {
        h.insert("x-request-id", idv.clone());
        h.insert("idempotency-key", idv);
    }
    let start = Instant::now();
    let mut attempts_header = None;
    let result = tokio::time::timeout(timeout, async {
        let resp = client
            .send(req, start + timeout)
            .await
            .map_err(|e| (Failure::of(&e), e.to_string()))?;
        attempts_header = resp
            .headers()
            .get("x-sluice-attempts")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let status = resp.status();
        if !status.is_success() {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes());
            let text = body.as_deref().map(excerpt).unwrap_or_default();
            return Err((
                Failure::Status(status.as_u16()),
                format!("status {status}: {text}"),
            ));
        }
        match kind {
            // A call's latency is its total, taken below.
            Kind::Call => resp
                .into_body()
                .collect()
                .await
                .map(|_| None)
                .map_err(|e| (Failure::Body, e.to_string())),
            Kind::Stream => read_stream(resp.into_body(), start).await.map(Some),
        }
    })
    .await
    .unwrap_or_else(|_| {
        Err((
            Failure::Timeout,
            format!("no answer within {} ms", timeout.as_millis()),
        ))
    });
    let total = start.elapsed();
    let (latency, failure) = match result {
        Ok(first_content) => (first_content.unwrap_or(total), None),
        Err(f) => (total, Some(f)),
    };
    ChatResult {
        kind,
        id: id.to_string(),
        start,
        latency,
        total,
        failure,
        attempts_header,
    }
}

fn excerpt(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned()
}

/// Reads an OpenAI chat stream to its end: the time to its first content, or why the client
/// would call it broken (an error event, no `[DONE]`, a cut).
async fn read_stream(
    mut body: ResponseBody,
    start: Instant,
) -> Result<Duration, (Failure, String)> {
    let mut decoder = Decoder::new();
    let mut first_content = None;
    let mut done = false;
    loop {
        let frame = body.frame().await;
        match &frame {
            Some(Err(e)) => return Err((Failure::Body, e.to_string())),
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    decoder.feed(d.clone());
                }
            }
            None => decoder.finish(),
        }
        while let Some(Ok(item)) = decoder.next_item() {
            let Item::Event(ev) = item else { continue };
            let data = ev.data();
            if data == b"[DONE]" {
                done = true;
                continue;
            }
            let v: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
            if v.get("error").is_some() {
                return Err((Failure::ErrorEvent, excerpt(data)));
            }
            let content = v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty());
            if content && first_content.is_none() {
                first_content = Some(start.elapsed());
            }
        }
        if frame.is_none() {
            break;
        }
    }
    match (done, first_content) {
        (true, Some(t)) => Ok(t),
        (true, None) => Err((Failure::Cut, "[DONE] without any content".into())),
        (false, _) => Err((Failure::Cut, "the stream ended without [DONE]".into())),
    }
}
