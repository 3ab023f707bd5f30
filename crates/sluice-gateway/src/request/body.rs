//! The response body: a complete buffer or the SSE relay.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use crate::relay::SseRelay;

/// The response body: a complete buffer or the SSE relay.
pub(crate) enum GatewayBody {
    Full(Option<Bytes>),
    Relay(Box<SseRelay>),
    /// A mounted service's answer (see `mount`).
    Mounted(crate::mount::MountedBody),
    /// A stored stream replayed from the response cache.
    Cached(Box<super::cached::CachedStream>),
    /// A resumable stream's log, read from one event on (see `resume`).
    Resumed(Box<crate::resume::Reader>),
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            GatewayBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Relay(r) => Pin::new(r.as_mut()).poll_frame(cx),
            GatewayBody::Mounted(m) => Pin::new(m).poll_frame(cx),
            GatewayBody::Cached(c) => c.poll_frame(cx),
            GatewayBody::Resumed(r) => r.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Full(b) => b.is_none(),
            GatewayBody::Relay(r) => r.is_end_stream(),
            GatewayBody::Mounted(m) => m.is_end_stream(),
            GatewayBody::Cached(c) => c.is_end_stream(),
            GatewayBody::Resumed(r) => r.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            GatewayBody::Full(None) => SizeHint::with_exact(0),
            GatewayBody::Relay(_) | GatewayBody::Cached(_) | GatewayBody::Resumed(_) => {
                SizeHint::default()
            }
            GatewayBody::Mounted(m) => m.size_hint(),
        }
    }
}

pub(crate) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<GatewayBody> {
    let mut r = Response::new(GatewayBody::Full(Some(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
