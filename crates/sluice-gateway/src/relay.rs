//! The SSE relay: upstream bytes in, the same bytes out, one complete event at a time.
//!
//! It is an `http_body::Body` that hyper polls only when it can write to the client, and it
//! polls the upstream only when it has nothing ready to give. So:
//! - backpressure is end to end with no buffer of our own: at most one upstream chunk plus one
//!   partial event sit in the gateway (the decoder's bound caps the event), and HTTP/2 flow
//!   control capacity upstream is released only as chunks are taken (sluice-upstream does
//!   that when we poll it);
//! - cancellation is by ownership: when the client goes away hyper drops this body, which drops
//!   the upstream body, which resets the HTTP/2 stream or discards the HTTP/1.1 connection;
//! - events are forwarded as the upstream's exact bytes (`Bytes` slices, no re-encoding), so
//!   only complete events ever reach the client and an error event can always follow cleanly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use sluice_sse::{DecodeError, Decoder, Item};
use sluice_upstream::{BodyError, ResponseBody};
use tokio::time::{sleep_until, Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::config::OnClientDisconnect;
use crate::error::sse_error_event;
use crate::route::Api;
use crate::telemetry::{EndReason, RequestLog, Telemetry};

/// A wait longer than this between handing the client an event and being asked for the next
/// one means the client (or its connection) is not keeping up.
const BACKPRESSURE_PAUSE: Duration = Duration::from_millis(10);

const HEARTBEAT: &[u8] = b": ping\n\n";

/// Timing settings of one stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelayTimers {
    /// No first event by then: `first_byte_timeout`.
    pub(crate) first_event_by: Instant,
    /// Longest gap between events.
    pub(crate) idle: Duration,
    /// End of the whole exchange.
    pub(crate) total_by: Instant,
    /// Heartbeat period while the upstream is silent.
    pub(crate) heartbeat: Duration,
}

/// The relay body. `Send` (hyper's HTTP/2 server needs it) and owned by the response.
pub(crate) struct SseRelay {
    upstream: Option<ResponseBody>,
    decoder: Decoder,
    api: Api,
    log: RequestLog,
    telemetry: Arc<Telemetry>,
    timers: RelayTimers,
    /// Fires at the first-event deadline, then at last event + idle.
    idle: Pin<Box<Sleep>>,
    total: Pin<Box<Sleep>>,
    heartbeat: Pin<Box<Sleep>>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    got_event: bool,
    upstream_done: bool,
    ended: bool,
    last_yield: Option<Instant>,
    on_disconnect: OnClientDisconnect,
    /// Most upstream bytes held at once (decoder input not yet forwarded), for the metric
    /// that proves the per-stream bound.
    peak_buffered: usize,
}

impl SseRelay {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        upstream: ResponseBody,
        decoder: Decoder,
        api: Api,
        log: RequestLog,
        telemetry: Arc<Telemetry>,
        timers: RelayTimers,
        shutdown: WaitForCancellationFutureOwned,
        on_disconnect: OnClientDisconnect,
    ) -> Self {
        telemetry.stream_started();
        SseRelay {
            upstream: Some(upstream),
            decoder,
            api,
            log,
            telemetry,
            idle: Box::pin(sleep_until(timers.first_event_by)),
            total: Box::pin(sleep_until(timers.total_by)),
            heartbeat: Box::pin(sleep_until(Instant::now() + timers.heartbeat)),
            timers,
            shutdown: Box::pin(shutdown),
            got_event: false,
            upstream_done: false,
            ended: false,
            last_yield: None,
            on_disconnect,
            peak_buffered: 0,
        }
    }

    /// Drops the upstream body (cancelling it if unfinished), keeping its phase timings for
    /// the log line.
    fn take_upstream(&mut self) -> Option<ResponseBody> {
        let up = self.upstream.take();
        if let Some(u) = &up {
            self.log.timings = Some(u.timings());
        }
        up
    }

    /// Hands bytes to the client and restarts the heartbeat clock.
    fn forward(
        &mut self,
        bytes: Bytes,
        events: u64,
    ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        let now = Instant::now();
        self.heartbeat.as_mut().reset(now + self.timers.heartbeat);
        self.log.first_byte();
        self.log.sent(bytes.len(), events);
        self.last_yield = Some(now);
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    /// Ends the stream with a final error event in the client's API format. Dropping the
    /// upstream body here cancels it (RST_STREAM / connection closed).
    fn fail(
        &mut self,
        reason: EndReason,
        message: &str,
    ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        self.take_upstream();
        self.ended = true;
        let event = sse_error_event(self.api, reason.as_str(), message);
        self.log.sent(event.len(), 0);
        self.log.finish(reason);
        Poll::Ready(Some(Ok(Frame::data(event))))
    }

    fn complete(&mut self) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        self.ended = true;
        self.take_upstream();
        self.log.finish(EndReason::Completed);
        Poll::Ready(None)
    }
}

fn body_error_reason(e: &BodyError) -> (EndReason, String) {
    (
        EndReason::UpstreamReset,
        format!("the upstream broke off the stream: {e}"),
    )
}

impl Body for SseRelay {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(t) = this.last_yield.take() {
            if t.elapsed() >= BACKPRESSURE_PAUSE {
                this.telemetry.backpressure_pause();
            }
        }
        loop {
            while let Some(item) = this.decoder.next_item() {
                match item {
                    Ok(Item::Event(ev)) => {
                        this.got_event = true;
                        let next = Instant::now() + this.timers.idle;
                        this.idle.as_mut().reset(next);
                        return this.forward(ev.into_raw(), 1);
                    }
                    Ok(Item::Comment(c)) => {
                        if c.in_event() {
                            // Its bytes travel inside the event's raw span.
                            continue;
                        }
                        // An upstream heartbeat: proof of life, and the client gets it too.
                        if this.got_event {
                            let next = Instant::now() + this.timers.idle;
                            this.idle.as_mut().reset(next);
                        }
                        let raw = c.raw().clone();
                        if !raw.is_empty() {
                            return this.forward(raw, 0);
                        }
                    }
                    Ok(Item::Skipped(s)) => {
                        let raw = s.raw().clone();
                        if !raw.is_empty() {
                            return this.forward(raw, 0);
                        }
                    }
                    Err(DecodeError::EventTooLarge { limit }) => {
                        return this.fail(
                            EndReason::EventTooLarge,
                            &format!(
                                "an upstream event exceeded the gateway's limit of {limit} bytes"
                            ),
                        );
                    }
                    Err(DecodeError::Truncated { .. }) => {
                        return this.fail(
                            EndReason::UpstreamEofMidEvent,
                            "the upstream closed the stream in the middle of an event",
                        );
                    }
                }
            }
            if this.upstream_done {
                return this.complete();
            }
            if this.shutdown.as_mut().poll(cx).is_ready() {
                return this.fail(EndReason::Shutdown, "the gateway is shutting down");
            }
            let Some(upstream) = this.upstream.as_mut() else {
                return this.complete();
            };
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.feed(data);
                        this.peak_buffered = this.peak_buffered.max(this.decoder.buffered_bytes());
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let (reason, msg) = body_error_reason(&e);
                    return this.fail(reason, &msg);
                }
                Poll::Ready(None) => {
                    this.decoder.finish();
                    this.upstream_done = true;
                }
                Poll::Pending => break,
            }
        }
        if this.total.as_mut().poll(cx).is_ready() {
            return this.fail(
                EndReason::TotalTimeout,
                "the stream exceeded the gateway's total timeout",
            );
        }
        if this.idle.as_mut().poll(cx).is_ready() {
            return if this.got_event {
                let msg = format!(
                    "no event from the upstream for {:?} (idle timeout)",
                    this.timers.idle
                );
                this.fail(EndReason::IdleTimeout, &msg)
            } else {
                this.fail(
                    EndReason::FirstByteTimeout,
                    "no first event from the upstream within the first-byte timeout",
                )
            };
        }
        if this.heartbeat.as_mut().poll(cx).is_ready() {
            this.telemetry.heartbeat();
            // A heartbeat is not upstream progress; it only keeps the client's side alive.
            let out = this.forward(Bytes::from_static(HEARTBEAT), 0);
            this.last_yield = None;
            return out;
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

impl Drop for SseRelay {
    fn drop(&mut self) {
        self.telemetry.stream_ended();
        self.telemetry.relay_buffer_peak(self.peak_buffered);
        // A client that stopped taking data and then left never polled again: its last
        // pause ends here.
        if self
            .last_yield
            .is_some_and(|t| t.elapsed() >= BACKPRESSURE_PAUSE)
        {
            self.telemetry.backpressure_pause();
        }
        if self.ended {
            return;
        }
        // The client went away mid-stream.
        let upstream = self.take_upstream();
        self.log.finish(EndReason::ClientGone);
        if self.on_disconnect == OnClientDisconnect::Drain {
            if let Some(upstream) = upstream {
                let decoder = std::mem::take(&mut self.decoder);
                let deadline = self.timers.total_by;
                let request_id = self.log.request_id.clone();
                // Bounded by the total deadline; owns nothing but the upstream body.
                tokio::spawn(drain(upstream, decoder, deadline, request_id));
            }
        }
    }
}

/// `on_client_disconnect = "drain"`: read the upstream to its end without forwarding, and log
/// the last usage it reported (for billing by tokens).
async fn drain(
    upstream: ResponseBody,
    mut decoder: Decoder,
    deadline: Instant,
    request_id: String,
) {
    use http_body_util::BodyExt;
    let mut usage: Option<serde_json::Value> = None;
    let mut events = 0u64;
    let mut body = upstream;
    let outcome = tokio::time::timeout_at(deadline, async {
        loop {
            let end = match body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        decoder.feed(d);
                    }
                    false
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => {
                    decoder.finish();
                    true
                }
            };
            while let Some(Ok(item)) = decoder.next_item() {
                if let Item::Event(ev) = item {
                    events += 1;
                    if let Some(u) = usage_of(ev.data()) {
                        usage = Some(u);
                    }
                }
            }
            if end {
                return Ok(());
            }
        }
    })
    .await;
    let outcome = match outcome {
        Ok(Ok(())) => "drained".to_string(),
        Ok(Err(e)) => format!("upstream error: {e}"),
        Err(_) => "total timeout".to_string(),
    };
    tracing::info!(
        target: "sluice::drain",
        request_id = %request_id,
        events,
        usage = %usage.map(|u| u.to_string()).unwrap_or_default(),
        outcome = %outcome,
        "drained after client disconnect"
    );
}

/// The token usage an event reports: OpenAI's `usage` (final chunk), Anthropic's
/// `message_delta.usage` or `message_start.message.usage`, Responses' `response.usage`.
fn usage_of(data: &[u8]) -> Option<serde_json::Value> {
    // Cheap filter first: most events carry no usage.
    if !data.windows(7).any(|w| w == b"\"usage\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    let found = [
        v.get("usage"),
        v.pointer("/message/usage"),
        v.pointer("/response/usage"),
    ]
    .into_iter()
    .flatten()
    .find(|u| u.is_object())
    .cloned();
    found
}

#[cfg(test)]
mod tests {
    use super::usage_of;

    #[test]
    fn usage_from_each_format() {
        assert_eq!(
            usage_of(br#"{"choices":[],"usage":{"completion_tokens":3}}"#).unwrap()
                ["completion_tokens"],
            3
        );
        assert_eq!(
            usage_of(br#"{"type":"message_delta","usage":{"output_tokens":5}}"#).unwrap()
                ["output_tokens"],
            5
        );
        assert!(usage_of(br#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#).is_none());
        assert!(usage_of(b"[DONE]").is_none());
    }
}
