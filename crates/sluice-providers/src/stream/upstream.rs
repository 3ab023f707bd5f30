//! Reading the upstream's stream: one reader per upstream family, each turning events into
//! calls on the client's [`Writer`](super::client::Writer).

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai;

use sluice_sse::Event;

use super::client::Writer;
use super::scan::surrogates_paired;
use super::Emitted;
use crate::usage::Usage;

/// Why an upstream event could not be read (for the error event's message).
pub(crate) type Unreadable = &'static str;

/// Reads one upstream family's stream.
pub(crate) trait Reader: Send {
    /// The provider's name, for error messages.
    const PROVIDER: &'static str;

    /// One upstream event, whose data the translator has checked ([`json_text`]) into
    /// `text`; blank events never get here.
    ///
    /// # Errors
    /// The event is not the JSON its type promises.
    fn event<W: Writer>(
        &mut self,
        event: &Event,
        text: &str,
        w: &mut W,
        out: &mut Vec<Emitted>,
    ) -> Result<(), Unreadable>;

    /// The upstream's stream ended (no more events).
    fn end<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>);

    /// The upstream's usage so far.
    fn usage(&self) -> Option<Usage>;
}

/// See [`crate::stream::scan::surrogates_paired`].
pub(crate) const LONE_SURROGATE: Unreadable = "an unpaired UTF-16 surrogate escape in a string";

/// An event's data as text for the JSON parser: UTF-8 checked once here (cheaper than serde_json
/// checking each string it borrows), and no lone surrogate escape (see
/// [`crate::stream::scan::surrogates_paired`]).
pub(crate) fn json_text(data: &[u8]) -> Result<&str, Unreadable> {
    let text = std::str::from_utf8(data).map_err(|_| "an event that is not UTF-8")?;
    if !surrogates_paired(data) {
        return Err(LONE_SURROGATE);
    }
    Ok(text)
}

/// Whether an event's data is blank (some servers send `data:` keep-alives).
pub(crate) fn is_blank(data: &[u8]) -> bool {
    data.trim_ascii().is_empty()
}
