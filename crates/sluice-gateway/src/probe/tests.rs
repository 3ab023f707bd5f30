use super::*;

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
        (self.next() % n as u64) as usize
    }
}

const KEYS: &[&str] = &[
    "model",
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stream_options",
    "include_usage",
    "messages",
    "mod\\u0065l",
    "m\u{e9}",
    "",
];

const SCALARS: &[&str] = &[
    "true",
    "false",
    "null",
    "0",
    "16",
    "-1",
    "1.5",
    "1e3",
    "18446744073709551615",
    "18446744073709551616",
    "012",
    "-0",
    "0.0e-0",
    "\"gpt-4o\"",
    "\"\"",
    "\"\\n\\t\\\"\"",
    "\"\\u00e9\\ud800\"",
    "\"\\x\"",
    "\"模型\"",
    "\"a\tb\"",
    "tru",
    "nul",
    "+1",
    ".5",
    "1.",
    "1e",
];

/// A JSON-ish value: mostly valid, now and then broken.
fn value(rng: &mut Rng, depth: usize, out: &mut String) {
    match rng.below(if depth > 4 { 2 } else { 5 }) {
        0 | 1 => out.push_str(SCALARS[rng.below(SCALARS.len())]),
        2 | 3 => object(rng, depth + 1, out),
        _ => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                value(rng, depth + 1, out);
            }
            out.push(']');
        }
    }
}

fn object(rng: &mut Rng, depth: usize, out: &mut String) {
    out.push('{');
    for i in 0..rng.below(6) {
        if i > 0 {
            out.push_str([",", ", ", ",\n"][rng.below(3)]);
        }
        out.push('"');
        out.push_str(KEYS[rng.below(KEYS.len())]);
        out.push_str(["\":", "\" : ", "\":\t"][rng.below(3)]);
        value(rng, depth, out);
    }
    if rng.below(20) == 0 {
        out.push(',');
    }
    out.push('}');
}

/// Whatever the scanner reads, serde reads the same; and the scanner is sure of most of the
/// bodies that are valid.
#[test]
fn the_scanner_reads_what_serde_reads_or_leaves_it_to_serde() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut sure, mut valid) = (0, 0);
    for case in 0..20_000 {
        let mut body = String::new();
        if rng.below(4) == 0 {
            body.push_str([" ", "\n", ""][rng.below(3)]);
        }
        object(&mut rng, 0, &mut body);
        let mut bytes = body.into_bytes();
        // Now and then a byte broken, cut or appended.
        match rng.below(10) {
            0 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next() as u8;
            }
            1 => bytes.truncate(rng.below(bytes.len() + 1)),
            2 => bytes.extend_from_slice([&b" x"[..], b"}", b" \n"][rng.below(3)]),
            _ => {}
        }
        let serde: Result<Probe<'_>, _> = serde_json::from_slice(&bytes);
        valid += usize::from(serde.is_ok());
        if let Some(fast) = scan(&bytes) {
            sure += 1;
            match &serde {
                Ok(s) => assert_eq!(&fast, s, "case {case}: {}", String::from_utf8_lossy(&bytes)),
                Err(e) => panic!(
                    "case {case}: the scanner read {fast:?}, serde refused ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                ),
            }
        }
    }
    // The generator makes enough bodies serde reads (3,095 of 20,000 with this seed).
    assert!(valid > 1_000, "only {valid} valid bodies");
    // Not a speed check: the scanner must not simply give up on everything.
    assert!(sure * 2 > valid, "sure of {sure} of {valid} valid bodies");
}

#[test]
fn a_chat_body_is_read_by_the_scanner() {
    let body = br#"{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief.\nReally."},{"role":"user","content":"hello \"there\" \u00e9"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"temperature":0.2,"tools":[],"metadata":null}"#;
    let p = scan(body).expect("the scanner reads an ordinary chat body");
    assert_eq!(p.model.as_deref(), Some("gpt-4o"));
    assert_eq!(p.stream, Some(true));
    assert_eq!(p.max_tokens, Some(16));
    assert_eq!(
        p.stream_options,
        Some(ProbeStreamOptions {
            include_usage: Some(true)
        })
    );
    assert_eq!(read(body).unwrap(), p);
}

#[test]
fn doubtful_bodies_are_left_to_serde() {
    for body in [
        // An escaped key that spells a routing field.
        &br#"{"mod\u0065l":"a"}"#[..],
        // An escape in the model.
        br#"{"model":"gpt\u002d4o"}"#,
        // A duplicate routing field (serde refuses it).
        br#"{"model":"a","model":"b"}"#,
        // A count that is not a plain whole number.
        br#"{"model":"a","max_tokens":16.0}"#,
        br#"{"model":"a","max_tokens":-1}"#,
        br#"{"model":"a","max_tokens":18446744073709551616}"#,
        // stream_options as an array (serde takes it).
        br#"{"model":"a","stream_options":[true]}"#,
        // An array body (serde reads a struct from one).
        br#"["a", true]"#,
        // Trailing bytes, a trailing comma.
        br#"{"model":"a"} x"#,
        br#"{"model":"a",}"#,
    ] {
        assert_eq!(scan(body), None, "{}", String::from_utf8_lossy(body));
    }
    // serde still answers them as before.
    assert_eq!(
        read(br#"{"mod\u0065l":"a"}"#).unwrap().model.as_deref(),
        Some("a")
    );
    assert_eq!(
        read(br#"{"model":"a","stream_options":[true]}"#)
            .unwrap()
            .stream_options,
        Some(ProbeStreamOptions {
            include_usage: Some(true)
        })
    );
    assert!(read(br#"{"model":"a","model":"b"}"#).is_err());
}

#[test]
fn deep_nesting_is_left_to_serde() {
    let deep = format!(
        "{{\"model\":\"a\",\"x\":{}{}}}",
        "[".repeat(MAX_DEPTH),
        "]".repeat(MAX_DEPTH)
    );
    assert_eq!(scan(deep.as_bytes()), None);
    let shallow = format!(
        "{{\"model\":\"a\",\"x\":{}{}}}",
        "[".repeat(50),
        "]".repeat(50)
    );
    assert!(scan(shallow.as_bytes()).is_some());
}

/// A byte of a string's inside: mostly plain (printable ASCII, UTF-8's high bytes), a stop
/// (quote, backslash, control character) about once in `1 << rate` bytes, none at rate 0.
fn string_byte(rng: &mut Rng, rate: usize) -> u8 {
    if rate > 0 && rng.below(1 << rate) == 0 {
        return match rng.below(3) {
            0 => b'"',
            1 => b'\\',
            _ => rng.below(0x20) as u8,
        };
    }
    match rng.below(8) {
        0 => 0x80 + rng.below(0x80) as u8,
        _ => 0x20 + rng.below(0x60) as u8,
    }
}

#[test]
fn a_plain_run_ends_where_a_look_at_each_byte_ends_it() {
    let stops = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for _ in 0..20_000 {
        // Lengths across the vector widths, rates from "never" to "every other byte".
        let (len, rate) = (rng.below(300), rng.below(8));
        let s: Vec<u8> = (0..len)
            .filter_map(|_| {
                let c = string_byte(&mut rng, rate);
                // The plain alphabet never yields a quote or backslash except as a stop.
                (rate > 0 || !stops(c)).then_some(c)
            })
            .collect();
        assert_eq!(plain_run(&s), s.iter().position(|&c| stops(c)), "{s:?}");
    }
}

#[test]
fn long_strings_read_as_serde_reads_them() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ 0xFFFF);
    let mut agreed = 0;
    for _ in 0..5_000 {
        let (len, rate) = (rng.below(400), rng.below(9));
        // Text with now and then an escape, a character of two or three bytes, and (rate in
        // 1 << rate pieces) something serde refuses: a control character or a bad escape.
        let mut content = Vec::new();
        for _ in 0..len {
            let control = [rng.below(0x20) as u8];
            let piece: &[u8] = if rate > 0 && rng.below(1 << rate) == 0 {
                // Two valid escapes among them, so that escapes alone do not decide.
                [
                    &br"\x"[..],
                    br"\u12g4",
                    br"\n",
                    br"\u00e9",
                    br#"""#,
                    &control,
                ][rng.below(6)]
            } else {
                [
                    &b"a"[..],
                    b" ",
                    b"Z",
                    b"~",
                    "\u{e9}".as_bytes(),
                    "\u{20ac}".as_bytes(),
                ][rng.below(6)]
            };
            content.extend_from_slice(piece);
        }
        let mut body = br#"{"messages":[{"role":"user","content":""#.to_vec();
        body.extend_from_slice(&content);
        body.extend_from_slice(br#""}],"model":"gpt-4o","stream":true}"#);
        let serde = serde_json::from_slice::<Probe<'_>>(&body).ok();
        match scan(&body) {
            Some(p) => {
                assert_eq!(Some(p), serde, "{}", String::from_utf8_lossy(&body));
                agreed += 1;
            }
            None => assert_eq!(serde, None, "{}", String::from_utf8_lossy(&body)),
        }
    }
    // Enough of them are JSON for the check to mean something.
    assert!(agreed > 1_000, "{agreed}");
}
