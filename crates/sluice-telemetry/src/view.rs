//! Plain snapshots of the gateway's state, as the admin plane reads them: no request-path
//! types, so the admin plane never reaches into the data plane.

use std::time::SystemTime;

use serde_json::{json, Value};

/// Whether a load balancer should send this gateway new requests, and, when not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Every check passed.
    pub ready: bool,
    /// What failed, one line each (empty when ready).
    pub reasons: Vec<String>,
}

impl Readiness {
    /// The body `GET /readyz` answers.
    pub fn json(&self) -> Value {
        json!({
            "status": if self.ready { "ready" } else { "not_ready" },
            "reasons": self.reasons,
        })
    }
}

/// Which config runs, and whether the gateway is shutting down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationView {
    /// 1 at start, +1 per successful reload.
    pub version: u64,
    /// The config's fingerprint.
    pub hash: String,
    /// When it was swapped in.
    pub loaded_at: SystemTime,
    /// Shutdown has begun.
    pub draining: bool,
}

/// An answer the admin plane passes on as it is: a status and a JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminReply {
    /// The HTTP status.
    pub status: http::StatusCode,
    /// The JSON body.
    pub body: bytes::Bytes,
}
