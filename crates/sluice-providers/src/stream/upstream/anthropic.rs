//! Reads an Anthropic Messages stream (provider-formats.md §4.2): events by their SSE name,
//! `ping` and unknown types skipped (new ones may be added), `error` after the 200 turned into
//! the client's error event.

use sluice_sse::Event;

use super::{Reader, Unreadable};
use crate::finish::Finish;
use crate::stream::client::{ToolPart, Writer};
use crate::stream::fault::Fault;
use crate::stream::json::JsonStr;
use crate::stream::wire::anthropic::{
    BlockDelta, BlockStart, MessageDelta, MessageStart, TypeOnly,
};
use crate::stream::Emitted;
use crate::usage::{AnthropicStreamUsage, Usage};

/// What the current content block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Text,
    Tool(u32),
    Thinking,
    /// Encrypted thinking: handed on opaque.
    Redacted,
    /// Server tools, ...: not translated.
    Other,
}

/// Reads an Anthropic stream.
#[derive(Debug, Default)]
pub(crate) struct AnthropicReader {
    usage: AnthropicStreamUsage,
    block: Option<Block>,
    stopped: bool,
}

fn parse<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Result<T, Unreadable> {
    serde_json::from_str(text).map_err(|_| "an event that is not the JSON its type names")
}

impl AnthropicReader {
    fn apply_usage<W: Writer>(&mut self, raw: &[u8], w: &mut W) {
        if let Some(u) = self.usage.apply(raw) {
            w.usage(u);
        }
    }
}

impl Reader for AnthropicReader {
    const PROVIDER: &'static str = "anthropic";

    fn event<W: Writer>(
        &mut self,
        event: &Event,
        text: &str,
        w: &mut W,
        out: &mut Vec<Emitted>,
    ) -> Result<(), Unreadable> {
        let data = event.data();
        let named;
        let kind: &[u8] = match event.event_type() {
            b"message" => {
                named = parse::<TypeOnly<'_>>(text)?;
                named.kind.as_bytes()
            }
            other => other,
        };
        match kind {
            b"content_block_delta" => {
                let d: BlockDelta<'_> = parse(text)?;
                match (&*d.delta.kind, self.block) {
                    ("text_delta", _) => {
                        if let Some(t) = JsonStr::opt(d.delta.text) {
                            w.text(t, out);
                        }
                    }
                    ("input_json_delta", Some(Block::Tool(index))) if index == d.index => {
                        w.tool(
                            index,
                            ToolPart {
                                args: JsonStr::opt(d.delta.partial_json),
                                ..ToolPart::default()
                            },
                            out,
                        );
                    }
                    ("thinking_delta", _) => {
                        if let Some(t) = JsonStr::opt(d.delta.thinking) {
                            w.reasoning(t, out);
                        }
                    }
                    ("signature_delta", Some(Block::Thinking)) => {
                        if let Some(s) = JsonStr::opt(d.delta.signature) {
                            w.reasoning_signature(s, out);
                        }
                    }
                    _ => {}
                }
            }
            b"content_block_start" => {
                let b: BlockStart<'_> = parse(text)?;
                let block = match &*b.content_block.kind {
                    "text" => Block::Text,
                    "tool_use" => Block::Tool(b.index),
                    "thinking" => Block::Thinking,
                    "redacted_thinking" => Block::Redacted,
                    _ => Block::Other,
                };
                self.block = Some(block);
                match block {
                    Block::Text => {
                        if let Some(t) = JsonStr::opt(b.content_block.text) {
                            w.text(t, out);
                        }
                    }
                    Block::Tool(index) => {
                        let name = JsonStr::opt(b.content_block.name)
                            .ok_or("a tool_use block without a name")?;
                        w.tool(
                            index,
                            ToolPart {
                                id: JsonStr::opt(b.content_block.id),
                                name: Some(name),
                                args: None,
                            },
                            out,
                        );
                    }
                    Block::Thinking => {
                        w.reasoning_start(out);
                        if let Some(t) = JsonStr::opt(b.content_block.thinking) {
                            w.reasoning(t, out);
                        }
                    }
                    Block::Redacted => {
                        if let Some(d) = JsonStr::opt(b.content_block.data) {
                            w.redacted_reasoning(d, out);
                        }
                    }
                    Block::Other => {}
                }
            }
            b"content_block_stop" => match self.block.take() {
                Some(Block::Text | Block::Tool(_)) => w.block_stop(out),
                Some(Block::Thinking) => w.reasoning_stop(out),
                _ => {}
            },
            b"message_start" => {
                let m: MessageStart<'_> = parse(text)?;
                if let Some(u) = m.message.usage {
                    self.apply_usage(u.get().as_bytes(), w);
                }
                w.start(
                    JsonStr::opt(m.message.id),
                    JsonStr::opt(m.message.model),
                    out,
                );
            }
            b"message_delta" => {
                let m: MessageDelta<'_> = parse(text)?;
                if let Some(u) = m.usage {
                    self.apply_usage(u.get().as_bytes(), w);
                }
                if let Some(reason) = m.delta.stop_reason {
                    w.finish(Finish::from_anthropic(&reason), out);
                }
            }
            b"message_stop" => {
                self.stopped = true;
                w.done(out);
            }
            b"error" => w.fail(&Fault::from_anthropic(data), out),
            _ => {}
        }
        Ok(())
    }

    fn end<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>) {
        if !self.stopped {
            w.fail(&Fault::truncated(Self::PROVIDER), out);
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }
}
