//! Writing a response body over either protocol, with the timing, faults and evidence the
//! knobs ask for.
//!
//! Every wait watches for the client leaving, so a cancel is recorded the moment the mock can
//! know of it, even during the time-to-first-token wait.

use std::future::poll_fn;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_providers::eventstream::Message;
use sluice_sse::{Encoder, OutEvent};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

use crate::knobs::Behavior;
use crate::shapes::EventSeq;
use crate::stats::{Outcome, ReqStats};

/// Largest piece handed to the connection at once for big non-streaming bodies, so that flow
/// control (and the write-blocked clock) acts on it in steps instead of all at once.
const WRITE_PIECE: usize = 64 * 1024;

/// How a stream's events are framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (`text/event-stream`): every API but Bedrock.
    Sse,
    /// AWS event-stream messages (`application/vnd.amazon.eventstream`), CRC-checked binary
    /// frames: Bedrock's ConverseStream and InvokeModelWithResponseStream. An event whose name
    /// ends in `Exception` goes as an exception message (`:message-type: exception`,
    /// `:exception-type`), any other as an event (`:event-type`). No heartbeats: the framing
    /// has no comments.
    EventStream,
}

impl Framing {
    /// The response's `content-type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Framing::Sse => "text/event-stream",
            Framing::EventStream => "application/vnd.amazon.eventstream",
        }
    }
}

/// One event as an event-stream message, appended to `buf`.
fn event_stream_message(buf: &mut BytesMut, event: Option<&'static str>, data: String) {
    let name = event.unwrap_or("chunk");
    let m = if name.ends_with("Exception") {
        Message::new(data)
            .with_str(":message-type", "exception")
            .with_str(":exception-type", name)
            .with_str(":content-type", "application/json")
    } else {
        Message::new(data)
            .with_str(":event-type", name)
            .with_str(":content-type", "application/json")
            .with_str(":message-type", "event")
    };
    // Names are a few bytes and payloads far below 4 GiB: encoding cannot fail here.
    let _ = m.encode(buf);
}

/// How the mock learned the client had gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// HTTP/2 RST_STREAM from the client.
    Reset,
    /// The connection ended.
    ConnectionClosed,
    /// HTTP/1.1: hyper dropped the response body (the client closed or the write failed).
    BodyDropped,
}

impl Gone {
    pub(crate) fn outcome(self) -> Outcome {
        Outcome::Cancelled(
            match self {
                Gone::Reset => "rst_stream",
                Gone::ConnectionClosed => "connection_closed",
                Gone::BodyDropped => "client_gone",
            }
            .to_string(),
        )
    }
}

/// The HTTP/1.1 response body reads from this channel. An `Err` item makes hyper fail the body,
/// which closes the connection mid-response: the HTTP/1.1 way to abort.
pub(crate) type H1Tx = mpsc::Sender<Result<Bytes, Aborted>>;

/// The error an aborted HTTP/1.1 body ends with.
#[derive(Debug, thiserror::Error)]
#[error("response aborted by the mock's abort_after fault")]
pub(crate) struct Aborted;

/// Where a response body goes.
pub(crate) enum Sink {
    H1(H1Tx),
    H2(h2::SendStream<Bytes>),
}

impl Sink {
    /// Hands `data` to the connection, waiting while the peer does not take it. Returns how
    /// long the write was blocked; a write the client abandoned records its blocked time in
    /// `req` before failing, so the stats include the wait that never ended.
    async fn write(&mut self, data: Bytes, req: &ReqStats) -> Result<Duration, Gone> {
        let mut blocked = Duration::ZERO;
        let r = self.write_inner(data, &mut blocked).await;
        if r.is_err() {
            req.sent(0, 0, blocked);
        }
        r.map(|()| blocked)
    }

    async fn write_inner(&mut self, mut data: Bytes, blocked: &mut Duration) -> Result<(), Gone> {
        match self {
            Sink::H1(tx) => {
                // The channel holds one chunk, so `send` waits exactly while hyper has not
                // taken the previous one, i.e. while the socket does not drain.
                let t = Instant::now();
                let r = tx.send(Ok(data)).await;
                *blocked += t.elapsed();
                r.map_err(|_| Gone::BodyDropped)?;
            }
            Sink::H2(stream) => {
                while !data.is_empty() {
                    stream.reserve_capacity(data.len());
                    let mut cap = stream.capacity();
                    if cap == 0 {
                        let t = Instant::now();
                        let got = poll_fn(|cx| stream.poll_capacity(cx)).await;
                        *blocked += t.elapsed();
                        cap = match got {
                            Some(Ok(n)) => n,
                            _ => return Err(h2_gone(stream)),
                        };
                    }
                    let n = cap.min(data.len());
                    if n == 0 {
                        continue;
                    }
                    stream
                        .send_data(data.split_to(n), false)
                        .map_err(|_| h2_gone(stream))?;
                }
            }
        }
        Ok(())
    }

    /// Sleeps for `d`, returning early if the client goes away.
    async fn wait(&mut self, d: Duration) -> Result<(), Gone> {
        if d.is_zero() {
            return Ok(());
        }
        match self {
            Sink::H1(tx) => tokio::select! {
                _ = sleep(d) => Ok(()),
                _ = tx.closed() => Err(Gone::BodyDropped),
            },
            Sink::H2(stream) => tokio::select! {
                _ = sleep(d) => Ok(()),
                r = poll_fn(|cx| stream.poll_reset(cx)) => Err(match r {
                    Ok(_) => Gone::Reset,
                    Err(_) => Gone::ConnectionClosed,
                }),
            },
        }
    }

    /// Ends the body normally.
    async fn finish(self) -> Result<(), Gone> {
        match self {
            Sink::H1(_) => Ok(()),
            Sink::H2(mut stream) => stream
                .send_data(Bytes::new(), true)
                .map_err(|_| h2_gone(&mut stream)),
        }
    }

    /// Ends the body with a fault: HTTP/1.1 closes the connection, HTTP/2 resets the stream
    /// with INTERNAL_ERROR.
    async fn abort(self) {
        match self {
            Sink::H1(tx) => {
                let _ = tx.send(Err(Aborted)).await;
            }
            Sink::H2(mut stream) => stream.send_reset(h2::Reason::INTERNAL_ERROR),
        }
    }
}

fn h2_gone(stream: &mut h2::SendStream<Bytes>) -> Gone {
    // Tell a client reset from a dead connection without waiting.
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    match stream.poll_reset(&mut cx) {
        std::task::Poll::Ready(Ok(_)) => Gone::Reset,
        _ => Gone::ConnectionClosed,
    }
}

/// Sends a whole (non-streaming) body and records the outcome.
pub(crate) async fn full(mut sink: Sink, mut body: Bytes, req: &ReqStats) {
    while !body.is_empty() {
        let piece = body.split_to(body.len().min(WRITE_PIECE));
        let n = piece.len();
        match sink.write(piece, req).await {
            Ok(blocked) => req.sent(n, 0, blocked),
            Err(gone) => return req.end(gone.outcome()),
        }
    }
    match sink.finish().await {
        Ok(()) => req.end(Outcome::Completed),
        Err(gone) => req.end(gone.outcome()),
    }
}

/// Streams `seq` (SSE, or event-stream messages) with the behaviour's timing and faults, and
/// records the outcome.
pub(crate) async fn stream(
    mut sink: Sink,
    seq: &dyn EventSeq,
    b: &Behavior,
    req: &ReqStats,
    framing: Framing,
) {
    let outcome = match stream_events(&mut sink, seq, b, req, framing).await {
        Ok(true) => match sink.finish().await {
            Ok(()) => Outcome::Completed,
            Err(gone) => gone.outcome(),
        },
        Ok(false) => {
            sink.abort().await;
            Outcome::Aborted
        }
        Err(gone) => gone.outcome(),
    };
    req.end(outcome);
}

/// Returns `Ok(false)` when the `abort_after` fault fired.
async fn stream_events(
    sink: &mut Sink,
    seq: &dyn EventSeq,
    b: &Behavior,
    req: &ReqStats,
    framing: Framing,
) -> Result<bool, Gone> {
    let enc = match framing {
        Framing::Sse => Some(Encoder::new(b.line_ending)),
        Framing::EventStream => None,
    };
    let enc = enc.as_ref();
    wait_with_heartbeats(sink, b.ttft, b, enc, req).await?;
    let mut buf = BytesMut::new();
    for i in 0..seq.len() {
        if let Some((after, stall)) = b.stall_after {
            if after as usize == i {
                // A stall is silence: no heartbeats either.
                sink.wait(stall).await?;
            }
        }
        if i > 0 {
            wait_with_heartbeats(sink, b.interval, b, enc, req).await?;
        }
        // The abort comes when the next event is due, as a crash between tokens would.
        if b.abort_after == Some(i as u32) {
            return Ok(false);
        }
        let (event, mut data) = seq.event(i);
        if b.malformed == Some(i as u32) {
            // Cut the JSON in half: what a buggy upstream or a broken proxy produces.
            data.truncate(data.len() / 2);
        }
        match enc {
            Some(enc) => enc.event(
                &mut buf,
                &OutEvent {
                    event,
                    data: &data,
                    ..Default::default()
                },
            ),
            None => event_stream_message(&mut buf, event, data),
        }
        let mut bytes = buf.split().freeze();
        let total = bytes.len();
        let piece = b.split.unwrap_or(total).max(1);
        let mut blocked = Duration::ZERO;
        while !bytes.is_empty() {
            blocked += sink
                .write(bytes.split_to(piece.min(bytes.len())), req)
                .await?;
            if b.split.is_some() {
                // Give the connection a chance to flush each piece as its own write.
                tokio::task::yield_now().await;
            }
        }
        req.sent(total, 1, blocked);
    }
    if b.abort_after == Some(seq.len() as u32) {
        wait_with_heartbeats(sink, b.interval, b, enc, req).await?;
        return Ok(false);
    }
    Ok(true)
}

/// Waits `d`, with a `: ping` at every multiple of the heartbeat period strictly inside it
/// (SSE only: `enc` is `None` for event-stream framing, which has no comments).
/// The pings are scheduled from the start of the wait, so their number is a function of `d`
/// and the period alone (a late timer sends a ping late, never skips it): the same request
/// gives the same bytes, however loaded the machine.
async fn wait_with_heartbeats(
    sink: &mut Sink,
    d: Duration,
    b: &Behavior,
    enc: Option<&Encoder>,
    req: &ReqStats,
) -> Result<(), Gone> {
    let (Some(every), Some(enc)) = (b.heartbeat, enc) else {
        return sink.wait(d).await;
    };
    let start = Instant::now();
    let mut at = every;
    while at < d {
        sink.wait((start + at).saturating_duration_since(Instant::now()))
            .await?;
        let mut buf = BytesMut::new();
        enc.comment(&mut buf, "ping");
        let n = buf.len();
        let blocked = sink.write(buf.freeze(), req).await?;
        req.sent(n, 0, blocked);
        at += every;
    }
    sink.wait((start + d).saturating_duration_since(Instant::now()))
        .await
}
