//! A Bedrock stream (AWS event-stream framing, not SSE) as the client's SSE events, before the
//! relay's SSE decoder: ConverseStream translated for the client's API, or
//! InvokeModelWithResponseStream's chunks unwrapped into the Anthropic events they carry; one
//! [`BedrockStream`] either way (its decoder loop, exceptions and broken framing handled
//! there).

use bytes::Bytes;
use sluice_providers::bedrock::BedrockStream;

/// What turns one Bedrock attempt's body into SSE.
pub(super) struct AwsFeed(BedrockStream);

impl AwsFeed {
    /// ConverseStream, translated for the client.
    pub(super) fn converse(stream: BedrockStream) -> AwsFeed {
        AwsFeed(stream)
    }

    /// InvokeModelWithResponseStream (Anthropic clients).
    pub(super) fn invoke() -> AwsFeed {
        AwsFeed(BedrockStream::invoke())
    }

    /// The usage ConverseStream reported (its `metadata` event), normalised; `None` for
    /// InvokeModel, whose Anthropic events the translator reads whole.
    pub(super) fn usage(&self) -> Option<sluice_providers::Usage> {
        self.0.usage()
    }

    /// Body bytes in (`end`: the body ended), SSE event bytes out through `sse`.
    pub(super) fn feed(&mut self, data: &[u8], end: bool, sse: &mut dyn FnMut(Bytes)) {
        let mut events = Vec::new();
        if end {
            self.0.end(&mut events);
        } else {
            self.0.feed(data, &mut events);
        }
        events.into_iter().for_each(|e| sse(e.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_providers::eventstream::Message;

    fn invoke() -> AwsFeed {
        AwsFeed::invoke()
    }

    fn run(feed: &mut AwsFeed, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        // Byte by byte: the decoder holds partial frames.
        for b in bytes {
            feed.feed(std::slice::from_ref(b), false, &mut |e| out.push(e));
        }
        feed.feed(&[], true, &mut |e| out.push(e));
        out.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    #[test]
    fn invoke_chunks_become_anthropic_events_and_exceptions_error_events() {
        // `{"type":"ping"}` in standard base64.
        let chunk = Message::new(r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9"}"#)
            .with_str(":message-type", "event")
            .with_str(":event-type", "chunk");
        let exception = Message::new(r#"{"message":"Too many requests"}"#)
            .with_str(":message-type", "exception")
            .with_str(":exception-type", "throttlingException");
        let mut bytes = chunk.to_bytes().unwrap().to_vec();
        bytes.extend_from_slice(&exception.to_bytes().unwrap());
        bytes.extend_from_slice(&chunk.to_bytes().unwrap());
        let out = run(&mut invoke(), &bytes);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], "event: ping\ndata: {\"type\":\"ping\"}\n\n");
        assert!(out[1].starts_with("event: error\n"), "{}", out[1]);
        assert!(out[1].contains("rate_limit_error"), "{}", out[1]);
        assert!(out[1].contains("Too many requests"), "{}", out[1]);
    }

    #[test]
    fn broken_framing_and_a_cut_frame_are_error_events() {
        let chunk =
            Message::new(r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9"}"#).with_str(":event-type", "chunk");
        let mut bad = chunk.to_bytes().unwrap().to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1; // the message CRC
        let out = run(&mut invoke(), &bad);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("cannot be translated"), "{}", out[0]);
        assert!(out[0].contains("CRC"), "{}", out[0]);
        let whole = chunk.to_bytes().unwrap();
        let out = run(&mut invoke(), &whole[..whole.len() - 3]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("ended inside a message"), "{}", out[0]);
    }
}
