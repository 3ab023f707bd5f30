//! The incremental decoder: `Bytes` chunks in, [`Item`]s out.
//!
//! Follows the WHATWG HTML "server-sent events" parsing rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>).
//!
//! # Zero copy
//!
//! The decoder works on "frames": the bytes of one item, from the first byte of its first line
//! through the line break that ends it. A frame that lies inside one input chunk is handed out as
//! a slice of that chunk, and its field values as slices of the frame. Only a frame that spans
//! chunks is copied, once, into a carry buffer, which is what `max_event_bytes` bounds.

mod error;
mod item;
mod line;

use std::collections::VecDeque;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use memchr::memchr2;

pub use error::{DecodeError, LimitError};
pub use item::{Comment, Event, Item, Skipped};

use item::join_data;
use line::{classify, Line};

/// The default [`Decoder::max_event_bytes`]: 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

/// The largest accepted [`Decoder::max_event_bytes`]: 64 MiB.
pub const MAX_EVENT_BYTES_CEILING: usize = 64 << 20;

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// An incremental, sans-I/O server-sent events decoder.
///
/// Feed it chunks as they arrive with [`feed`](Decoder::feed), pull items with
/// [`next_item`](Decoder::next_item) until it returns `None` (it needs more input), and call
/// [`finish`](Decoder::finish) at the end of the stream so that an unfinished event is reported as
/// [`DecodeError::Truncated`] instead of waited for.
///
/// ```
/// use bytes::Bytes;
/// use sluice_sse::{Decoder, Item};
///
/// let mut dec = Decoder::new();
/// dec.feed(Bytes::from_static(b"event: delta\ndata: {\"t\":\"Hel"));
/// assert!(dec.next_item().is_none()); // the event is not finished yet
/// dec.feed(Bytes::from_static(b"lo\"}\n\n: ping\n"));
/// let Some(Ok(Item::Event(ev))) = dec.next_item() else { panic!() };
/// assert_eq!(ev.event_type(), b"delta");
/// assert_eq!(ev.data(), br#"{"t":"Hello"}"#);
/// assert_eq!(&ev.raw()[..], &b"event: delta\ndata: {\"t\":\"Hello\"}\n\n"[..]);
/// let Some(Ok(Item::Comment(c))) = dec.next_item() else { panic!() };
/// assert_eq!(&c.text()[..], b"ping");
/// dec.finish();
/// assert!(dec.next_item().is_none()); // a clean end
/// ```
///
/// Memory: the decoder holds the chunks fed and not yet decoded, plus at most `max_event_bytes`
/// of copied bytes for a frame that spans chunks. Feeding one chunk and then draining
/// `next_item` keeps the former to one chunk.
#[derive(Debug)]
pub struct Decoder {
    max_event_bytes: usize,
    /// Chunks fed but not yet started.
    queue: VecDeque<Bytes>,
    /// The chunk being decoded.
    cur: Bytes,
    /// Where scanning for the next line break resumes in `cur`.
    pos: usize,
    /// The current frame is `carry ++ cur[frame_start..pos]` (then an unfinished line).
    frame_start: usize,
    /// The part of the current frame that came from earlier chunks, copied.
    carry: BytesMut,
    /// Where the line being scanned starts, as an offset into the frame. Below `carry.len()`, the
    /// line began in an earlier chunk.
    line_start: usize,
    /// The frame so far ends with a CR that ended a chunk: LF may follow in the next chunk.
    cr_pending: bool,
    /// Nothing decoded yet and fewer than three bytes seen, all a prefix of the BOM.
    bom_pending: bool,
    block: Block,
    last_event_id: Bytes,
    retry: Option<u64>,
    finished: bool,
    /// An error or the end was reported; nothing more will be.
    done: bool,
}

/// The field lines seen since the last blank line. Ranges are offsets into the frame.
#[derive(Debug, Default)]
struct Block {
    /// A field line was seen: the frame is an event block, not a lone comment or blank line.
    open: bool,
    event_type: Option<Range<usize>>,
    data: Vec<Range<usize>>,
    id: Option<Range<usize>>,
    retry: Option<u64>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder with `max_event_bytes` = [`DEFAULT_MAX_EVENT_BYTES`] (1 MiB).
    pub fn new() -> Self {
        Decoder {
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            queue: VecDeque::new(),
            cur: Bytes::new(),
            pos: 0,
            frame_start: 0,
            carry: BytesMut::new(),
            line_start: 0,
            cr_pending: false,
            bom_pending: true,
            block: Block::default(),
            last_event_id: Bytes::new(),
            retry: None,
            finished: false,
            done: false,
        }
    }

    /// A decoder that fails with [`DecodeError::EventTooLarge`] once one event (counted in raw
    /// bytes, from its first line through its blank line, comments inside included) or one line
    /// outside an event exceeds `max_event_bytes`.
    ///
    /// # Errors
    ///
    /// [`LimitError`] unless `1 <= max_event_bytes <= MAX_EVENT_BYTES_CEILING` (64 MiB).
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Result<Self, LimitError> {
        if max_event_bytes == 0 || max_event_bytes > MAX_EVENT_BYTES_CEILING {
            return Err(LimitError {
                got: max_event_bytes,
                max: MAX_EVENT_BYTES_CEILING,
            });
        }
        Ok(Decoder {
            max_event_bytes,
            ..Decoder::new()
        })
    }

    /// The configured limit on one event's raw size, in bytes.
    pub fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }

    /// Appends a chunk of the stream. Chunks may split the stream anywhere, even inside a line
    /// break or the byte-order mark. Empty chunks, and chunks fed after [`finish`](Decoder::finish)
    /// or after an error, are ignored (so a caller that keeps feeding a failed decoder does not
    /// grow its memory).
    pub fn feed(&mut self, chunk: Bytes) {
        if !chunk.is_empty() && !self.finished && !self.done {
            if self.queue.capacity() == 0 {
                // Fed one chunk at a time and drained in between (the usual way), the queue
                // never holds more: room for one, not the four a first push makes.
                self.queue.reserve_exact(1);
            }
            self.queue.push_back(chunk);
        }
    }

    /// Marks the end of the stream. Afterwards [`next_item`](Decoder::next_item) yields what is
    /// left, then [`DecodeError::Truncated`] if the stream stopped inside an event or a line, then
    /// `None` for good.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// The last event ID string (the spec's, as a browser would send it in `Last-Event-ID` when
    /// reconnecting): set by an `id` field when its block ends with a blank line, whether or not
    /// the block dispatched an event, and kept across events. Empty if none.
    pub fn last_event_id(&self) -> &Bytes {
        &self.last_event_id
    }

    /// The reconnection time in milliseconds from the latest valid `retry` field decoded so far,
    /// if any. Per the spec it takes effect at once, even inside an unfinished event.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Bytes the decoder has copied and holds for a frame that spans chunks. Never more than
    /// [`max_event_bytes`](Decoder::max_event_bytes). Chunks fed and not yet decoded are not
    /// counted: they are the caller's memory.
    pub fn buffered_bytes(&self) -> usize {
        self.carry.len()
    }

    /// The next item, or `None` when more input is needed (or, after [`finish`](Decoder::finish),
    /// when the stream is over). Cheap to call in a poll loop: it only scans bytes not scanned
    /// before.
    ///
    /// # Errors
    ///
    /// [`DecodeError::EventTooLarge`] when an event outgrows `max_event_bytes`, and
    /// [`DecodeError::Truncated`] when the stream ended inside an event. Both are final.
    #[inline]
    pub fn next_item(&mut self) -> Option<Result<Item, DecodeError>> {
        if self.done {
            return None;
        }
        let out = self.step();
        if matches!(out, Some(Err(_))) {
            self.done = true;
        }
        out
    }

    fn step(&mut self) -> Option<Result<Item, DecodeError>> {
        loop {
            if self.bom_pending && !self.resolve_bom() {
                // Fewer than three bytes and all of them could still be a BOM: wait.
                self.pos = self.cur.len();
            } else if self.cr_pending && self.pos < self.cur.len() {
                // The line ended at the CR that ended the previous chunk; this chunk says
                // whether the break was CR or CRLF.
                let lf = usize::from(self.cur[self.pos] == b'\n');
                if let Some(out) = self.complete_line(self.pos + lf, 1 + lf) {
                    return Some(out);
                }
                continue;
            } else if self.pos < self.cur.len() {
                match memchr2(b'\n', b'\r', &self.cur[self.pos..]) {
                    Some(i) => {
                        let eol = self.pos + i;
                        if let Some(ev) = self.single_line_event(eol) {
                            return Some(Ok(Item::Event(ev)));
                        }
                        let end = if self.cur[eol] == b'\n' {
                            eol + 1
                        } else if eol + 1 == self.cur.len() {
                            // A CR ends the chunk: CR or CRLF? Decide with the next chunk.
                            self.cr_pending = true;
                            self.pos = self.cur.len();
                            continue;
                        } else if self.cur[eol + 1] == b'\n' {
                            eol + 2
                        } else {
                            eol + 1
                        };
                        if let Some(out) = self.complete_line(end, end - eol) {
                            return Some(out);
                        }
                        continue;
                    }
                    None => self.pos = self.cur.len(),
                }
            }

            // `cur` is used up: keep the unfinished frame and move to the next chunk.
            if let Err(e) = self.carry_over(self.frame_start, self.cur.len()) {
                return Some(Err(e));
            }
            self.frame_start = self.cur.len();
            match self.queue.pop_front() {
                Some(chunk) => {
                    self.cur = chunk;
                    self.pos = 0;
                    self.frame_start = 0;
                }
                None if self.finished => return self.end_of_stream(),
                None => return None,
            }
        }
    }

    /// The hot path: at the start of a frame, `data: ...\n\n` is an event by itself (what LLM
    /// APIs send thousands of times per response). Recognises it without going through the
    /// general line machinery; gives exactly what that machinery would. `eol` is the first CR or
    /// LF at or after `pos`.
    #[inline]
    fn single_line_event(&mut self, eol: usize) -> Option<Event> {
        let start = self.pos;
        let end = eol + 2;
        let fresh_frame = start == self.frame_start
            && self.line_start == 0
            && self.carry.is_empty()
            && !self.block.open;
        if !fresh_frame
            || self.cur.get(eol..end) != Some(b"\n\n")
            || end - start > self.max_event_bytes
        {
            return None;
        }
        let line = &self.cur[start..eol];
        let rest = line.strip_prefix(b"data:")?;
        let value = line.len() - rest.len() + usize::from(rest.first() == Some(&b' '));
        let raw = self.cur.slice(start..end);
        self.pos = end;
        self.frame_start = end;
        Some(Event {
            raw,
            event_type: None,
            data: item::Data::Line(value..eol - start),
            id: None,
            last_event_id: self.event_last_id(),
            retry: None,
        })
    }

    /// The last event ID for a new event: `None` when empty, as it is for most LLM streams, which
    /// saves a clone and a drop per event.
    #[inline]
    fn event_last_id(&self) -> Option<Bytes> {
        (!self.last_event_id.is_empty()).then(|| self.last_event_id.clone())
    }

    /// Looks at the first bytes of the stream. Returns false if more are needed to decide.
    fn resolve_bom(&mut self) -> bool {
        // Nothing has been decoded yet, so the frame is `carry ++ cur[pos..]` from byte 0.
        let seen = self.carry.len();
        let mut head = [0u8; 3];
        head[..seen].copy_from_slice(&self.carry);
        let more = (3 - seen).min(self.cur.len() - self.pos);
        head[seen..seen + more].copy_from_slice(&self.cur[self.pos..self.pos + more]);
        let have = seen + more;
        if head[..have] != BOM[..have] {
            self.bom_pending = false;
        } else if have == 3 {
            self.bom_pending = false;
            // The BOM stays in the first frame's raw bytes but is never part of a line.
            self.line_start = 3;
            self.pos += more;
        } else if self.finished && self.queue.is_empty() {
            self.bom_pending = false;
        } else {
            return false;
        }
        true
    }

    /// Copies `cur[from..to]` onto the carried frame, unless that would exceed the limit.
    fn carry_over(&mut self, from: usize, to: usize) -> Result<(), DecodeError> {
        if from >= to {
            return Ok(());
        }
        if self.carry.len() + (to - from) > self.max_event_bytes {
            return Err(self.too_large());
        }
        self.carry.extend_from_slice(&self.cur[from..to]);
        Ok(())
    }

    fn too_large(&mut self) -> DecodeError {
        // Free the memory now: the decoder is finished either way.
        self.carry = BytesMut::new();
        self.queue.clear();
        DecodeError::EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    /// The line starting at frame offset `line_start` ends just before `cur[end]`; its
    /// terminator is `term` bytes long.
    fn complete_line(&mut self, end: usize, term: usize) -> Option<Result<Item, DecodeError>> {
        self.cr_pending = false;
        let frame_end = if self.line_start < self.carry.len() {
            // The line began in an earlier chunk: move all of it into the carry so that it is
            // contiguous (the frame is being copied anyway).
            if let Err(e) = self.carry_over(self.frame_start, end) {
                return Some(Err(e));
            }
            self.frame_start = end;
            self.carry.len()
        } else {
            let frame_end = self.carry.len() + end - self.frame_start;
            if frame_end > self.max_event_bytes {
                return Some(Err(self.too_large()));
            }
            frame_end
        };
        self.pos = end;
        let line = self.line_start..frame_end - term;
        self.line_start = frame_end;

        let kind = classify(self.frame_bytes(line.clone()));
        let value = |at: usize| line.start + at..line.end;
        match kind {
            Line::Blank => return Some(Ok(self.dispatch(end))),
            Line::Comment(at) if !self.block.open => {
                // A comment outside an event is a frame of its own.
                let raw = self.take_frame(end);
                let text = raw.slice(value(at));
                return Some(Ok(Item::Comment(Comment {
                    raw,
                    text,
                    in_event: false,
                })));
            }
            Line::Comment(at) => {
                let text = self.frame_slice(value(at));
                return Some(Ok(Item::Comment(Comment {
                    raw: Bytes::new(),
                    text,
                    in_event: true,
                })));
            }
            Line::Data(at) => self.block.data.push(value(at)),
            Line::Event(at) => self.block.event_type = Some(value(at)),
            Line::Id(at) => self.block.id = Some(value(at)),
            Line::Retry(ms) => {
                if ms.is_some() {
                    self.retry = ms;
                    self.block.retry = ms;
                }
            }
            Line::Ignored => {}
        }
        self.block.open = true;
        None
    }

    /// Bytes at frame offsets `r`, which lie either wholly in the carry or wholly in `cur`.
    fn frame_bytes(&self, r: Range<usize>) -> &[u8] {
        let carried = self.carry.len();
        if r.start < carried {
            &self.carry[r]
        } else {
            &self.cur[self.frame_start + r.start - carried..self.frame_start + r.end - carried]
        }
    }

    /// Like [`frame_bytes`](Decoder::frame_bytes) but as `Bytes`: a slice of `cur`, or a copy
    /// of carried bytes.
    fn frame_slice(&self, r: Range<usize>) -> Bytes {
        let carried = self.carry.len();
        if r.start < carried {
            Bytes::copy_from_slice(&self.carry[r])
        } else {
            self.cur
                .slice(self.frame_start + r.start - carried..self.frame_start + r.end - carried)
        }
    }

    /// Ends the current frame at `cur[end]` and returns its bytes.
    fn take_frame(&mut self, end: usize) -> Bytes {
        let raw = if self.carry.is_empty() {
            self.cur.slice(self.frame_start..end)
        } else {
            // Already checked against the limit by `complete_line`.
            self.carry
                .extend_from_slice(&self.cur[self.frame_start..end]);
            self.carry.split().freeze()
        };
        self.frame_start = end;
        self.line_start = 0;
        raw
    }

    /// A blank line: the spec's "dispatch the event".
    fn dispatch(&mut self, end: usize) -> Item {
        let raw = self.take_frame(end);
        let block = &mut self.block;
        block.open = false;
        let event_type = block.event_type.take();
        let retry = block.retry.take();
        let id = block.id.take();
        if let Some(id) = &id {
            // The spec sets the last event ID even when no event is dispatched.
            self.last_event_id = raw.slice(id.clone());
        }
        if block.data.is_empty() {
            return Item::Skipped(Skipped { raw });
        }
        let data = join_data(&raw, &block.data);
        block.data.clear();
        Item::Event(Event {
            last_event_id: self.event_last_id(),
            raw,
            event_type,
            data,
            id,
            retry,
        })
    }

    /// `cur` and the queue are used up and the caller said there is no more.
    fn end_of_stream(&mut self) -> Option<Result<Item, DecodeError>> {
        if self.cr_pending {
            // Nothing follows the final CR, so it was a line break on its own.
            let end = self.cur.len();
            return self.complete_line(end, 1).or_else(|| self.end_of_stream());
        }
        self.done = true;
        if self.carry.is_empty() {
            return None;
        }
        let raw = self.carry.split().freeze();
        if raw[..] == BOM[..] {
            // An empty stream that only had a byte-order mark ended cleanly.
            return Some(Ok(Item::Skipped(Skipped { raw })));
        }
        Some(Err(DecodeError::Truncated { raw }))
    }
}

#[cfg(test)]
mod tests;
