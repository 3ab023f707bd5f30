//! Reads a Gemini `streamGenerateContent?alt=sse` stream (provider-formats.md §4.3): every
//! chunk is a whole `GenerateContentResponse`; there is no end marker (the end of the stream
//! is), function calls arrive whole, `usageMetadata` is cumulative, and a `finishReason` of
//! `STOP` follows function calls.
//!
//! A call's id is the one a whole response gives it ([`client_call_id`]: Gemini's id or a
//! made-up one, with the part's `thoughtSignature`), so the signature comes back to Gemini on
//! the client's next request whether the answer was streamed or not (Gemini 3 refuses a
//! function call sent back without it).

use sluice_sse::Event;

use super::{Reader, Unreadable};
use crate::api::Family;
use crate::finish::Finish;
use crate::shape::gemini::client_call_id;
use crate::stream::client::{ToolPart, Writer};
use crate::stream::fault::Fault;
use crate::stream::json::{push_escaped, JsonStr};
use crate::stream::wire::gemini::Response;
use crate::stream::Emitted;
use crate::usage::{self, Usage};

/// Reads a Gemini stream.
#[derive(Debug, Default)]
pub(crate) struct GeminiReader {
    /// The last `usageMetadata` as the upstream wrote it. Cumulative, so only the last one
    /// counts, and it rides in every chunk: parsed only when needed (at the start, at the end,
    /// for [`Reader::usage`]), not per chunk.
    usage: String,
    started: bool,
    finished: bool,
    /// Function calls so far: each gets its own key, so parallel calls get distinct indexes.
    calls: u32,
    /// One call's arguments as a JSON string literal, while it is written.
    args: String,
    /// One call's client id as a JSON string literal, while it is written.
    call_id: String,
    /// The stream's `responseId` (every chunk repeats it), for made-up call ids.
    response_id: Option<String>,
}

impl Reader for GeminiReader {
    const PROVIDER: &'static str = "gemini";

    fn event<W: Writer>(
        &mut self,
        event: &Event,
        text: &str,
        w: &mut W,
        out: &mut Vec<Emitted>,
    ) -> Result<(), Unreadable> {
        let data = event.data();
        let r: Response<'_> = serde_json::from_str(text)
            .map_err(|_| "a data chunk that is not a GenerateContentResponse")?;
        if r.error.is_some() {
            w.fail(&Fault::from_gemini(data), out);
            return Ok(());
        }
        if let Some(u) = r.usage_metadata {
            self.usage.clear();
            self.usage.push_str(u.get());
        }
        if self.response_id.is_none() {
            self.response_id = JsonStr::opt(r.response_id).map(|id| id.unescape().into_owned());
        }
        if !self.started {
            self.started = true;
            if let Some(u) = self.usage() {
                w.usage(u);
            }
            w.start(
                JsonStr::opt(r.response_id),
                JsonStr::opt(r.model_version),
                out,
            );
        }
        let Some(candidate) = r.candidates.and_then(|c| c.first) else {
            if r.prompt_feedback.and_then(|p| p.block_reason).is_some() {
                self.finished = true;
                w.finish(Finish::ContentFilter, out);
            }
            return Ok(());
        };
        for part in candidate
            .content
            .and_then(|c| c.parts)
            .into_iter()
            .flatten()
        {
            if let Some(call) = part.function_call {
                let name = JsonStr::opt(call.name).ok_or("a functionCall without a name")?;
                self.args.clear();
                push_escaped(&mut self.args, call.args.map_or("{}", |a| a.get()));
                let key = self.calls;
                self.calls += 1;
                let gemini_id = JsonStr::opt(call.id).map(JsonStr::unescape);
                let signature = JsonStr::opt(part.thought_signature).map(JsonStr::unescape);
                let id = client_call_id(
                    gemini_id.as_deref(),
                    self.response_id.as_deref(),
                    key as usize,
                    signature.as_deref(),
                );
                self.call_id.clear();
                push_escaped(&mut self.call_id, &id);
                w.tool(
                    key,
                    ToolPart {
                        id: Some(JsonStr::from_literal(&self.call_id)),
                        name: Some(name),
                        args: Some(JsonStr::from_literal(&self.args)),
                    },
                    out,
                );
                w.block_stop(out);
            } else if let Some(text) = JsonStr::opt(part.text) {
                if part.thought == Some(true) {
                    w.reasoning(text, out);
                } else {
                    w.text(text, out);
                }
            }
        }
        if let Some(reason) = candidate
            .finish_reason
            .as_deref()
            .and_then(Finish::from_gemini_chunk)
        {
            self.finished = true;
            w.finish(reason, out);
        }
        Ok(())
    }

    fn end<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>) {
        if let Some(u) = self.usage() {
            w.usage(u);
        }
        if self.finished {
            w.done(out);
        } else {
            w.fail(&Fault::truncated(Self::PROVIDER), out);
        }
    }

    fn usage(&self) -> Option<Usage> {
        usage::read(Family::Gemini, self.usage.as_bytes())
    }
}
