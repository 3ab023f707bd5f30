//! Reads an OpenAI-shaped chat stream (OpenAI, Azure, vLLM, ...; provider-formats.md §4.1):
//! `data:` chunks, `data: [DONE]` at the end, `{"error":..}` chunks for errors. Only the
//! choice with index 0 is translated.

use sluice_sse::Event;

use super::{Reader, Unreadable};
use crate::api::Family;
use crate::finish::Finish;
use crate::stream::client::{ToolPart, Writer};
use crate::stream::fault::Fault;
use crate::stream::json::JsonStr;
use crate::stream::scan::is_done;
use crate::stream::wire::openai::{Chunk, Head};
use crate::stream::Emitted;
use crate::usage::{self, Usage};

/// Reads an OpenAI-shaped chat stream.
#[derive(Debug, Default)]
pub(crate) struct OpenAiReader {
    usage: Option<Usage>,
    started: bool,
    finished: bool,
    done: bool,
}

impl Reader for OpenAiReader {
    const PROVIDER: &'static str = "openai";

    fn event<W: Writer>(
        &mut self,
        event: &Event,
        text: &str,
        w: &mut W,
        out: &mut Vec<Emitted>,
    ) -> Result<(), Unreadable> {
        let data = event.data();
        if event.event_type() == b"error" {
            w.fail(&Fault::from_openai(data), out);
            return Ok(());
        }
        if is_done(data) {
            self.done = true;
            w.done(out);
            return Ok(());
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(text).map_err(|_| "a data chunk that is not a JSON chunk")?;
        if chunk.error.is_some() {
            w.fail(&Fault::from_openai(data), out);
            return Ok(());
        }
        if let Some(u) = chunk
            .usage
            .and_then(|u| usage::read(Family::OpenAi, u.get().as_bytes()))
        {
            self.usage = Some(u);
            w.usage(u);
        }
        if !self.started {
            self.started = true;
            let head: Option<Head<'_>> = serde_json::from_str(text).ok();
            let (id, model) = head.map_or((None, None), |h| (h.id, h.model));
            w.start(JsonStr::opt(id), JsonStr::opt(model), out);
        }
        let Some(choice) = chunk.choices.and_then(|c| c.first) else {
            return Ok(());
        };
        if let Some(delta) = choice.delta {
            if let Some(t) = JsonStr::opt(delta.reasoning_content.or(delta.reasoning)) {
                w.reasoning(t, out);
            }
            if let Some(t) = JsonStr::opt(delta.content) {
                w.text(t, out);
            }
            if let Some(t) = JsonStr::opt(delta.refusal) {
                w.refusal(t, out);
            }
            for (pos, call) in delta.tool_calls.iter().flatten().enumerate() {
                let function = call.function.as_ref();
                w.tool(
                    call.index.unwrap_or(pos as u32),
                    ToolPart {
                        id: JsonStr::opt(call.id),
                        name: JsonStr::opt(function.and_then(|f| f.name)),
                        args: JsonStr::opt(function.and_then(|f| f.arguments)),
                    },
                    out,
                );
            }
        }
        if let Some(t) = JsonStr::opt(choice.text) {
            w.text(t, out);
        }
        if let Some(reason) = choice.finish_reason {
            self.finished = true;
            w.finish(Finish::from_openai(&reason), out);
        }
        Ok(())
    }

    fn end<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>) {
        if self.done {
            return;
        }
        if self.finished {
            // Some compatible servers end after the finish chunk without `[DONE]`.
            w.done(out);
        } else {
            w.fail(&Fault::truncated(Self::PROVIDER), out);
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }
}
