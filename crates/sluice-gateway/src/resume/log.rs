//! One resumable stream's log: its events (each with its `id:` line, as sent), who reads it,
//! and whether its generation is still running.

use std::collections::VecDeque;
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::StreamId;

/// A resumable stream, shared by its pump and its readers.
pub(crate) struct Stream {
    pub(crate) id: StreamId,
    /// The virtual key that made it (`None`: a route without keys); only it may read.
    pub(crate) owner: Option<Box<str>>,
    pub(crate) keep: Duration,
    pub(crate) max_bytes: usize,
    /// A background response's: it runs to its end with no reader (bounded by its total
    /// timeout), not for `keep`.
    pub(crate) background: bool,
    pub(crate) inner: Mutex<Inner>,
}

/// What the pump and the readers change.
pub(crate) struct Inner {
    /// Events oldest first; the first is `first_seq`.
    events: VecDeque<Bytes>,
    first_seq: u64,
    bytes: usize,
    /// The generation has ended (completed, failed, or dropped after `keep`).
    pub(crate) ended: bool,
    pub(crate) ended_at: Option<Instant>,
    /// Set by a cancel: the pump drops the relay at its next poll.
    pub(crate) cancelled: bool,
    /// A background response whose attempts failed before any stream: the error body.
    pub(crate) failure: Option<bytes::Bytes>,
    /// The attached readers: an id each, the next event it wants, its waker.
    readers: Vec<ReaderSlot>,
    next_reader: u64,
    /// When the last reader left (while the generation ran).
    pub(crate) detached_at: Option<Instant>,
    /// Heartbeats and upstream comments: a count, and the last one's bytes.
    pings: u64,
    last_ping: Bytes,
    /// The pump's waker: a reader that frees room, leaves, or a cancel wakes it.
    pump: Option<Waker>,
    /// With Redis: where the events are copied, in order, for other instances.
    mirror: Option<tokio::sync::mpsc::Sender<sluice_state::LogEntry>>,
}

struct ReaderSlot {
    id: u64,
    next_seq: u64,
    pings_seen: u64,
    waker: Option<Waker>,
}

/// A poll's view of a stream.
pub(crate) struct Snapshot {
    pub(crate) events: Vec<Bytes>,
    pub(crate) ended: bool,
    pub(crate) cancelled: bool,
    pub(crate) failure: Option<Bytes>,
}

/// What a reader gets next.
pub(crate) enum Next {
    Event(Bytes),
    Ping(Bytes),
    End,
    Wait,
}

/// Why a reader could not attach at the place it asked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AttachError {
    /// The event after the one asked was dropped from the log (it was full, nobody read).
    Evicted { first_kept: u64 },
    /// The id asked is past the last event made.
    Ahead,
}

impl Stream {
    pub(crate) fn new(
        id: StreamId,
        owner: Option<Box<str>>,
        keep: Duration,
        max_bytes: usize,
        background: bool,
    ) -> Self {
        Stream {
            id,
            owner,
            keep,
            max_bytes,
            background,
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                first_seq: 0,
                bytes: 0,
                ended: false,
                ended_at: None,
                cancelled: false,
                failure: None,
                readers: Vec::new(),
                next_reader: 0,
                detached_at: Some(Instant::now()),
                pings: 0,
                last_ping: Bytes::new(),
                pump: None,
                mirror: None,
            }),
        }
    }

    /// The id as text (`x-sluice-stream-id`, event ids).
    pub(crate) fn id_str(&self) -> &str {
        std::str::from_utf8(&self.id).unwrap_or("-")
    }

    /// A new reader from event `from_seq` on.
    pub(crate) fn attach(&self, from_seq: u64) -> Result<u64, AttachError> {
        let mut g = self.inner.lock();
        let next = g.first_seq + g.events.len() as u64;
        if from_seq < g.first_seq {
            return Err(AttachError::Evicted {
                first_kept: g.first_seq,
            });
        }
        if from_seq > next {
            return Err(AttachError::Ahead);
        }
        let id = g.next_reader;
        g.next_reader += 1;
        let pings_seen = g.pings;
        g.readers.push(ReaderSlot {
            id,
            next_seq: from_seq,
            pings_seen,
            waker: None,
        });
        g.detached_at = None;
        if let Some(w) = g.pump.take() {
            w.wake();
        }
        Ok(id)
    }

    /// A reader left: the last one leaving a running generation detaches it.
    pub(crate) fn detach(&self, reader: u64) {
        let mut g = self.inner.lock();
        g.readers.retain(|r| r.id != reader);
        if g.readers.is_empty() && !g.ended {
            g.detached_at = Some(Instant::now());
        }
        if let Some(w) = g.pump.take() {
            w.wake();
        }
    }

    /// What `reader` gets next; `Wait` registers its waker.
    pub(crate) fn next(&self, reader: u64, waker: &Waker) -> Next {
        let mut g = self.inner.lock();
        let Inner {
            events,
            first_seq,
            readers,
            ended,
            pings,
            last_ping,
            pump,
            bytes,
            ..
        } = &mut *g;
        let Some(slot) = readers.iter_mut().find(|r| r.id == reader) else {
            return Next::End;
        };
        let idx = slot.next_seq.saturating_sub(*first_seq);
        if let Some(b) = events.get(idx as usize) {
            slot.next_seq += 1;
            let b = b.clone();
            // The pump may be waiting for this reader to free room.
            if *bytes >= self.max_bytes {
                if let Some(w) = pump.take() {
                    w.wake();
                }
            }
            return Next::Event(b);
        }
        if *ended {
            return Next::End;
        }
        if slot.pings_seen != *pings {
            slot.pings_seen = *pings;
            return Next::Ping(last_ping.clone());
        }
        match &slot.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => slot.waker = Some(waker.clone()),
        }
        Next::Wait
    }

    pub(crate) fn set_mirror(&self, tx: tokio::sync::mpsc::Sender<sluice_state::LogEntry>) {
        self.inner.lock().mirror = Some(tx);
    }

    /// Copies an entry to Redis. A mirror that cannot keep up is dropped whole (its readers
    /// elsewhere see the log stop), never waited for.
    pub(crate) fn mirror(&self, e: sluice_state::LogEntry) {
        let mut g = self.inner.lock();
        if let Some(tx) = &g.mirror {
            if tx.try_send(e).is_err() {
                tracing::warn!(
                    stream = self.id_str(),
                    "the resumable stream's copy to Redis fell behind; other instances will \
                     not serve the rest"
                );
                g.mirror = None;
            }
        }
    }

    /// Appends one event (its bytes with the `id:` line) and wakes the readers; drops the
    /// oldest events no reader still needs while the log is over its bound.
    pub(crate) fn push(&self, event: Bytes) {
        let mut g = self.inner.lock();
        g.bytes += event.len();
        g.events.push_back(event);
        g.evict(self.max_bytes);
        g.wake_readers();
    }

    /// A heartbeat or an upstream comment for the attached readers (not logged).
    pub(crate) fn ping(&self, bytes: Bytes) {
        let mut g = self.inner.lock();
        g.pings += 1;
        g.last_ping = bytes;
        g.wake_readers();
    }

    /// The generation is over.
    pub(crate) fn end(&self) {
        let mut g = self.inner.lock();
        g.ended = true;
        g.ended_at = Some(Instant::now());
        g.wake_readers();
    }

    /// Bytes the log holds now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// Every event the log still holds, newest last, and whether the generation ended,
    /// was cancelled, or failed before its stream (a poll's answer).
    pub(crate) fn snapshot(&self) -> Snapshot {
        let g = self.inner.lock();
        Snapshot {
            events: g.events.iter().cloned().collect(),
            ended: g.ended,
            cancelled: g.cancelled,
            failure: g.failure.clone(),
        }
    }

    /// A background response's attempts failed before any stream: its error, and the end.
    pub(crate) fn fail(&self, body: Bytes) {
        let mut g = self.inner.lock();
        g.failure = Some(body);
        g.ended = true;
        g.ended_at = Some(Instant::now());
        g.wake_readers();
    }

    /// Asks the pump to drop the generation (a background response's cancel).
    pub(crate) fn cancel(&self) {
        let mut g = self.inner.lock();
        // An ended generation stays what it was (completed, failed).
        if g.ended {
            return;
        }
        g.cancelled = true;
        if let Some(w) = g.pump.take() {
            w.wake();
        }
    }
}

impl Inner {
    fn wake_readers(&mut self) {
        for r in &mut self.readers {
            if let Some(w) = r.waker.take() {
                w.wake();
            }
        }
    }

    /// Drops the oldest events while over `max` and no attached reader still needs them.
    fn evict(&mut self, max: usize) {
        let keep_from = self
            .readers
            .iter()
            .map(|r| r.next_seq)
            .min()
            .unwrap_or(u64::MAX);
        while self.bytes > max && self.first_seq < keep_from && self.events.len() > 1 {
            if let Some(b) = self.events.pop_front() {
                self.bytes -= b.len();
                self.first_seq += 1;
            }
        }
    }

    /// Whether the log is full with events an attached reader has not read: the pump must
    /// wait for it.
    pub(crate) fn full(&mut self, max: usize) -> bool {
        // What the readers have read since the last push may go now.
        self.evict(max.saturating_sub(1));
        let end = self.first_seq + self.events.len() as u64;
        self.bytes >= max && self.readers.iter().any(|r| r.next_seq < end)
    }

    /// The pump's waker, to be woken by a reader or a cancel.
    pub(crate) fn set_pump(&mut self, w: &Waker) {
        match &self.pump {
            Some(p) if p.will_wake(w) => {}
            _ => self.pump = Some(w.clone()),
        }
    }

    pub(crate) fn has_readers(&self) -> bool {
        !self.readers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn stream(max: usize) -> Stream {
        Stream::new([b'a'; 32], None, Duration::from_secs(1), max, false)
    }

    fn ev(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn a_reader_gets_every_event_once_in_order_then_the_end() {
        let s = stream(1 << 20);
        let r = s.attach(0).unwrap();
        s.push(ev("a"));
        s.push(ev("b"));
        let w = Waker::noop();
        let mut got = Vec::new();
        while let Next::Event(b) = s.next(r, w) {
            got.push(b);
        }
        assert_eq!(got, [ev("a"), ev("b")]);
        assert!(matches!(s.next(r, w), Next::Wait));
        s.end();
        assert!(matches!(s.next(r, w), Next::End));
        // A late reader from the middle.
        let r2 = s.attach(1).unwrap();
        assert!(matches!(s.next(r2, w), Next::Event(b) if b == ev("b")));
        assert_eq!(s.attach(3), Err(AttachError::Ahead));
    }

    #[test]
    fn without_readers_the_oldest_go_and_asking_for_them_is_refused() {
        let s = stream(10);
        for e in ["aaaa", "bbbb", "cccc", "dddd"] {
            s.push(ev(e));
        }
        // 16 bytes > 10: the oldest went until it fit (the newest always stays).
        assert_eq!(s.bytes(), 8);
        assert_eq!(s.attach(0), Err(AttachError::Evicted { first_kept: 2 }));
        assert!(s.attach(2).is_ok());
    }

    #[test]
    fn a_reader_keeps_what_it_has_not_read() {
        let s = stream(10);
        let r = s.attach(0).unwrap();
        for e in ["aaaa", "bbbb", "cccc", "dddd"] {
            s.push(ev(e));
        }
        assert_eq!(s.bytes(), 16);
        assert!(s.inner.lock().full(10));
        let w = Waker::noop();
        assert!(matches!(s.next(r, w), Next::Event(b) if b == ev("aaaa")));
        s.detach(r);
        assert!(s.inner.lock().detached_at.is_some());
        s.push(ev("eeee"));
        assert_eq!(s.bytes(), 8);
    }
}
