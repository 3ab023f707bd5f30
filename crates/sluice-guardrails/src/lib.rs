//! Guardrails, sans-I/O: what may be sent to a model and what may come back, decided on plain
//! text. The gateway does the I/O (reading bodies, relaying streams, calling external
//! checkers); this crate only looks at text.
//!
//! In the order a request meets them:
//! - [`detect`]: the built-in detectors (payment cards with Luhn, e-mail, phone numbers, IBANs
//!   with their mod-97 checksum, US SSNs, API keys, private-key PEM headers), each a bounded
//!   pattern plus a validation;
//! - [`rules`]: a [`RuleSet`] of detectors and user regexes, each with an [`Action`] (deny,
//!   redact, flag), applied to a whole text ([`RuleSet::apply`]);
//! - [`json`]: the texts of a request's messages or an answer's content inside their JSON,
//!   checked and rewritten in place;
//! - [`stream`]: a [`StreamRedactor`] for an answer that streams: text deltas in, checked
//!   text out, holding back at most a bounded window so a match split across events is still
//!   caught, never splitting a UTF-8 character;
//! - [`verdict`]: the [`Verdict`] of a check and its names.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod detect;
pub mod json;
pub mod rules;
pub mod stream;
pub mod verdict;

pub use detect::Detector;
pub use rules::{Action, Denied, Rule, RuleError, RuleSet};
pub use stream::StreamRedactor;
pub use verdict::Verdict;
