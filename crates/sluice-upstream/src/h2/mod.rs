//! HTTP/2 on the `h2` crate directly (not hyper's client, which hides PING, GOAWAY and
//! REFUSED_STREAM): one connection of a lane, a "shard" (conn.rs, with its PING health in
//! health.rs and its frame tap in tap.rs), and one exchange on a leased stream slot of it
//! (here): open the stream, send the buffered body, wait for the response headers. Choosing
//! the shard is the pool's job (`pool/`), which tells a shard only through
//! [`LaneEvents`].

mod conn;
mod health;
mod tap;

use std::future::Future;

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response};
use tokio::time::{timeout_at, Instant};

pub(crate) use conn::{LaneEvents, Shard, StreamLease};

use crate::connect::Connected;
use crate::error::{self, UpstreamError};
use crate::target::Target;
use crate::timing::Recorder;

/// What the HTTP/2 path did.
pub(crate) enum Sent {
    Response(Response<RecvStream>, StreamGuard, StreamLease),
    /// ALPN chose http/1.1 (`Auto`): the caller sends the request over HTTP/1.1, on this
    /// freshly handshaken stream if there is one.
    Http1(Option<Connected>),
}

/// Why an exchange failed, split by whether the server can have processed the request.
pub(crate) enum Failed {
    /// REFUSED_STREAM, a stream above a GOAWAY's last-stream-id, or a connection found dead
    /// before the request was written: safe to send again on another connection.
    NotProcessed(UpstreamError),
    Processed(UpstreamError),
}

/// Sends `req` (whose body is already complete) on the leased shard and waits for
/// the response headers. `rec` learns when the request was handed to the connection.
///
/// The future is what a request waiting for its upstream holds, so it keeps `req` borrowed
/// and builds the HTTP/2 head only when it sends it (h2 takes that head); and it is an
/// `async` block rather than an `async fn`, which would keep a second copy of its arguments.
///
/// Cancel safety: dropping the future before the headers arrive resets the stream with
/// RST_STREAM(CANCEL) (via [`StreamGuard`]); the connection stays up for other streams.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps a second copy of its arguments"
)]
pub(crate) fn exchange<'a>(
    lease: StreamLease,
    target: &'a Target,
    req: &'a Request<Bytes>,
    deadline: Instant,
    rec: &'a mut Recorder,
) -> impl Future<Output = Result<Sent, Failed>> + Send + 'a {
    async move {
        let mut send = match timeout_at(deadline, lease.send_request().ready()).await {
            Err(_) => return Err(Failed::Processed(UpstreamError::Deadline)),
            Ok(Ok(send)) => send,
            Ok(Err(e)) => {
                // h2 refuses new streams on a connection that received GOAWAY or died: this
                // request was never written, so another connection may take it.
                lease.observe(&e);
                return Err(Failed::NotProcessed(match error::from_h2_head(&e) {
                    UpstreamError::GoAway => UpstreamError::GoAway,
                    _ => UpstreamError::Closed,
                }));
            }
        };
        let head = target
            .h2_path(req)
            .and_then(|path| target.h2_head(req, path))
            .map_err(Failed::Processed)?;
        let body = req.body();
        let end_of_stream = body.is_empty();
        let (response, stream) = send.send_request(head, end_of_stream).map_err(|e| {
            lease.observe(&e);
            classify(&lease, &e, None)
        })?;
        let stream_id = response.stream_id().as_u32();
        let mut guard = StreamGuard(Some(stream));
        if !end_of_stream {
            // Buffered JSON: one send_data is fine. h2 queues it and writes it as the
            // upstream's windows allow; the request size is bounded by the caller.
            if let Some(s) = guard.0.as_mut() {
                s.send_data(body.clone(), true).map_err(|e| {
                    lease.observe(&e);
                    classify(&lease, &e, Some(stream_id))
                })?;
            }
        }
        rec.written();
        match timeout_at(deadline, response).await {
            // `guard` resets the stream with CANCEL as it drops.
            Err(_) => Err(Failed::Processed(UpstreamError::Deadline)),
            Ok(Err(e)) => {
                lease.observe(&e);
                Err(classify(&lease, &e, Some(stream_id)))
            }
            Ok(Ok(resp)) => Ok(Sent::Response(resp, guard, lease)),
        }
    }
}

/// Maps an error before the response headers, and decides whether it proves "not
/// processed": REFUSED_STREAM, a graceful GOAWAY (see [`error::from_h2_head`]), or any GOAWAY
/// whose last-stream-id (seen by the shard's frame tap) is below our stream's id.
fn classify(lease: &StreamLease, e: &h2::Error, stream_id: Option<u32>) -> Failed {
    let mapped = error::from_h2_head(e);
    let above_last_id = e.is_go_away()
        && e.is_remote()
        && stream_id
            .zip(lease.shard().goaway_last_id())
            .is_some_and(|(id, last)| id > last);
    match mapped {
        UpstreamError::Refused | UpstreamError::GoAway => Failed::NotProcessed(mapped),
        _ if above_last_id => Failed::NotProcessed(UpstreamError::GoAway),
        other => Failed::Processed(other),
    }
}

/// The request half of an open stream. Dropped while the stream is still open, it resets
/// the stream with CANCEL: explicit, rather than relying on h2's "last handle dropped"
/// bookkeeping, so the upstream stops generating at once.
pub(crate) struct StreamGuard(Option<SendStream<Bytes>>);

impl StreamGuard {
    /// The stream ended normally (or with an error): nothing to cancel.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            // No-op if the stream is already closed.
            s.send_reset(Reason::CANCEL);
        }
    }
}
