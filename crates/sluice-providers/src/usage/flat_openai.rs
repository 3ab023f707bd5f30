//! OpenAI's chat usage object in its common flat form (`{"prompt_tokens":20,
//! "completion_tokens":16,"total_tokens":36}`), read without serde: deserialising it cost
//! ~1.5 K instructions per non-streaming response, more than the rest of reading the answer.
//!
//! The scanner takes only what serde reads to the same counts, and answers `None` on any doubt
//! (another key, an escape in a key, a repeated key, a number that is not a plain `u64`, a
//! nested value): serde then reads the object as before, so an unusual object gets exactly the
//! answer it got before. `tests` holds the scanner to that against serde over generated
//! objects.

use super::Usage;

/// The usage at the start of `value` when it is a flat chat usage object that serde would read
/// as [`crate::shape::openai::UsageBody`]; `None` when unsure (not that it is no usage).
pub(super) fn read(value: &[u8]) -> Option<Usage> {
    let mut s = Scanner { b: value, i: 0 };
    s.ws();
    s.eat(b'{')?;
    let mut counts: [Option<u64>; 3] = [None; 3];
    s.ws();
    if s.peek()? != b'}' {
        loop {
            s.ws();
            let field = s.key()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            let n = s.count()?;
            // serde refuses a repeated field.
            if counts[field].replace(n).is_some() {
                return None;
            }
            s.ws();
            match s.peek()? {
                b',' => s.i += 1,
                b'}' => break,
                _ => return None,
            }
        }
    }
    // `prompt_tokens` is required (it tells usage from any other object); what follows the
    // object is ignored, as `usage::read` ignores it.
    let [prompt, completion, _total] = counts;
    Some(Usage {
        cache_write: 0,
        input: prompt?,
        output: completion.unwrap_or(0),
        cached_input: 0,
        reasoning: 0,
    })
}

/// The fields taken, by their index in the counts, each with the quote that closes it.
const FIELDS: [&[u8]; 3] = [
    b"prompt_tokens\"",
    b"completion_tokens\"",
    b"total_tokens\"",
];

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// JSON's whitespace (what serde skips).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// A key among [`FIELDS`], written without escapes (an escaped key could spell one): its
    /// first letter picks the one field it can be, then one comparison of the bytes.
    fn key(&mut self) -> Option<usize> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let field = match rest.first()? {
            b'p' => 0,
            b'c' => 1,
            b't' => 2,
            _ => return None,
        };
        let name = FIELDS[field];
        if !rest.starts_with(name) {
            return None;
        }
        self.i += name.len();
        Some(field)
    }

    /// A whole number as serde reads a `u64` ([`crate::json_count::read_count`]).
    fn count(&mut self) -> Option<u64> {
        let (n, end) = crate::json_count::read_count(self.b, self.i)?;
        self.i = end;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::openai::UsageBody;

    /// What serde reads from `value`, as `usage::read` did before this scanner.
    fn by_serde(value: &[u8]) -> Option<Usage> {
        super::super::first_value::<UsageBody>(value).map(|u| u.to_usage())
    }

    #[test]
    fn reads_the_flat_object() {
        let u = read(br#"{"prompt_tokens":20,"completion_tokens":16,"total_tokens":36}, "x":1}"#);
        assert_eq!(
            u,
            Some(Usage {
                cache_write: 0,
                input: 20,
                output: 16,
                cached_input: 0,
                reasoning: 0
            })
        );
        let spaced = read(b" {\n \"total_tokens\" : 3 ,\t\"prompt_tokens\":3\r}");
        assert_eq!(spaced.map(|u| (u.input, u.output)), Some((3, 0)));
    }

    #[test]
    fn leaves_what_it_is_unsure_of_to_serde() {
        for v in [
            &br#"{"completion_tokens":1}"#[..],
            br#"{}"#,
            br#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            br#"{"prompt\u005ftokens":1}"#,
            br#"{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}"#,
            br#"{"prompt_tokens":1.0}"#,
            br#"{"prompt_tokens":01}"#,
            br#"{"prompt_tokens":-1}"#,
            br#"{"prompt_tokens":18446744073709551616}"#,
            br#"{"prompt_tokens":1,}"#,
            br#"{"prompt_tokens":1"#,
            br#"["prompt_tokens"]"#,
            b"null",
        ] {
            assert_eq!(read(v), None, "{}", String::from_utf8_lossy(v));
        }
        assert_eq!(
            read(br#"{"prompt_tokens":18446744073709551615}"#).map(|u| u.input),
            Some(u64::MAX)
        );
    }

    /// xorshift64*: deterministic, so a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
        }

        /// One of `from`; of its first `valid` entries only when `clean`.
        fn pick<'a>(&mut self, from: &[&'a str], valid: usize, clean: bool) -> &'a str {
            from[self.below(if clean { valid } else { from.len() })]
        }
    }

    /// Each list starts with the entries a valid flat usage object may hold (the count
    /// after it), then the ones that break it.
    const KEYS: (&[&str], usize) = (
        &[
            "\"prompt_tokens\"",
            "\"completion_tokens\"",
            "\"total_tokens\"",
            "\"prompt_tokens_details\"",
            "\"prompt\\u005ftokens\"",
            "\"prompt_tokens \"",
            "\"x\"",
            "\"\"",
            "prompt_tokens",
        ],
        3,
    );

    const VALUES: (&[&str], usize) = (
        &[
            "0",
            "7",
            "16",
            "1234567",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "-0",
            "1.5",
            "1e3",
            "1E3",
            "012",
            "null",
            "\"7\"",
            "{\"cached_tokens\":2}",
            "[]",
            "true",
            "",
        ],
        5,
    );

    const GAPS: (&[&str], usize) = (&["", "", "", " ", "\n", "\t", "\r\n ", "\u{a0}"], 7);

    const SEPARATORS: (&[&str], usize) = (&[",", ";", ",,", ""], 1);

    const ENDS: (&[&str], usize) = (&["}", "}, \"x\": 1}", "} garbage", "", "]"], 3);

    /// A usage-like object: half of them valid JSON of the flat shape (keys may repeat), the
    /// others broken anywhere.
    fn object(rng: &mut Rng) -> String {
        let clean = rng.below(2) == 0;
        let pick =
            |rng: &mut Rng, (from, valid): (&[&'static str], usize)| rng.pick(from, valid, clean);
        let mut out = String::new();
        out.push_str(pick(rng, GAPS));
        out.push_str(if !clean && rng.below(20) == 0 {
            "["
        } else {
            "{"
        });
        for i in 0..rng.below(5) {
            if i > 0 {
                out.push_str(pick(rng, SEPARATORS));
            }
            out.push_str(pick(rng, GAPS));
            out.push_str(pick(rng, KEYS));
            out.push_str(pick(rng, GAPS));
            out.push_str(if !clean && rng.below(30) == 0 {
                "="
            } else {
                ":"
            });
            out.push_str(pick(rng, GAPS));
            out.push_str(pick(rng, VALUES));
            out.push_str(pick(rng, GAPS));
        }
        out.push_str(pick(rng, ENDS));
        out
    }

    #[test]
    fn agrees_with_serde_on_generated_objects() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut answered = 0;
        for _ in 0..50_000 {
            let v = object(&mut rng);
            let fast = read(v.as_bytes());
            if fast.is_some() {
                answered += 1;
                assert_eq!(fast, by_serde(v.as_bytes()), "{v}");
            }
            // Through `usage::read`, the answer is serde's whatever the scanner said.
            assert_eq!(
                super::super::read(crate::api::Family::OpenAi, v.as_bytes()),
                by_serde(v.as_bytes()).or_else(|| super::super::first_value::<
                    crate::shape::openai::ResponsesUsage,
                >(v.as_bytes())
                .map(|u| u.to_usage())),
                "{v}"
            );
        }
        // The scanner must answer the common shapes, or it saves nothing.
        assert!(answered > 5_000, "{answered} answered");
    }
}
