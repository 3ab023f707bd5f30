//! The factory, and the translating translator: an upstream reader feeding a client writer.

use http::StatusCode;
use sluice_sse::Event;

use super::client::anthropic::AnthropicWriter;
use super::client::gemini::GeminiWriter;
use super::client::openai::OpenAiWriter;
use super::client::responses::ResponsesWriter;
use super::client::{Guard, Writer, WriterConfig};
use super::fault::Fault;
use super::upstream::anthropic::AnthropicReader;
use super::upstream::gemini::GeminiReader;
use super::upstream::openai::OpenAiReader;
use super::upstream::{is_blank, json_text, Reader};
use super::{passthrough, Emitted, SpliceState, StreamOptions, StreamTranslator};
use crate::api::{Family, Operation};
use crate::usage::Usage;

/// Builds the translator for `opts` (the table in the module docs).
pub(crate) fn build(opts: &StreamOptions<'_>) -> Box<dyn StreamTranslator> {
    let upstream = opts.provider.family();
    let translate = upstream != opts.op.family() || opts.continuation;
    match opts.op {
        Operation::ChatCompletions if translate => {
            let w = OpenAiWriter::new(WriterConfig::new(opts));
            with_reader(upstream, w)
        }
        Operation::Messages if translate => {
            let w = AnthropicWriter::new(WriterConfig::new(opts));
            with_reader(upstream, w)
        }
        Operation::GenerateContent | Operation::StreamGenerateContent if translate => {
            let w = GeminiWriter::new(WriterConfig::new(opts));
            with_reader(upstream, w)
        }
        // OpenAI-shaped upstreams speak the Responses API themselves: passed through.
        Operation::Responses if upstream != Family::OpenAi => {
            let w = ResponsesWriter::new(WriterConfig::new(opts));
            with_reader(upstream, w)
        }
        _ => passthrough::build(upstream, opts),
    }
}

fn with_reader<W: Writer + 'static>(upstream: Family, w: W) -> Box<dyn StreamTranslator> {
    match upstream {
        Family::OpenAi => Box::new(Translating::new(OpenAiReader::default(), w)),
        Family::Anthropic => Box::new(Translating::new(AnthropicReader::default(), w)),
        Family::Gemini => Box::new(Translating::new(GeminiReader::default(), w)),
    }
}

/// Upstream events through `R` into `W`.
pub(crate) struct Translating<R, W> {
    reader: R,
    writer: Guard<W>,
}

impl<R: Reader, W: Writer> Translating<R, W> {
    pub(crate) fn new(reader: R, writer: W) -> Self {
        Translating {
            reader,
            writer: Guard(writer),
        }
    }
}

impl<R: Reader, W: Writer> StreamTranslator for Translating<R, W> {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let data = event.data();
        if self.writer.closed() || is_blank(data) {
            return;
        }
        let read =
            json_text(data).and_then(|text| self.reader.event(event, text, &mut self.writer, out));
        if let Err(what) = read {
            self.writer.fail(&Fault::malformed(R::PROVIDER, what), out);
        }
    }

    fn end(&mut self, out: &mut Vec<Emitted>) {
        if !self.writer.closed() {
            self.reader.end(&mut self.writer, out);
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.reader.usage()
    }

    fn text(&self) -> &str {
        self.writer.text_so_far()
    }

    fn held_bytes(&self) -> usize {
        self.writer.held_bytes()
    }

    fn splice_state(&self) -> Option<SpliceState> {
        self.writer.splice_state(self.reader.usage())
    }

    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>) {
        self.writer
            .fail(&Fault::with(status.as_u16(), code, message), out);
    }

    fn withdraw(&mut self, events: usize) {
        self.writer.withdraw(events);
    }
}
