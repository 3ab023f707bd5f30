//! HTTP/1.1: a keep-alive pool of `hyper::client::conn::http1` connections, capped at
//! `max_http1_connections`.
//!
//! The cap is a semaphore whose permits are held by *leases* (a connection in use, from
//! request to the end of its response body). A connection goes back to the idle list before
//! its permit is released, and a new connection is opened only by a permit holder that found
//! the idle list empty, so connections (idle + leased) never exceed the cap. Waiting for a
//! permit is FIFO (tokio's semaphore is fair) and bounded by the request's deadline.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};

use crate::connect::{Connector, Io};
use crate::error::{self, UpstreamError};
use crate::Counters;

type SendRequest = http1::SendRequest<Full<Bytes>>;

pub(crate) struct H1Pool {
    connector: Arc<Connector>,
    permits: Arc<Semaphore>,
    /// Most recently returned last (LIFO): the warmest connection is reused first, and the
    /// coldest ones are the ones the server times out.
    idle: Mutex<Vec<SendRequest>>,
    counters: Arc<Counters>,
}

// A poisoned lock only means a panic elsewhere; the idle list itself is always consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl H1Pool {
    pub(crate) fn new(connector: Arc<Connector>, cap: usize, counters: Arc<Counters>) -> Self {
        H1Pool {
            connector,
            permits: Arc::new(Semaphore::new(cap)),
            idle: Mutex::new(Vec::new()),
            counters,
        }
    }

    pub(crate) fn idle_count(&self) -> usize {
        lock(&self.idle).len()
    }

    /// Sends one request and returns the response with the lease of its connection.
    ///
    /// `preconnected` is a stream whose TLS handshake already chose http/1.1 (protocol
    /// `Auto`); it is used instead of opening a new connection if the pool has none idle.
    ///
    /// Cancel safety: dropping the future drops the lease; a connection with a request in
    /// flight is then closed by hyper, never returned to the pool.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
        deadline: Instant,
        mut preconnected: Option<Io>,
    ) -> Result<(Response<Incoming>, Lease), UpstreamError> {
        let permit = timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| UpstreamError::PoolTimeout)?
            .map_err(|_| UpstreamError::Closed)?;
        let mut permit = Some(permit);
        loop {
            let (mut send, reused) = match self.take_idle() {
                Some(send) => (send, true),
                None => {
                    let io = match preconnected.take() {
                        Some(io) => io,
                        None => self.connector.connect(deadline).await?.io,
                    };
                    (self.handshake(io).await?, false)
                }
            };
            match timeout_at(deadline, send.ready()).await {
                Err(_) => return Err(UpstreamError::Deadline),
                // An idle connection that died between the check and now: try another.
                Ok(Err(_)) if reused => continue,
                Ok(Err(e)) => return Err(error::from_hyper_head(&e)),
                Ok(Ok(())) => {}
            }
            let sent = send.try_send_request(req);
            let lease = Lease {
                send: Some(send),
                pool: self.clone(),
                permit: permit.take(),
            };
            match timeout_at(deadline, sent).await {
                // Dropping `sent` makes hyper close the connection; the lease discards it.
                Err(_) => return Err(UpstreamError::Deadline),
                Ok(Ok(resp)) => return Ok((resp, lease)),
                Ok(Err(mut e)) => {
                    // hyper hands the request back when it was never written: a reused
                    // connection that the server closed meanwhile. Safe to send it on another.
                    if reused {
                        if let Some(r) = e.take_message() {
                            req = r;
                            permit = lease.into_permit();
                            continue;
                        }
                    }
                    return Err(error::from_hyper_head(e.error()));
                }
            }
        }
    }

    /// Pops an idle connection that is still open. Closed ones are dropped here: hyper marks
    /// a connection closed as soon as its task sees the server's FIN.
    fn take_idle(&self) -> Option<SendRequest> {
        let mut idle = lock(&self.idle);
        while let Some(send) = idle.pop() {
            if !send.is_closed() {
                return Some(send);
            }
        }
        None
    }

    async fn handshake(&self, io: Io) -> Result<SendRequest, UpstreamError> {
        let (send, conn) = http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let open = self.counters.connection_opened();
        // The task ends when the connection closes, which happens when its SendRequest is
        // dropped: the pool (owned by the Upstream) or a lease (owned by a response) holds it.
        tokio::spawn(async move {
            let _open = open;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream http/1.1 connection ended with an error");
            }
        });
        Ok(send)
    }
}

/// One HTTP/1.1 connection in use. Dropped without [`Lease::reuse`], it closes the
/// connection: only a response read to its end leaves the connection in a known state.
pub(crate) struct Lease {
    send: Option<SendRequest>,
    pool: Arc<H1Pool>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    /// The response was read to EOF: the connection may carry another request.
    pub(crate) fn reuse(mut self) {
        if let Some(send) = self.send.take() {
            if !send.is_closed() {
                // Before the permit is released (in drop), so a waiter finds it idle.
                lock(&self.pool.idle).push(send);
            }
        }
    }

    fn into_permit(mut self) -> Option<OwnedSemaphorePermit> {
        drop(self.send.take());
        self.permit.take()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Connection first (closing it), then the permit.
        drop(self.send.take());
        drop(self.permit.take());
    }
}
