//! However the network splits a stream, the client gets the same events: every fixture through
//! `sluice_sse::Decoder` and every translator, split at every byte boundary, byte by byte and
//! at random (proptest), gives what the whole stream gives. And the gateway holds no more than
//! one partial event (the decoder) plus one tool call's arguments (the translator).

mod stream_support;

use proptest::prelude::*;
use sluice_providers::stream::EventKind;
use stream_support::*;

type Outcome = (
    Vec<(Vec<u8>, EventKind)>,
    Option<sluice_providers::Usage>,
    String,
);

fn outcome(r: &Run) -> Outcome {
    (
        r.out.iter().map(|e| (e.bytes.to_vec(), e.kind)).collect(),
        r.usage,
        r.text.clone(),
    )
}

fn configs() -> Vec<(String, Opts)> {
    let mut v = Vec::new();
    for name in fixtures() {
        for op in OPS {
            v.push((name.clone(), Opts::new(op, &name).usage(true).track(true)));
        }
    }
    v
}

/// The largest raw event of a fixture: what the decoder may have to hold.
fn largest_event(name: &str) -> usize {
    let input = fixture(name);
    let mut dec = sluice_sse::Decoder::new();
    dec.feed(input);
    dec.finish();
    let mut max = 0;
    while let Some(item) = dec.next_item() {
        max = max.max(item.unwrap().raw().len());
    }
    max
}

#[test]
fn every_split_point_gives_the_same_events() {
    // One client op per fixture here (the one that translates it), to keep this to seconds;
    // byte-by-byte and proptest below cover both.
    let configs = configs().into_iter().filter(|(name, opts)| {
        let translated = provider_of(name).family() != opts.op.family();
        translated
            && !(name.starts_with("gemini") && opts.op == sluice_providers::Operation::Messages)
    });
    for (name, opts) in configs {
        let whole = outcome(&run(&name, &opts));
        assert!(!whole.0.is_empty(), "{name}");
        let input = fixture(&name);
        for k in 1..input.len() {
            let mut t = sluice_providers::stream::translator(&opts.stream_options());
            let r = run_with(t.as_mut(), &input, &[k, input.len()]);
            assert_eq!(outcome(&r), whole, "{name} {:?} split at {k}", opts.op);
        }
    }
}

#[test]
fn byte_by_byte_gives_the_same_events_within_the_memory_bound() {
    for (name, opts) in configs() {
        let whole = outcome(&run(&name, &opts));
        let r = run_chunked(&name, &opts, &[1]);
        assert_eq!(outcome(&r), whole, "{name} {:?}", opts.op);
        // One partial event in the decoder; the translator holds nothing for these streams
        // (every tool call's name comes before its arguments) but a signed thinking block's
        // text until its signature, for an OpenAI client's `thinking_blocks`.
        assert!(r.max_decoder_held <= largest_event(&name), "{name}");
        let signed = name.starts_with("anthropic_thinking")
            && opts.op == sluice_providers::Operation::ChatCompletions;
        if signed {
            assert!(
                r.max_translator_held < 200,
                "{name}: {}",
                r.max_translator_held
            );
        } else {
            assert_eq!(r.max_translator_held, 0, "{name}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_chunking_gives_the_same_events(
        which in 0usize..1000,
        sizes in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let configs = configs();
        let (name, opts) = &configs[which % configs.len()];
        let whole = outcome(&run(name, opts));
        let r = run_chunked(name, opts, &sizes);
        prop_assert_eq!(outcome(&r), whole);
    }
}
