//! The data plane's control: hot reload (`reload`: a new config checked as startup checks it,
//! then swapped in for new requests), the config file's watch (`watch`), and what the admin
//! plane may see of it (`view`).

mod reload;
mod view;
mod watch;

pub use crate::generation::{BuildError, Changes};
pub use reload::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
pub(crate) use reload::{ReloadMetrics, Reloader};
pub use view::AdminView;
pub(crate) use watch::watch_file;
