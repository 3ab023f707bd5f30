//! Services mounted on the gateway's listener beside the model API (the MCP gateway at
//! `/mcp`). The gateway identifies the caller's key, as it does for a model call, and hands
//! the request over whole; the service answers in its own format. It knows nothing else about
//! them: the composition root (`sluice`) builds them and passes them to
//! [`Gateway::start_mounted`](crate::Gateway::start_mounted).
//!
//! A leaf of the request path: `request` dispatches to a mount before it looks for a model
//! endpoint, so a config without mounts pays one look at an empty slice per request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use prometheus_client::registry::Registry;

/// A mounted service's request body: the client's, read by the service within its own cap.
pub type MountBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A mounted service's response body. It cannot fail: a service that must end a stream early
/// says so in its own format first.
pub type MountedBody = UnsyncBoxBody<Bytes, Infallible>;

/// The answer a mounted service is computing.
pub type MountFuture = Pin<Box<dyn Future<Output = Response<MountedBody>> + Send>>;

/// Who is calling, as the gateway's key table says (the same lookup a model call gets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountCaller {
    /// No key header, or a config without keys.
    Anonymous,
    /// A key header the gateway does not know (perhaps the client's own credential for the
    /// service's upstream).
    Unknown,
    /// A known key: its id.
    Key(Arc<str>),
    /// A known, revoked key: its id. The service refuses it.
    Revoked(Arc<str>),
}

/// A service on the gateway's listener.
pub trait Mount: Send + Sync + 'static {
    /// The path it answers (exactly; `/mcp`).
    fn path(&self) -> &str;

    /// Called once before the listener serves: registers the service's metrics in the
    /// gateway's registry and hands it the ledger's queue (when the ledger is on).
    fn attach(&self, registry: &mut Registry, ledger: Option<&sluice_ledger::LedgerHandle>);

    /// Serves one request. Dropping the future (the client went away) must cancel what it
    /// started.
    fn serve(&self, req: Request<MountBody>, caller: MountCaller) -> MountFuture;
}

/// The mounts of a gateway, fixed at start.
#[derive(Clone, Default)]
pub(crate) struct Mounts(Arc<[Arc<dyn Mount>]>);

impl std::fmt::Debug for Mounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|m| m.path()))
            .finish()
    }
}

impl Mounts {
    pub(crate) fn new(mounts: Vec<Arc<dyn Mount>>) -> Mounts {
        Mounts(mounts.into())
    }

    /// The service mounted at `path`, if any.
    #[inline]
    pub(crate) fn find(&self, path: &str) -> Option<&Arc<dyn Mount>> {
        self.0.iter().find(|m| m.path() == path)
    }
}
