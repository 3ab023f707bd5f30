//! The streaming redactor: an answer's text deltas in, checked text out.
//!
//! Text is released only once no match can still reach into it: everything but the last
//! `window` bytes is checked and released with each delta, except that a match (or a shape
//! that failed validation) straddling that point is held whole. Since every rule's longest
//! match is shorter than the window (checked when the rules are built), a match split across
//! events is still caught, and the released text is exactly what checking the whole text at
//! once would give (the property test in `tests/stream_split.rs`). Text is released a quarter
//! window at a time, so the hold-back is at most `window` × 1.25 plus the longest match, in
//! bytes; it never splits a UTF-8 character.

use std::sync::Arc;

use crate::rules::{Candidate, Denied, RuleSet};
use crate::verdict::Verdict;

/// A stream's redactor (one per text channel of an answer: its text, each tool call's
/// arguments).
#[derive(Debug)]
pub struct StreamRedactor {
    rules: Arc<RuleSet>,
    window: usize,
    /// The last character released (look-behind context for word boundaries), then the text
    /// held back.
    buf: String,
    /// Bytes of `buf` that are context, already released.
    ctx: usize,
    verdict: Verdict,
    cands: Vec<Candidate>,
}

impl StreamRedactor {
    /// A redactor holding back at most `window` bytes (plus a straddling match). The rules
    /// must have been built for a window at least this large ([`RuleSet::new`]).
    pub fn new(rules: Arc<RuleSet>, window: usize) -> StreamRedactor {
        StreamRedactor {
            rules,
            window,
            buf: String::new(),
            ctx: 0,
            verdict: Verdict::Allow,
            cands: Vec::new(),
        }
    }

    /// Takes a delta; returns the text now checked (often empty while the window fills), or
    /// the deny that ends the stream.
    pub fn push(&mut self, delta: &str) -> Result<String, Denied> {
        self.buf.push_str(delta);
        // Released in steps of a quarter window: each release searches the whole window
        // again, so releasing at every delta (a few bytes) searched each byte ~64 times.
        if self.buf.len() - self.ctx <= self.window + self.window / 4 {
            return Ok(String::new());
        }
        self.release(false)
    }

    /// Checks and returns everything held: the text's end, or a pause in it (another event
    /// came); the redactor takes more text after it as the text's continuation.
    pub fn finish(&mut self) -> Result<String, Denied> {
        self.release(true)
    }

    /// Bytes held back now.
    pub fn held(&self) -> usize {
        self.buf.len() - self.ctx
    }

    /// The most severe action taken so far.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    fn release(&mut self, all: bool) -> Result<String, Denied> {
        self.cands.clear();
        self.rules.candidates(&self.buf, self.ctx, &mut self.cands);
        let len = self.buf.len();
        let mut cut = if all {
            len
        } else {
            floor_char(&self.buf, len.saturating_sub(self.window)).max(self.ctx)
        };
        if !all {
            // Never through a match: hold it whole (moving back may land in another one).
            loop {
                let straddling = self
                    .cands
                    .iter()
                    .filter(|c| c.start < cut && c.end > cut)
                    .map(|c| c.start)
                    .min();
                match straddling {
                    Some(s) => cut = s,
                    None => break,
                }
            }
        }
        self.cands.retain(|c| c.end <= cut);
        let mut out = String::with_capacity(cut - self.ctx);
        let v = self
            .rules
            .rewrite(&self.buf, self.ctx, cut, &mut self.cands, &mut out)?;
        self.verdict = self.verdict.max(v);
        // Keep the last character released as context.
        let keep_from = if cut == 0 {
            0
        } else {
            floor_char(&self.buf, cut - 1)
        };
        self.buf.drain(..keep_from);
        self.ctx = cut - keep_from;
        Ok(out)
    }
}

/// The largest character boundary of `s` at or before `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
