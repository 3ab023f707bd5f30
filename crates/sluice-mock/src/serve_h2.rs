//! HTTP/2 (h2c prior knowledge, or h2 by ALPN) on the `h2` crate directly: the mock needs
//! exact control of RST_STREAM reasons, GOAWAY and flow-control capacity, which hyper hides.

use std::future::poll_fn;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio::time::sleep;

use crate::conn::ConnCtx;
use crate::emit::{self, Gone, Sink};
use crate::knobs::{Behavior, SILENT_LIMIT};
use crate::route::{self, NoReply, Reply, REQUEST_ID_HEADER};
use crate::stats::{CloseReason, Outcome, ReqStats};

/// Serves one HTTP/2 connection until the client closes it or a GOAWAY completes.
pub(crate) async fn serve<IO>(io: IO, ctx: ConnCtx)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = h2::server::Builder::new();
    if let Some(n) = ctx.cfg.h2_max_concurrent_streams {
        builder.max_concurrent_streams(n);
    }
    let Ok(mut conn) = builder.handshake::<_, Bytes>(io).await else {
        return;
    };
    // Streams are owned by their connection: when it ends, its streams end with it.
    let mut streams = JoinSet::new();
    let mut accepted = 0u32;
    let mut goaway_after = ctx.cfg.defaults.goaway_after;
    let mut going_away = false;
    loop {
        let next = tokio::select! {
            // First, so that a killed connection writes nothing more: not even the RST_STREAM
            // h2 would send for the streams it drops.
            biased;
            // `fail_with=close`: drop the connection as it is, no GOAWAY (a crashed server).
            () = ctx.kill.notified() => break,
            next = conn.accept() => next,
            Some(_) = streams.join_next(), if !streams.is_empty() => continue,
        };
        let Some(Ok((req, mut respond))) = next else {
            break;
        };
        if going_away {
            // Arrived after the GOAWAY began: never processed, so the client may retry it.
            ctx.conn.refused_stream();
            respond.send_reset(Reason::REFUSED_STREAM);
            continue;
        }
        let (parts, body) = req.into_parts();
        if route::is_admin(parts.uri.path()) {
            let reply = route::admin(
                &parts.method,
                &parts.uri,
                &parts.headers,
                &ctx.stats,
                &ctx.cfg,
            );
            streams.spawn(async move {
                if let Reply::Full { status, body, .. } = reply {
                    if let Ok(mut s) =
                        respond.send_response(json_head(status, body.len(), &[]), false)
                    {
                        let _ = s.send_data(body, true);
                    }
                }
            });
            continue;
        }
        accepted += 1;
        let behavior = route::behavior(
            &parts.headers,
            route::defaults_for(parts.uri.path(), &ctx.cfg),
        );
        if let Ok(b) = &behavior {
            if b.refuse {
                ctx.conn.refused_stream();
                respond.send_reset(Reason::REFUSED_STREAM);
                continue;
            }
            if let Some(rate) = b.degrade {
                ctx.rate.set(rate);
                ctx.conn.degrade(rate);
            }
            if b.goaway_after.is_some() {
                goaway_after = b.goaway_after;
            }
        }
        let stream_id = respond.stream_id().as_u32();
        let req = ctx.conn.open_request(stream_id, &parts);
        streams.spawn(handle(ctx.clone(), parts, body, respond, behavior, req));
        if goaway_after.is_some_and(|n| accepted >= n) {
            // Graceful: GOAWAY(2^31-1), one PING round trip, then GOAWAY(last stream id);
            // streams up to that id finish, later ones are refused above.
            conn.graceful_shutdown();
            ctx.conn.goaway();
            going_away = true;
        }
    }
    streams.shutdown().await;
}

enum BodyError {
    Gone(Gone),
    TooLarge,
}

async fn read_body(body: &mut RecvStream, b: Option<&Behavior>) -> Result<Bytes, BodyError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| {
            BodyError::Gone(if e.is_reset() {
                Gone::Reset
            } else {
                Gone::ConnectionClosed
            })
        })?;
        if let Some(rate) = b.and_then(|b| b.slow_read) {
            sleep(std::time::Duration::from_secs_f64(
                chunk.len() as f64 / rate as f64,
            ))
            .await;
        }
        // Capacity goes back only after the data is "processed", so slow_read really throttles
        // the client through flow control.
        let _ = body.flow_control().release_capacity(chunk.len());
        if buf.len() + chunk.len() > route::MAX_REQUEST_BODY {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn json_head(status: StatusCode, len: usize, extra: &[(&'static str, String)]) -> Response<()> {
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    resp
}

async fn handle(
    ctx: ConnCtx,
    parts: http::request::Parts,
    mut body: RecvStream,
    mut respond: SendResponse<Bytes>,
    behavior: Result<Behavior, crate::knobs::KnobError>,
    req: ReqStats,
) {
    let path = parts.uri.path().to_string();
    let read = read_body(&mut body, behavior.as_ref().ok()).await;
    drop(body);
    let (reply, b) = match (behavior, read) {
        (_, Err(BodyError::Gone(gone))) => return req.end(gone.outcome()),
        (Err(e), _) => (route::knob_error(&path, &e), Behavior::default()),
        (Ok(b), Err(BodyError::TooLarge)) => (route::too_large(&path), b),
        (Ok(b), Ok(bytes)) => {
            req.set_body(&bytes, ctx.cfg.max_recorded_body);
            let r = route::Request {
                method: &parts.method,
                uri: &parts.uri,
                headers: &parts.headers,
                body: &bytes,
            };
            let routed = route::route(&r, &b, &ctx.cfg);
            req.set_routed(&routed.routing);
            (routed.reply, b)
        }
    };
    req.set_status(reply.status());
    match reply {
        Reply::Nothing(how) => no_reply(how, &ctx, respond, &req).await,
        Reply::Full {
            status,
            body,
            headers,
        } => {
            if status.is_success() && !b.ttft.is_zero() {
                // Generation time before the headers, as a real non-streaming API behaves.
                let reset = tokio::select! {
                    _ = sleep(b.ttft) => None,
                    r = poll_fn(|cx| respond.poll_reset(cx)) => Some(r),
                };
                if let Some(r) = reset {
                    let gone = if r.is_ok() {
                        Gone::Reset
                    } else {
                        Gone::ConnectionClosed
                    };
                    return req.end(gone.outcome());
                }
            }
            let mut head = json_head(status, body.len(), &headers);
            add_request_id(&mut head, &req);
            match respond.send_response(head, body.is_empty()) {
                Ok(stream) if !body.is_empty() => emit::full(Sink::H2(stream), body, &req).await,
                Ok(_) => req.end(Outcome::Completed),
                Err(_) => req.end(Gone::ConnectionClosed.outcome()),
            }
        }
        Reply::Stream(seq, framing) => {
            let mut head = Response::new(());
            let h = head.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(framing.content_type()),
            );
            h.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            add_request_id(&mut head, &req);
            match respond.send_response(head, false) {
                Ok(stream) => emit::stream(Sink::H2(stream), &*seq, &b, &req, framing).await,
                Err(_) => req.end(Gone::ConnectionClosed.outcome()),
            }
        }
    }
}

/// A processed request that gets no response: its stream is reset, the whole connection is
/// dropped, or (`silent`) nothing happens until the client resets the stream or leaves,
/// given up after [`SILENT_LIMIT`] with RST_STREAM(CANCEL).
async fn no_reply(how: NoReply, ctx: &ConnCtx, mut respond: SendResponse<Bytes>, req: &ReqStats) {
    match how {
        NoReply::Reset => respond.send_reset(Reason::INTERNAL_ERROR),
        NoReply::Close => {
            ctx.conn.closed_by_server(CloseReason::FaultClose);
            req.end(Outcome::Aborted);
            ctx.kill.notify_one();
            // Hold the stream until the connection task aborts this one: dropping it now would
            // queue an RST_STREAM that the connection might still write.
            std::future::pending::<()>().await;
        }
        NoReply::Silent => {
            let left = tokio::select! {
                _ = sleep(SILENT_LIMIT) => None,
                r = poll_fn(|cx| respond.poll_reset(cx)) => Some(r),
            };
            match left {
                Some(r) => {
                    let gone = if r.is_ok() {
                        Gone::Reset
                    } else {
                        Gone::ConnectionClosed
                    };
                    return req.end(gone.outcome());
                }
                None => respond.send_reset(Reason::CANCEL),
            }
        }
    }
    req.end(Outcome::Aborted);
}

fn add_request_id(resp: &mut Response<()>, req: &ReqStats) {
    resp.headers_mut()
        .insert(REQUEST_ID_HEADER, HeaderValue::from(req.id));
}
