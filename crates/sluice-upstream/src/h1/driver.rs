//! An HTTP/1.1 connection's hyper `Connection` future, polled by whoever holds the connection
//! (the request waiting for its head, then its response body) instead of a task of its own.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use super::conn::{ConnInfo, Counted};
use super::{lock, Registry};
use crate::connect::Io;
use crate::pool::ShardState;
use crate::OpenConnection;

type Conn = http1::Connection<TokioIo<Counted<Io>>, Full<Bytes>>;

pub(crate) struct Driver {
    /// `None` once the connection ended (closed by either side, or broken).
    conn: Option<Pin<Box<Conn>>>,
    info: Arc<ConnInfo>,
    live: Registry,
    _open: OpenConnection,
}

impl Driver {
    pub(crate) fn new(
        conn: Conn,
        info: Arc<ConnInfo>,
        live: Registry,
        open: OpenConnection,
    ) -> Self {
        Driver {
            conn: Some(Box::pin(conn)),
            info,
            live,
            _open: open,
        }
    }

    /// The connection ended: it can carry nothing more.
    pub(crate) fn is_done(&self) -> bool {
        self.conn.is_none()
    }

    /// Lets hyper read and write what it can now; registers `cx`'s waker for more.
    pub(crate) fn poll_connection(&mut self, cx: &mut Context<'_>) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Poll::Ready(result) = conn.as_mut().poll(cx) {
            if let Err(e) = result {
                tracing::debug!(error = %e, "upstream http/1.1 connection ended with an error");
            }
            self.conn = None;
            self.ended();
        }
    }

    /// `fut` (a `SendRequest` call on this connection), with the connection moved on while it
    /// waits. When the connection ends, hyper fails `fut`, so this never waits on a dead one.
    pub(crate) async fn drive<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        poll_fn(|cx| {
            self.poll_connection(cx);
            fut.as_mut().poll(cx)
        })
        .await
    }

    fn ended(&self) {
        self.info.set_state(ShardState::Closed);
        lock(&self.live).remove(&self.info.id);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Dropping hyper's connection closes the socket (a request in flight is abandoned,
        // which is how HTTP/1.1 cancels).
        if self.conn.take().is_some() {
            self.ended();
        }
    }
}
