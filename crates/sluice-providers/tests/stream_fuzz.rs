//! Runs the `translate_stream` fuzz target's body over a corpus, so `cargo test` exercises it
//! without cargo-fuzz: every fixture, mutated fixtures (bytes flipped, dropped, repeated;
//! events cut, swapped and spliced between families), and pseudo-random SSE-and-JSON pieces,
//! each through every translator with varied options and chunk sizes.

mod stream_fuzz_check;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn fixtures() -> Vec<Vec<u8>> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The events of a stream, as byte ranges split at blank lines.
fn events(stream: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < stream.len() {
        if &stream[i..i + 2] == b"\n\n" {
            v.push(&stream[start..i + 2]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < stream.len() {
        v.push(&stream[start..]);
    }
    v
}

const PIECES: &[&[u8]] = &[
    b"data: ",
    b"event: ",
    b"\n",
    b"\n\n",
    b"\r\n",
    b"[DONE]",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b"\\u00e9",
    b"\\ud83d",
    b",",
    b":",
    b"null",
    b"12",
    b"-1",
    b"1e99",
    b"\xFF",
    b"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]",
    b"\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]",
    b"\"tool_calls\":[{\"index\":1,\"id\":\"a\",\"function\":{\"name\":\"f\"}}]",
    b"\"finish_reason\":\"stop\"",
    b"\"usage\":{\"prompt_tokens\":1}",
    b"\"error\":{\"message\":\"x\"}",
    b"message_start",
    b"content_block_start",
    b"content_block_delta",
    b"content_block_stop",
    b"message_delta",
    b"message_stop",
    b"error",
    b"\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\"",
    b"\"index\":0",
    b"\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}",
    b"\"delta\":{\"type\":\"text_delta\",\"text\":\"t\"}",
    b"\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"g\"}]}}]",
    b"\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":[1,{}]}}",
    b"\"finishReason\":\"STOP\"",
    b"\"usageMetadata\":{\"promptTokenCount\":2}",
];

fn mutate(rng: &mut Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut evs: Vec<Vec<u8>> = events(base).into_iter().map(<[u8]>::to_vec).collect();
    match rng.below(8) {
        0 => {
            // Flip bytes.
            let mut s: Vec<u8> = evs.concat();
            for _ in 0..1 + rng.below(4) {
                if !s.is_empty() {
                    let i = rng.below(s.len());
                    s[i] = rng.next() as u8;
                }
            }
            return s;
        }
        1 if !evs.is_empty() => {
            let i = rng.below(evs.len());
            evs.remove(i);
        }
        2 if !evs.is_empty() => {
            let i = rng.below(evs.len());
            let e = evs[i].clone();
            evs.insert(i, e);
        }
        3 if evs.len() > 1 => {
            let (a, b) = (rng.below(evs.len()), rng.below(evs.len()));
            evs.swap(a, b);
        }
        4 => {
            // Cut anywhere.
            let s: Vec<u8> = evs.concat();
            let n = rng.below(s.len() + 1);
            return s[..n].to_vec();
        }
        5 => {
            // Splice events from another family's stream.
            let o = events(other);
            if !o.is_empty() {
                let at = rng.below(evs.len() + 1);
                evs.insert(at, o[rng.below(o.len())].to_vec());
            }
        }
        6 => {
            // Insert a piece inside an event.
            let mut s: Vec<u8> = evs.concat();
            let at = rng.below(s.len() + 1);
            let p = PIECES[rng.below(PIECES.len())];
            s.splice(at..at, p.iter().copied());
            return s;
        }
        _ => {}
    }
    evs.concat()
}

/// Runs one case; on failure, says which input failed (to add it to a regression test).
fn check(data: &[u8]) {
    if std::panic::catch_unwind(|| stream_fuzz_check::check(data)).is_err() {
        panic!(
            "failed on head {:?} input {:?}",
            &data[..2.min(data.len())],
            String::from_utf8_lossy(&data[2.min(data.len())..])
        );
    }
}

#[test]
fn fuzz_body_on_a_corpus() {
    let fixtures = fixtures();
    // `SLUICE_FUZZ_SCALE=20` runs twenty times the cases (and another seed) by hand.
    let scale: u64 = std::env::var("SLUICE_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = Rng(0x5EED_57EA_0001 ^ scale);
    let mut cases = 0;
    // Every fixture, whole, through every translator and option set.
    for f in &fixtures {
        for pick in 0..16u8 {
            for flags in [0u8, 1, 3, 4 | 8, 7 | 8, 0x31] {
                let mut data = vec![pick, flags];
                data.extend_from_slice(f);
                check(&data);
                cases += 1;
            }
        }
    }
    // Mutated fixtures.
    for _ in 0..2500 * scale {
        let base = &fixtures[rng.below(fixtures.len())];
        let other = &fixtures[rng.below(fixtures.len())];
        let mut data = vec![rng.next() as u8, rng.next() as u8];
        data.extend(mutate(&mut rng, base, other));
        check(&data);
        cases += 1;
    }
    // Pseudo-random SSE and JSON pieces.
    for _ in 0..1500 * scale {
        let mut data = vec![rng.next() as u8, rng.next() as u8];
        for _ in 0..rng.below(40) {
            if rng.below(12) == 0 {
                data.push(rng.next() as u8);
            } else {
                data.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
        }
        check(&data);
        cases += 1;
    }
    assert!(cases > 5000);
}
