//! A cache hit answered: a whole body at once, or a stored stream replayed as the stream it
//! was (its events, in the client's API as they were sent), at once or at the original pace.
//! No upstream is asked; the request's record says what the answer would have cost.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body::Frame;
use sluice_state::{
    age_header_value, CacheStatus, CachedBody, CachedResponse, Replay, CACHE_STATUS_HEADER,
};
use tokio::time::{Instant, Sleep};

use super::GatewayBody;
use crate::headers::{REQUEST_ID, X_ACCEL_BUFFERING};
use crate::outcome::Finish;
use sluice_telemetry::EndReason;

/// A hit, as admission found it.
pub(crate) struct Hit {
    pub(crate) entry: Arc<CachedResponse>,
    pub(crate) age: Duration,
    pub(crate) replay: Replay,
    /// The price list of the route's first upstream: what the answer is priced by (the
    /// upstream that first answered it is not kept).
    pub(crate) price_list: &'static str,
    /// On a request with guardrails: `x-sluice-guardrails` (see `Guards::hit_header`).
    pub(crate) guardrails: Option<HeaderValue>,
}

/// The response to a hit. A whole body settles the request now; a stream settles it when the
/// replay ends (or as `client_gone` if the client leaves first).
pub(crate) fn answer(
    hit: Hit,
    request_id: &HeaderValue,
    mut log: Box<Finish>,
) -> Response<GatewayBody> {
    let Hit {
        entry,
        age,
        replay,
        price_list,
        guardrails,
    } = hit;
    log.status = entry.status.as_u16();
    log.cache_status = Some(CacheStatus::Hit);
    log.provider = price_list;
    log.cache_saved = Some(Box::new(crate::admit::saved_usage(&entry.usage)));
    let mut r = match &entry.body {
        CachedBody::Whole(body) => {
            let body = body.clone();
            log.first_byte();
            log.sent(body.len(), 0);
            log.finish(EndReason::Completed);
            Response::new(GatewayBody::Full(Some(body)))
        }
        CachedBody::Events(_) => {
            log.stream_started();
            let paced = replay == Replay::Paced;
            let started = Instant::now();
            let stream = CachedStream {
                entry: entry.clone(),
                next: 0,
                started,
                sleep: paced.then(|| Box::pin(tokio::time::sleep_until(started))),
                log,
            };
            Response::new(GatewayBody::Cached(Box::new(stream)))
        }
    };
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    for (name, value) in &entry.headers {
        h.insert(name.clone(), value.clone());
    }
    if entry.is_stream() {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    }
    h.insert(REQUEST_ID, request_id.clone());
    h.insert(CACHE_STATUS_HEADER, CacheStatus::Hit.header_value());
    if let Some(v) = guardrails {
        h.insert(crate::guard::X_SLUICE_GUARDRAILS, v);
    }
    h.insert(header::AGE, age_header_value(age));
    r
}

/// A stored stream replayed: one event a frame, each after its original offset when paced.
/// Dropping it (the client went away) drops nothing upstream: there is no upstream.
pub(crate) struct CachedStream {
    entry: Arc<CachedResponse>,
    next: usize,
    started: Instant,
    /// Paced replays only: the wait for the next event's offset.
    sleep: Option<Pin<Box<Sleep>>>,
    log: Box<Finish>,
}

impl CachedStream {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        let CachedBody::Events(events) = &self.entry.body else {
            return Poll::Ready(None);
        };
        let Some(event) = events.get(self.next) else {
            self.log.finish(EndReason::Completed);
            return Poll::Ready(None);
        };
        if let Some(sleep) = self.sleep.as_mut() {
            let due = self.started + event.offset;
            if Instant::now() < due {
                sleep.as_mut().reset(due);
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        let bytes = event.bytes.clone();
        self.next += 1;
        self.log.first_byte();
        self.log.sent(bytes.len(), 1);
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        match &self.entry.body {
            CachedBody::Events(events) => self.next >= events.len() && self.log.is_finished(),
            CachedBody::Whole(_) => true,
        }
    }
}
