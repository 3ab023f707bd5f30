//! Bedrock's ConverseStream fixtures (`streams/bedrock_*.json`: one event-stream message per
//! entry) framed as Bedrock sends them, and run through a [`BedrockStream`] for any client.

use bytes::{Bytes, BytesMut};
use serde_json::Value;
use sluice_providers::bedrock::{BedrockStream, BedrockStreamOptions};
use sluice_providers::eventstream::Message;
use sluice_providers::stream::Emitted;
use sluice_providers::Operation;

/// The model id the Bedrock goldens name.
pub const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// A stream fixture framed as Bedrock sends it.
pub fn framed(name: &str) -> Bytes {
    let events: Value = serde_json::from_slice(&super::fixture(&format!("{name}.json")))
        .expect("a JSON array of messages");
    let mut out = BytesMut::new();
    for e in events.as_array().expect("an array") {
        let payload = e["payload"].to_string();
        let m = match e.get("event") {
            Some(kind) => Message::new(payload)
                .with_str(":event-type", kind.as_str().unwrap().to_string())
                .with_str(":content-type", "application/json")
                .with_str(":message-type", "event"),
            None => Message::new(payload)
                .with_str(
                    ":exception-type",
                    e["exception"].as_str().unwrap().to_string(),
                )
                .with_str(":content-type", "application/json")
                .with_str(":message-type", "exception"),
        };
        m.encode(&mut out).unwrap();
    }
    out.freeze()
}

/// The goldens' options for `op`: an id, a fixed `created`, usage asked, text tracked.
pub fn options(op: Operation) -> BedrockStreamOptions<'static> {
    let mut o = BedrockStreamOptions::new(op, MODEL);
    o.id = Some("req-7f3a");
    o.created = 1_767_225_600;
    o.client_wants_usage = true;
    o.track_text = true;
    o
}

/// The stream through a fresh translator, fed in chunks of `size` bytes (0: whole).
pub fn run(name: &str, op: Operation, size: usize) -> (Vec<Emitted>, BedrockStream) {
    let body = framed(name);
    let mut t = BedrockStream::new(&options(op));
    let mut out = Vec::new();
    if size == 0 {
        t.feed(&body, &mut out);
    } else {
        for c in body.chunks(size) {
            t.feed(c, &mut out);
        }
    }
    t.end(&mut out);
    (out, t)
}
