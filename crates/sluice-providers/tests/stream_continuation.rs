//! Continuation: a stream cut after its commit, then a second upstream stream that continues
//! the answer, spliced so that the client reads one message (one id, no second preamble,
//! content block and tool call indexes continuing, no duplicated or missing text), and usage
//! from both parts adds up.

mod stream_support;

use bytes::Bytes;
use sluice_providers::stream::{translator, Emitted, EventKind, SpliceState, StreamOptions};
use sluice_providers::{Operation, ProviderKind, Usage};
use sluice_sse::{Decoder, Item};
use stream_support::*;

/// Feeds the events of `input` (at most `limit`) to a new translator for `opts`; the stream
/// is cut there (no `end()`) unless it ran out first.
fn feed(
    opts: &StreamOptions<'_>,
    input: &[u8],
    limit: usize,
) -> (
    Vec<Emitted>,
    Box<dyn sluice_providers::stream::StreamTranslator>,
) {
    let mut t = translator(opts);
    let mut dec = Decoder::new();
    dec.feed(Bytes::copy_from_slice(input));
    dec.finish();
    let mut out = Vec::new();
    let mut n = 0;
    while let Some(item) = dec.next_item() {
        if let Item::Event(ev) = item.unwrap() {
            if n == limit {
                return (out, t);
            }
            t.event(&ev, &mut out);
            n += 1;
        }
    }
    t.end(&mut out);
    (out, t)
}

fn anthropic() -> ProviderKind {
    ProviderKind::Anthropic {
        version: "2023-06-01".into(),
    }
}

const ANTHROPIC_CONTINUATION: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_second\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-other\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":15,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[test]
fn anthropic_continuation_goes_on_in_the_cut_text_block() {
    let provider = anthropic();
    let mut first_opts = StreamOptions::new(Operation::Messages, &provider, "claude-3-opus-latest");
    first_opts.track_text = true;
    // message_start, content_block_start, ping, "Hello": cut.
    let (first_out, first) = feed(&first_opts, &fixture("anthropic_basic.sse"), 4);
    assert_eq!(first.text(), "Hello");
    let splice = first.splice_state().expect("committed");
    assert_eq!(
        splice,
        SpliceState {
            id: "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK".into(),
            created: 0,
            model: "claude-3-opus-latest".into(),
            open_text_block: Some(0),
            next_block: 1,
            next_tool_call: 0,
            usage: Usage {
                input: 11,
                output: 1,
                ..Usage::default()
            },
        }
    );

    let mut opts = StreamOptions::new(Operation::Messages, &provider, "claude-other");
    opts.continuation = true;
    opts.splice = Some(&splice);
    opts.track_text = true;
    let (out, cont) = feed(&opts, ANTHROPIC_CONTINUATION.as_bytes(), usize::MAX);
    // The new preamble is gone: the first event is the continuing text.
    assert_eq!(out[0].kind, EventKind::Content);
    assert_eq!(cont.text(), " there!");

    let mut m = anthropic_message(&first_out);
    anthropic_continue(&mut m, &out);
    assert_eq!(m.id, "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK");
    assert_eq!(m.blocks.len(), 1);
    assert_eq!(
        m.blocks[0].text, "Hello there!",
        "no duplicated, no missing text"
    );
    assert_eq!(m.stop_reason.as_deref(), Some("end_turn"));
    assert!(m.stopped);
    // The client sees the total; each translator reports its own part.
    let u = m.usage.unwrap();
    assert_eq!(
        (u["input_tokens"].as_u64(), u["output_tokens"].as_u64()),
        (Some(26), Some(4))
    );
    assert_eq!(
        cont.usage(),
        Some(Usage {
            input: 15,
            output: 3,
            ..Usage::default()
        })
    );
    let mut total = first.usage().unwrap();
    total.add(&cont.usage().unwrap());
    assert_eq!((total.input, total.output), (26, 4));
    // A chain of continuations carries the total along.
    assert_eq!(cont.splice_state().unwrap().usage, total);
}

/// A continuation re-encodes an Anthropic stream for an Anthropic client: Anthropic's own
/// stop reasons come through as they are, also those no other family has.
#[test]
fn an_anthropic_continuation_keeps_anthropics_stop_reasons() {
    let provider = anthropic();
    let first_opts = StreamOptions::new(Operation::Messages, &provider, "c");
    let (first_out, first) = feed(&first_opts, &fixture("anthropic_basic.sse"), 4);
    let splice = first.splice_state().expect("committed");
    for reason in ["model_context_window_exceeded", "pause_turn", "refusal"] {
        let input = ANTHROPIC_CONTINUATION.replace("\"end_turn\"", &format!("\"{reason}\""));
        let mut opts = StreamOptions::new(Operation::Messages, &provider, "c");
        opts.continuation = true;
        opts.splice = Some(&splice);
        let (out, _) = feed(&opts, input.as_bytes(), usize::MAX);
        let mut m = anthropic_message(&first_out);
        anthropic_continue(&mut m, &out);
        assert_eq!(m.stop_reason.as_deref(), Some(reason));
    }
}

#[test]
fn anthropic_continuation_that_starts_with_a_tool_call_closes_the_cut_block_first() {
    let provider = anthropic();
    let (first_out, first) = feed(
        &StreamOptions::new(Operation::Messages, &provider, "c"),
        &fixture("anthropic_basic.sse"),
        4,
    );
    let splice = first.splice_state().unwrap();
    let openai = ProviderKind::OpenAi;
    let mut opts = StreamOptions::new(Operation::Messages, &openai, "c");
    opts.continuation = true;
    opts.splice = Some(&splice);
    let (out, _) = feed(&opts, &fixture("openai_tool_call.sse"), usize::MAX);
    let mut m = anthropic_message(&first_out);
    anthropic_continue(&mut m, &out);
    assert_eq!(m.blocks.len(), 2);
    assert_eq!(m.blocks[0].text, "Hello");
    assert!(m.blocks[0].stopped);
    assert_eq!(m.blocks[1].kind, "tool_use");
    assert_eq!(
        m.blocks[1].input_json,
        r#"{"city":"Edinburgh","country":"UK","units":"c"}"#
    );
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
}

const OPENAI_CONTINUATION: &str = "data: {\"id\":\"chatcmpl-456\",\"object\":\"chat.completion.chunk\",\"created\":1700000999,\"model\":\"other-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-456\",\"object\":\"chat.completion.chunk\",\"created\":1700000999,\"model\":\"other-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"! How can I help?\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-456\",\"object\":\"chat.completion.chunk\",\"created\":1700000999,\"model\":\"other-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"chatcmpl-456\",\"object\":\"chat.completion.chunk\",\"created\":1700000999,\"model\":\"other-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":25,\"completion_tokens\":6,\"total_tokens\":31}}\n\n\
data: [DONE]\n\n";

#[test]
fn openai_continuation_keeps_the_cut_streams_id() {
    let provider = ProviderKind::OpenAi;
    let mut first_opts = StreamOptions::new(Operation::ChatCompletions, &provider, "gpt-4o-mini");
    first_opts.track_text = true;
    first_opts.client_wants_usage = true;
    // Role chunk, "Hello": cut.
    let (first_out, first) = feed(&first_opts, &fixture("openai_text.sse"), 2);
    assert_eq!(first.text(), "Hello");
    let splice = first.splice_state().unwrap();
    assert_eq!(splice.id, "chatcmpl-123");
    assert_eq!(splice.created, 1694268190);
    assert_eq!(splice.model, "gpt-4o-mini");

    let mut opts = StreamOptions::new(Operation::ChatCompletions, &provider, "other-model");
    opts.continuation = true;
    opts.splice = Some(&splice);
    opts.client_wants_usage = true;
    let (out, cont) = feed(&opts, OPENAI_CONTINUATION.as_bytes(), usize::MAX);
    for e in &out {
        let (_, data) = decode_one(&e.bytes);
        if data != "[DONE]" {
            let v: serde_json::Value = serde_json::from_str(&data).unwrap();
            assert_eq!(v["id"], "chatcmpl-123");
            assert_eq!(v["created"], 1694268190);
            assert_eq!(v["model"], "gpt-4o-mini");
        }
    }
    let mut m = openai_message(&first_out);
    openai_continue(&mut m, &out);
    assert_eq!(
        m.role.as_deref(),
        Some("assistant"),
        "one role chunk in all"
    );
    assert_eq!(m.content, "Hello! How can I help?");
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
    assert_eq!(m.usage.unwrap()["prompt_tokens"], 25);
    assert!(m.done);
    assert_eq!(cont.usage().unwrap().output, 6);
}

#[test]
fn a_continuation_from_another_family_splices_too() {
    // The first part came from Anthropic, translated for an OpenAI client; the continuation
    // comes from Gemini.
    let provider = anthropic();
    let mut first_opts = StreamOptions::new(Operation::ChatCompletions, &provider, "client-model");
    first_opts.client_wants_usage = true;
    first_opts.created = 1_700_000_000;
    let (first_out, first) = feed(&first_opts, &fixture("anthropic_basic.sse"), 4);
    let splice = first.splice_state().unwrap();
    assert_eq!(splice.id, "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK");
    assert_eq!(
        splice.usage,
        Usage {
            input: 11,
            output: 1,
            ..Usage::default()
        }
    );

    let gemini = ProviderKind::Gemini;
    let mut opts = StreamOptions::new(Operation::ChatCompletions, &gemini, "gemini-2.5-flash");
    opts.continuation = true;
    opts.splice = Some(&splice);
    opts.client_wants_usage = true;
    let (out, _) = feed(&opts, &fixture("gemini_text.sse"), usize::MAX);
    let mut m = openai_message(&first_out);
    openai_continue(&mut m, &out);
    assert_eq!(m.id, "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK");
    assert!(m.content.starts_with("HelloOkay, let's create"));
    let u = m.usage.unwrap();
    assert_eq!(u["prompt_tokens"], 11 + 4);
    assert_eq!(u["completion_tokens"], 1 + 2162);
    assert!(m.done);
}

#[test]
fn openai_continuation_tool_calls_continue_the_indexes() {
    let provider = ProviderKind::OpenAi;
    let mut first_opts = StreamOptions::new(Operation::ChatCompletions, &provider, "m");
    first_opts.track_text = true;
    // Role chunk and the first call (3 fragments after its start): cut.
    let (first_out, first) = feed(&first_opts, &fixture("openai_parallel_tools.sse"), 5);
    let splice = first.splice_state().unwrap();
    assert_eq!(splice.next_tool_call, 1);
    let mut opts = StreamOptions::new(Operation::ChatCompletions, &provider, "m");
    opts.continuation = true;
    opts.splice = Some(&splice);
    let (out, _) = feed(&opts, &fixture("openai_tool_call.sse"), usize::MAX);
    let mut m = openai_message(&first_out);
    openai_continue(&mut m, &out);
    assert_eq!(m.tool_calls.len(), 2);
    assert_eq!(m.tool_calls[0].2, r#"{"city": "Paris"}"#);
    assert_eq!(m.tool_calls[1].1, "GetWeatherArgs");
}

#[test]
fn continuation_without_splice_state_only_drops_the_preamble() {
    let provider = ProviderKind::OpenAi;
    let mut opts = StreamOptions::new(Operation::ChatCompletions, &provider, "m");
    opts.continuation = true;
    let (out, _) = feed(&opts, OPENAI_CONTINUATION.as_bytes(), usize::MAX);
    assert_eq!(out[0].kind, EventKind::Content);
    let m = openai_message(&out);
    assert!(m.role.is_none());
    assert_eq!(m.id, "chatcmpl-456");
}

#[test]
fn no_splice_state_before_the_stream_commits() {
    let provider = anthropic();
    let (_, t) = feed(
        &StreamOptions::new(Operation::Messages, &provider, "c"),
        &fixture("anthropic_basic.sse"),
        3,
    );
    assert_eq!(t.splice_state(), None);
}
