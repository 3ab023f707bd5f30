//! The data plane's control: hot reload (`reload`: a new config checked as startup checks it,
//! then swapped in for new requests) and the config file's watch (`watch`).

mod reload;
mod watch;

pub use crate::generation::{BuildError, Changes};
pub use reload::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
pub(crate) use reload::{ReloadMetrics, Reloader};
pub(crate) use watch::watch_file;
