//! Golden tests: each fixture (tests/fixtures/streams, each citing its source) through each
//! translation pair, read back the way the client's SDK accumulates a stream, with the
//! protocol's rules checked on every event (stream_support).

mod stream_support;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::shape::gemini::{client_call_id, gemini_call_id};
use sluice_providers::stream::{classify_event, translator, EventKind, StreamOptions};
use sluice_providers::{Family, Operation, ProviderKind, Usage};
use sluice_sse::{Decoder, Item};
use stream_support::*;

use EventKind::{Content, Error, Preamble, Trailer};

fn args(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("arguments {s:?} are not JSON: {e}"))
}

// ---- Anthropic upstream → OpenAI client ----

#[test]
fn anthropic_text_to_openai() {
    let r = run(
        "anthropic_basic.sse",
        &Opts::new(Operation::ChatCompletions, "anthropic_basic.sse"),
    );
    assert_eq!(
        kinds(&r.out),
        [Preamble, Content, Content, Content, Trailer, Trailer]
    );
    let m = openai_message(&r.out);
    assert_eq!(m.id, "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK");
    assert_eq!(m.role.as_deref(), Some("assistant"));
    assert_eq!(m.content, "Hello there!");
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
    assert!(m.done);
    assert!(m.usage.is_none(), "no usage chunk unless the client asked");
    assert_eq!(
        r.usage,
        Some(Usage {
            input: 11,
            output: 6,
            ..Usage::default()
        })
    );
}

#[test]
fn anthropic_text_to_openai_with_usage() {
    let r = run(
        "anthropic_basic.sse",
        &Opts::new(Operation::ChatCompletions, "anthropic_basic.sse").usage(true),
    );
    let m = openai_message(&r.out);
    let u = m.usage.expect("usage chunk");
    assert_eq!(u["prompt_tokens"], 11);
    assert_eq!(u["completion_tokens"], 6);
    assert_eq!(u["total_tokens"], 17);
    assert!(m.done);
}

#[test]
fn anthropic_tool_use_to_openai() {
    let r = run(
        "anthropic_tool_use.sse",
        &Opts::new(Operation::ChatCompletions, "anthropic_tool_use.sse").usage(true),
    );
    let m = openai_message(&r.out);
    assert_eq!(
        m.content,
        "I'll check the current weather in Paris for you."
    );
    assert_eq!(m.tool_calls.len(), 1);
    let (id, name, arguments) = &m.tool_calls[0];
    assert_eq!(id, "toolu_01NRLabsLyVHZPKxbKvkfSMn");
    assert_eq!(name, "get_weather");
    // Exactly the concatenated partial_json fragments.
    assert_eq!(arguments, r#"{"location": "Paris"}"#);
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
    let u = m.usage.unwrap();
    assert_eq!(
        (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
        (Some(377), Some(65))
    );
}

#[test]
fn anthropic_parallel_tools_to_openai() {
    let r = run(
        "anthropic_parallel_tools.sse",
        &Opts::new(Operation::ChatCompletions, "anthropic_parallel_tools.sse").usage(true),
    );
    let m = openai_message(&r.out);
    assert_eq!(m.content, "Checking both cities.");
    let calls: Vec<_> = m
        .tool_calls
        .iter()
        .map(|(id, name, a)| (id.as_str(), name.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            (
                "toolu_01A1",
                "get_weather",
                r#"{"city": "Paris", "unit": "c"}"#
            ),
            (
                "toolu_01B2",
                "get_weather",
                r#"{"city": "Tokyo", "unit": "c"}"#
            ),
        ]
    );
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
    let u = m.usage.unwrap();
    // Anthropic's input_tokens exclude cache reads; OpenAI's prompt_tokens include them.
    assert_eq!(u["prompt_tokens"], 640);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 128);
    assert_eq!(u["completion_tokens"], 88);
}

#[test]
fn anthropic_error_after_200_to_openai() {
    let r = run(
        "anthropic_error_after_200.sse",
        &Opts::new(Operation::ChatCompletions, "anthropic_error_after_200.sse"),
    );
    assert_eq!(kinds(&r.out), [Preamble, Content, Content, Error]);
    let m = openai_message(&r.out);
    assert_eq!(m.content, "The answer is");
    let err = m.error.expect("an error event");
    assert_eq!(err["code"], "overloaded_error");
    assert_eq!(err["message"], "Overloaded");
    assert_eq!(err["type"], "server_error");
    assert!(
        !m.done,
        "no [DONE] after an error: a broken stream must not look complete"
    );
    assert!(m.finish_reason.is_none());
}

#[test]
fn anthropic_max_tokens_inside_a_tool_to_openai() {
    let r = run(
        "anthropic_max_tokens_in_tool.sse",
        &Opts::new(
            Operation::ChatCompletions,
            "anthropic_max_tokens_in_tool.sse",
        ),
    );
    let m = openai_message(&r.out);
    assert_eq!(m.tool_calls.len(), 1);
    assert!(m.tool_calls[0]
        .2
        .starts_with(r#"{"filename": "taxes.txt", "lines_of_text": ["#));
    assert!(m.tool_calls[0].2.ends_with("\n\"Filing taxes"));
    assert_eq!(m.finish_reason.as_deref(), Some("length"));
    assert!(m.done);
}

// ---- OpenAI upstream → Anthropic client ----

#[test]
fn openai_text_to_anthropic() {
    let r = run(
        "openai_text.sse",
        &Opts::new(Operation::Messages, "openai_text.sse").track(true),
    );
    let k = kinds(&r.out);
    assert_eq!(&k[..3], [Preamble, Preamble, Content]);
    assert_eq!(&k[k.len() - 3..], [Content, Trailer, Trailer]);
    let m = anthropic_message(&r.out);
    assert_eq!(m.id, "chatcmpl-123");
    // What answered (the upstream's `model`), as a whole response names it.
    assert_eq!(m.model, "gpt-4o-mini");
    assert_eq!(m.blocks.len(), 1);
    assert_eq!(m.blocks[0].kind, "text");
    assert_eq!(m.blocks[0].text, "Hello! How can I \"help\" you\ntoday?");
    assert!(m.blocks[0].stopped);
    assert_eq!(m.stop_reason.as_deref(), Some("end_turn"));
    assert!(m.stopped);
    assert_eq!(r.text, "Hello! How can I \"help\" you\ntoday?");
    assert_eq!(
        m.usage.unwrap()["output_tokens"],
        0,
        "the upstream sent no usage"
    );
}

#[test]
fn openai_text_with_usage_to_anthropic() {
    let r = run(
        "openai_text_usage.sse",
        &Opts::new(Operation::Messages, "openai_text_usage.sse"),
    );
    let m = anthropic_message(&r.out);
    let u = m.usage.unwrap();
    assert_eq!(
        (u["input_tokens"].as_u64(), u["output_tokens"].as_u64()),
        (Some(19), Some(10))
    );
    assert_eq!(r.usage.unwrap().input, 19);
}

#[test]
fn openai_tool_call_to_anthropic() {
    let r = run(
        "openai_tool_call.sse",
        &Opts::new(Operation::Messages, "openai_tool_call.sse"),
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.blocks.len(), 1);
    let b = &m.blocks[0];
    assert_eq!(b.kind, "tool_use");
    assert_eq!(b.id, "call_c91SqDXlYFuETYv8mUHzz6pp");
    assert_eq!(b.name, "GetWeatherArgs");
    // The 14 argument fragments, reassembled exactly.
    assert_eq!(
        b.input_json,
        r#"{"city":"Edinburgh","country":"UK","units":"c"}"#
    );
    assert!(b.stopped);
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
    let u = m.usage.unwrap();
    assert_eq!(
        (u["input_tokens"].as_u64(), u["output_tokens"].as_u64()),
        (Some(76), Some(24))
    );
    assert_eq!(
        r.max_translator_held, 0,
        "nothing is held when names come first"
    );
}

#[test]
fn openai_parallel_tools_to_anthropic() {
    let r = run(
        "openai_parallel_tools.sse",
        &Opts::new(Operation::Messages, "openai_parallel_tools.sse"),
    );
    let m = anthropic_message(&r.out);
    let blocks: Vec<_> = m
        .blocks
        .iter()
        .map(|b| (b.kind.as_str(), b.id.as_str(), b.input_json.as_str()))
        .collect();
    assert_eq!(
        blocks,
        [
            ("tool_use", "call_Paris01", r#"{"city": "Paris"}"#),
            ("tool_use", "call_Tokyo02", r#"{"city": "Tokyo"}"#),
        ]
    );
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
    let u = m.usage.unwrap();
    // prompt_tokens 80 of which 64 cached: Anthropic reports them apart.
    assert_eq!(u["input_tokens"], 16);
    assert_eq!(u["cache_read_input_tokens"], 64);
    assert_eq!(u["output_tokens"], 40);
}

#[test]
fn openai_text_and_tool_in_one_chunk_to_anthropic() {
    let r = run(
        "openai_text_and_tool_in_one_chunk.sse",
        &Opts::new(Operation::Messages, "openai_text_and_tool_in_one_chunk.sse"),
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.blocks.len(), 2);
    assert_eq!(m.blocks[0].text, "Let me look that up. One moment.");
    assert_eq!(m.blocks[1].name, "search");
    assert_eq!(m.blocks[1].input_json, r#"{"q":"rust sse"}"#);
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
}

/// Runs raw SSE text (not a fixture).
fn run_text(op: Operation, provider: ProviderKind, text: &str) -> Run {
    let mut o = StreamOptions::new(op, &provider, "m");
    o.client_wants_usage = true;
    let mut t = translator(&o);
    run_with(t.as_mut(), &Bytes::copy_from_slice(text.as_bytes()), &[])
}

#[test]
fn openai_error_chunk_to_anthropic() {
    let r = run_text(
        Operation::Messages,
        ProviderKind::OpenAi,
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
         data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}\n\n",
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.blocks[0].text, "Hi");
    let err = m.error.expect("error event");
    assert_eq!(err["type"], "rate_limit_error");
    assert_eq!(err["message"], "Rate limit reached");
    assert!(!m.stopped);
}

#[test]
fn a_cut_openai_stream_ends_with_an_error_not_a_clean_stop() {
    let r = run_text(
        Operation::Messages,
        ProviderKind::OpenAi,
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.error.unwrap()["type"], "api_error");
    assert!(!m.stopped);
    assert_eq!(r.out.last().unwrap().kind, Error);
}

#[test]
fn a_tool_name_after_its_arguments_is_held_then_sent_whole() {
    // Some OpenAI-compatible servers send the name after the first argument fragment; an
    // Anthropic client needs the name first, so the arguments wait (and only they).
    let mut t = translator(&StreamOptions::new(
        Operation::Messages,
        &ProviderKind::OpenAi,
        "m",
    ));
    let chunks = [
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":"{\"a\":"}}]}}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"1}"}}]}}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ];
    let mut out = Vec::new();
    let mut held = Vec::new();
    for c in chunks {
        let text = format!("data: {c}\n\n");
        let mut dec = Decoder::new();
        dec.feed(Bytes::from(text));
        let Some(Ok(Item::Event(ev))) = dec.next_item() else {
            panic!()
        };
        t.event(&ev, &mut out);
        held.push(t.held_bytes());
    }
    // `{\"a\":` held in its escaped form (7 bytes) until the name comes.
    assert_eq!(held, [0, 7, 0, 0, 0]);
    let m = anthropic_message(&out);
    assert_eq!(m.blocks[0].name, "f");
    assert_eq!(m.blocks[0].id, "call_1");
    assert_eq!(m.blocks[0].input_json, r#"{"a":1}"#);
}

#[test]
fn interleaved_tool_arguments_end_an_anthropic_stream_with_an_error() {
    let r = run_text(
        Operation::Messages,
        ProviderKind::OpenAi,
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n\
         data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"g\",\"arguments\":\"{\"}}]}}]}\n\n\
         data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.blocks.len(), 2);
    assert!(m.error.unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("earlier call"));
}

// ---- Gemini upstream → OpenAI client ----

#[test]
fn gemini_text_to_openai() {
    let opts = Opts::new(Operation::ChatCompletions, "gemini_text.sse").usage(true);
    let mut t = translator(&opts.stream_options());
    let input = fixture("gemini_text.sse");
    // Before end(): content and the finish chunk, but no usage and no [DONE] yet (Gemini has
    // no end marker).
    let mut dec = Decoder::new();
    dec.feed(input);
    dec.finish();
    let mut out = Vec::new();
    while let Some(item) = dec.next_item() {
        if let Item::Event(ev) = item.unwrap() {
            t.event(&ev, &mut out);
        }
    }
    assert_eq!(kinds(&out), [Preamble, Content, Content, Content, Trailer]);
    t.end(&mut out);
    assert_eq!(&kinds(&out)[5..], [Trailer, Trailer]);
    let m = openai_message(&out);
    assert_eq!(m.id, "IZI2acSKMoWl0-kPmYj2yQc");
    assert_eq!(
        m.content,
        "Okay, let's create a Tetris game in Python for the console! We'll use the `curses` library.\n\n\
         **Important:** `curses` is for Unix-like systems; \"windows-curses\" on Windows.\n\
         Save it as `tetris.py` and run it."
    );
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
    let u = m.usage.unwrap();
    // Cumulative: the last usageMetadata, not a sum; thoughts count as output.
    assert_eq!(u["prompt_tokens"], 4);
    assert_eq!(u["completion_tokens"], 120 + 2042);
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 2042);
    assert!(m.done);
    assert_eq!(
        t.usage(),
        Some(Usage {
            cache_write: 0,
            input: 4,
            output: 2162,
            cached_input: 0,
            reasoning: 2042
        })
    );
}

/// The client id of gemini_function_call.sse's call, and the check that it carries the
/// fixture's signature.
fn gemini_fixture_call_id() -> String {
    let sig = "CikBcsjafFK168IbtVtoxVV0Tsn8O+eU45rzJahzwuKGmMbdMdfpmNpgBwplAXLI2nyA";
    let id = client_call_id(None, Some("qpc2afWVFJK4vr0Pq6WiyAU"), 0, Some(sig));
    assert_eq!(gemini_call_id(&id).thought_signature.as_deref(), Some(sig));
    id
}

#[test]
fn gemini_function_call_to_openai() {
    let r = run(
        "gemini_function_call.sse",
        &Opts::new(Operation::ChatCompletions, "gemini_function_call.sse"),
    );
    let m = openai_message(&r.out);
    assert_eq!(m.tool_calls.len(), 1);
    let (id, name, a) = &m.tool_calls[0];
    // The id a whole response gives the call: made up (Gemini gave none), carrying the
    // part's thoughtSignature back to Gemini on the client's next request.
    assert_eq!(id, &gemini_fixture_call_id());
    assert_eq!(name, "getWeather");
    assert_eq!(args(a), json!({"location": "Tokyo"}));
    // Gemini says STOP; the client must hear tool_calls.
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
    assert!(m.done);
}

#[test]
fn gemini_parallel_calls_to_openai() {
    let r = run(
        "gemini_parallel_calls.sse",
        &Opts::new(Operation::ChatCompletions, "gemini_parallel_calls.sse"),
    );
    let m = openai_message(&r.out);
    assert_eq!(m.content, "I'll check both cities.");
    assert_eq!(
        m.tool_calls.len(),
        2,
        "distinct indexes, not one merged call"
    );
    assert_ne!(m.tool_calls[0].0, m.tool_calls[1].0);
    assert_eq!(
        args(&m.tool_calls[0].2),
        json!({"city": "Paris", "unit": "c"})
    );
    assert_eq!(
        args(&m.tool_calls[1].2),
        json!({"city": "Tokyo", "note": "say \"hi\"\nthen stop"})
    );
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
}

#[test]
fn a_gemini_stream_without_finish_reason_ends_with_an_error() {
    let r = run(
        "gemini_truncated.sse",
        &Opts::new(Operation::ChatCompletions, "gemini_truncated.sse"),
    );
    let m = openai_message(&r.out);
    assert_eq!(m.content, "The first half of an answer that never finishes");
    assert_eq!(m.error.unwrap()["code"], "upstream_stream_truncated");
    assert!(!m.done);
}

#[test]
fn a_gemini_error_chunk_becomes_the_clients_error() {
    let r = run_text(
        Operation::ChatCompletions,
        ProviderKind::Gemini,
        "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\n\n",
    );
    let m = openai_message(&r.out);
    let e = m.error.unwrap();
    assert_eq!(e["code"], "UNAVAILABLE");
    assert_eq!(e["message"], "The model is overloaded.");
}

// ---- Gemini upstream → Anthropic client ----

#[test]
fn gemini_text_to_anthropic() {
    let r = run(
        "gemini_text.sse",
        &Opts::new(Operation::Messages, "gemini_text.sse"),
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.id, "IZI2acSKMoWl0-kPmYj2yQc");
    assert_eq!(m.start_usage.unwrap()["input_tokens"], 4);
    assert_eq!(m.blocks.len(), 1);
    assert!(m.blocks[0]
        .text
        .ends_with("Save it as `tetris.py` and run it."));
    assert_eq!(m.stop_reason.as_deref(), Some("end_turn"));
    let u = m.usage.unwrap();
    assert_eq!(
        (u["input_tokens"].as_u64(), u["output_tokens"].as_u64()),
        (Some(4), Some(2162))
    );
    assert!(m.stopped);
}

#[test]
fn gemini_function_call_to_anthropic() {
    let r = run(
        "gemini_function_call.sse",
        &Opts::new(Operation::Messages, "gemini_function_call.sse"),
    );
    let m = anthropic_message(&r.out);
    assert_eq!(m.blocks.len(), 1);
    let b = &m.blocks[0];
    assert_eq!(b.kind, "tool_use");
    assert_eq!(b.name, "getWeather");
    assert_eq!(b.id, gemini_fixture_call_id());
    // Pitfall 1: the arguments reach the client (one input_json_delta with all of them).
    assert_eq!(args(&b.input_json), json!({"location": "Tokyo"}));
    assert!(b.stopped);
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
}

#[test]
fn gemini_parallel_calls_to_anthropic() {
    let r = run(
        "gemini_parallel_calls.sse",
        &Opts::new(Operation::Messages, "gemini_parallel_calls.sse"),
    );
    let m = anthropic_message(&r.out);
    let kinds: Vec<_> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, ["text", "tool_use", "tool_use"]);
    assert_ne!(m.blocks[1].id, m.blocks[2].id);
    assert_eq!(
        args(&m.blocks[2].input_json)["note"],
        "say \"hi\"\nthen stop"
    );
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
}

#[test]
fn a_gemini_stream_without_finish_reason_ends_an_anthropic_stream_with_an_error() {
    let r = run(
        "gemini_truncated.sse",
        &Opts::new(Operation::Messages, "gemini_truncated.sse"),
    );
    let m = anthropic_message(&r.out);
    assert!(m.error.is_some());
    assert!(!m.stopped);
}

// ---- Passthrough ----

/// The raw bytes of every event of `input`.
fn events_of(input: &Bytes) -> Vec<Bytes> {
    let mut dec = Decoder::new();
    dec.feed(input.clone());
    dec.finish();
    let mut v = Vec::new();
    while let Some(item) = dec.next_item() {
        if let Item::Event(ev) = item.unwrap() {
            v.push(ev.raw().clone());
        }
    }
    v
}

#[test]
fn passthrough_forwards_the_upstreams_bytes_without_copying() {
    for (name, op) in [
        ("openai_tool_call.sse", Operation::ChatCompletions),
        ("openai_text_usage.sse", Operation::ChatCompletions),
        ("anthropic_tool_use.sse", Operation::Messages),
        ("anthropic_error_after_200.sse", Operation::Messages),
    ] {
        let input = fixture(name);
        let opts = Opts::new(op, name).usage(true);
        let mut t = translator(&opts.stream_options());
        let r = run_with(t.as_mut(), &input, &[]);
        let got: Vec<Bytes> = r.out.iter().map(|e| e.bytes.clone()).collect();
        assert_eq!(got, events_of(&input), "{name}");
        let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
        for e in &r.out {
            assert!(
                range.contains(&(e.bytes.as_ptr() as usize)),
                "{name}: an event was copied"
            );
        }
    }
}

#[test]
fn passthrough_classifies_openai_events() {
    let r = run(
        "openai_text_usage.sse",
        &Opts::new(Operation::ChatCompletions, "openai_text_usage.sse").usage(true),
    );
    assert_eq!(
        kinds(&r.out),
        [
            Preamble, Content, Content, Content, Content, Content, Content, Content, Trailer,
            Trailer, Trailer
        ]
    );
    assert_eq!(
        r.usage,
        Some(Usage {
            input: 19,
            output: 10,
            ..Usage::default()
        })
    );
}

#[test]
fn passthrough_removes_the_usage_chunk_the_client_did_not_ask_for() {
    let input = fixture("openai_tool_call.sse");
    let r = run(
        "openai_tool_call.sse",
        &Opts::new(Operation::ChatCompletions, "openai_tool_call.sse"),
    );
    let mut expected = events_of(&input);
    let usage_chunk = expected.len() - 2;
    assert!(std::str::from_utf8(&expected[usage_chunk])
        .unwrap()
        .contains("\"choices\":[]"));
    expected.remove(usage_chunk);
    let got: Vec<Bytes> = r.out.iter().map(|e| e.bytes.clone()).collect();
    assert_eq!(got, expected);
    // The gateway still learns the usage.
    assert_eq!(r.usage.unwrap().input, 76);
    assert_eq!(r.usage.unwrap().output, 24);
}

#[test]
fn passthrough_reads_anthropic_usage_cumulatively_and_tracks_text() {
    let r = run(
        "anthropic_tool_use.sse",
        &Opts::new(Operation::Messages, "anthropic_tool_use.sse").track(true),
    );
    assert_eq!(
        r.usage,
        Some(Usage {
            input: 377,
            output: 65,
            ..Usage::default()
        })
    );
    assert_eq!(r.text, "I'll check the current weather in Paris for you.");
    let k = kinds(&r.out);
    assert_eq!(&k[..4], [Preamble, Preamble, Preamble, Content]);
    assert_eq!(&k[k.len() - 2..], [Trailer, Trailer]);
}

#[test]
fn passthrough_tracks_openai_text_only_when_asked() {
    let on = run(
        "openai_text.sse",
        &Opts::new(Operation::ChatCompletions, "openai_text.sse").track(true),
    );
    assert_eq!(on.text, "Hello! How can I \"help\" you\ntoday?");
    let off = run(
        "openai_text.sse",
        &Opts::new(Operation::ChatCompletions, "openai_text.sse"),
    );
    assert_eq!(off.text, "");
}

#[test]
fn passthrough_marks_the_anthropic_error_event() {
    let r = run(
        "anthropic_error_after_200.sse",
        &Opts::new(Operation::Messages, "anthropic_error_after_200.sse"),
    );
    assert_eq!(
        kinds(&r.out),
        [Preamble, Preamble, Preamble, Content, Content, Error]
    );
}

#[test]
fn passthrough_of_responses_events() {
    let text = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n\
                event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi \\\"there\\\"\"}\n\n\
                event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":2},\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":1},\"total_tokens\":8}}}\n\n";
    let provider = ProviderKind::OpenAi;
    let mut o = StreamOptions::new(Operation::Responses, &provider, "m");
    o.track_text = true;
    let mut t = translator(&o);
    let r = run_with(t.as_mut(), &Bytes::from_static(text.as_bytes()), &[]);
    assert_eq!(kinds(&r.out), [Preamble, Content, Trailer]);
    assert_eq!(r.text, "Hi \"there\"");
    assert_eq!(
        r.usage,
        Some(Usage {
            cache_write: 0,
            input: 5,
            output: 3,
            cached_input: 2,
            reasoning: 1
        })
    );
}

#[test]
fn classify_event_on_its_own() {
    let cases: [(Family, &str, EventKind); 9] = [
        (Family::OpenAi, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", Preamble),
        (Family::OpenAi, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n", Content),
        (Family::OpenAi, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", Trailer),
        (Family::OpenAi, "data: {\"choices\":[],\"prompt_filter_results\":[]}\n\n", Preamble),
        (Family::OpenAi, "data: {\"error\":{\"message\":\"x\"}}\n\n", Error),
        (Family::OpenAi, "data: [DONE]\n\n", Trailer),
        (Family::Anthropic, "event: ping\ndata: {\"type\":\"ping\"}\n\n", Preamble),
        (Family::Anthropic, "event: error\ndata: {\"type\":\"error\"}\n\n", Error),
        (Family::Gemini, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}]}\n\n", Content),
    ];
    for (family, text, want) in cases {
        let mut dec = Decoder::new();
        dec.feed(Bytes::from_static(text.as_bytes()));
        let Some(Ok(Item::Event(ev))) = dec.next_item() else {
            panic!()
        };
        assert_eq!(classify_event(family, &ev), want, "{text}");
    }
}

#[test]
fn azure_streams_pass_through_like_openai() {
    let provider = ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    };
    let mut t = translator(&StreamOptions::new(
        Operation::ChatCompletions,
        &provider,
        "m",
    ));
    let input = fixture("openai_text.sse");
    let r = run_with(t.as_mut(), &input, &[]);
    let got: Vec<Bytes> = r.out.iter().map(|e| e.bytes.clone()).collect();
    assert_eq!(got, events_of(&input));
}

#[test]
fn passthrough_of_legacy_completions() {
    let text = "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"Once\",\"index\":0,\"finish_reason\":null}]}\n\n\
                data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"text\":\" upon\",\"index\":0,\"finish_reason\":\"length\"}]}\n\n\
                data: [DONE]\n\n";
    let provider = ProviderKind::OpenAi;
    let mut o = StreamOptions::new(Operation::Completions, &provider, "m");
    o.track_text = true;
    let mut t = translator(&o);
    let r = run_with(t.as_mut(), &Bytes::from_static(text.as_bytes()), &[]);
    assert_eq!(kinds(&r.out), [Content, Trailer, Trailer]);
    assert_eq!(r.text, "Once upon");
}
