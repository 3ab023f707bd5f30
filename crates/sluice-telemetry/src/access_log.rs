//! The access log: one line per request, written off the request path.
//!
//! A request formats its line into a buffer and hands it to a bounded channel with `try_send`;
//! one writer thread (owned by the gateway, joined at shutdown) drains the channel every 20 ms
//! while lines come (up to 320 ms apart when idle) into a buffered sink and flushes; no request
//! ever wakes it. A request never waits for the
//! sink: when it cannot keep up (a full disk, a blocked pipe), lines are dropped and counted
//! (`sluice_access_log_dropped_total`), and requests go on at full speed.
//!
//! NOTE: a thread, not a tokio task: writing to a file or a pipe blocks, and a blocked write
//! must never hold a runtime worker. Alternatives rejected: `tracing`'s fmt layer (writes
//! inline on the request's thread, under a lock), and `tracing-appender`'s non-blocking writer
//! (per-event formatting through `tracing`'s machinery, which costs more than the line itself).

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

pub use sluice_config::{AccessLogSink, LogFormat, DEFAULT_QUEUE};

/// A client-supplied value logged at most this long (then marked as cut).
pub const MAX_VALUE: usize = crate::untrusted::LOG_CAP;

/// Counters of the access log, for metrics.
#[derive(Debug, Default)]
pub struct AccessLogStats {
    pub written: AtomicU64,
    pub dropped: AtomicU64,
}

/// The sending side, shared by every request.
#[derive(Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    format: LogFormat,
    pub stats: Arc<AccessLogStats>,
    writer: Option<std::thread::JoinHandle<()>>,
}

// === impl AccessLog ===

impl AccessLog {
    /// Opens the sink and starts the writer thread.
    ///
    /// # Errors
    /// The file cannot be opened for appending.
    pub fn start(
        sink: &AccessLogSink,
        format: LogFormat,
        queue: usize,
    ) -> std::io::Result<AccessLog> {
        let stats = Arc::new(AccessLogStats::default());
        let out: Box<dyn std::io::Write + Send> = match sink {
            AccessLogSink::Off => {
                return Ok(AccessLog {
                    tx: None,
                    format,
                    stats,
                    writer: None,
                })
            }
            AccessLogSink::Stdout => Box::new(std::io::stdout()),
            AccessLogSink::File(p) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(queue.max(1));
        let s = stats.clone();
        let writer = std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || write_lines(rx, out, &s))?;
        Ok(AccessLog {
            tx: Some(tx),
            format,
            stats,
            writer: Some(writer),
        })
    }

    /// Whether lines are written at all (`off` formats nothing).
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// A line builder in this log's format.
    pub fn line(&self) -> Line {
        Line::new(self.format)
    }

    /// Hands a finished line to the writer; never waits.
    pub fn send(&self, line: Line) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(line.finish()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How long dropping the log waits for the writer to write what is queued.
const FLUSH_ON_DROP: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for AccessLog {
    fn drop(&mut self) {
        // Closing the channel ends the writer once it has written what is queued. A sink that
        // blocks forever must not hold the process at exit: wait a bounded time, then leave
        // the thread to the process's end.
        self.tx = None;
        if let Some(w) = self.writer.take() {
            // It may be in a nap of up to `IDLE_INTERVAL`: wake it to see the channel closed.
            w.thread().unpark();
            let step = std::time::Duration::from_millis(5);
            let mut waited = std::time::Duration::ZERO;
            while !w.is_finished() && waited < FLUSH_ON_DROP {
                std::thread::park_timeout(step);
                waited += step;
            }
            if w.is_finished() {
                let _ = w.join();
            }
        }
    }
}

/// How often the writer looks for lines while they come. It is never woken by a request: a
/// thread blocked in `recv` would be woken (a futex call and a context switch) for every line,
/// which cost as much as the rest of a small call; a timed nap makes it at most 50 wake-ups a
/// second whatever the request rate, and a line reaches the sink within this long.
const WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);
/// The longest nap: after a look that found nothing the nap doubles up to this, so an idle
/// gateway wakes its writer a few times a second.
const IDLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(320);

fn write_lines(rx: Receiver<String>, out: Box<dyn std::io::Write + Send>, stats: &AccessLogStats) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut nap = WRITE_INTERVAL;
    loop {
        std::thread::park_timeout(nap);
        let mut n = 0u64;
        let mut ok = true;
        let mut closed = false;
        loop {
            match rx.try_recv() {
                Ok(line) => {
                    ok &= out.write_all(line.as_bytes()).is_ok();
                    n += 1;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        nap = if n > 0 {
            WRITE_INTERVAL
        } else {
            (nap * 2).min(IDLE_INTERVAL)
        };
        if n > 0 {
            ok &= out.flush().is_ok();
            if ok {
                stats.written.fetch_add(n, Ordering::Relaxed);
            } else {
                stats.dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
        if closed {
            return;
        }
    }
}

/// One line being formatted.
pub struct Line {
    buf: String,
    format: LogFormat,
    first: bool,
}

// === impl Line ===

impl Line {
    fn new(format: LogFormat) -> Line {
        let mut buf = String::with_capacity(512);
        if format == LogFormat::Json {
            buf.push('{');
        }
        Line {
            buf,
            format,
            first: true,
        }
    }

    // This and the field methods are inlined into the line's writer, where each key is a
    // literal: its bytes are copied by moves of a known size instead of a `memcpy` call each
    // (a line has some twenty fields).
    #[inline(always)]
    fn key(&mut self, k: &str) {
        match self.format {
            LogFormat::Text => {
                if !self.first {
                    self.buf.push(' ');
                }
                self.buf.push_str(k);
                self.buf.push('=');
            }
            LogFormat::Json => {
                if !self.first {
                    self.buf.push(',');
                }
                self.buf.push('"');
                self.buf.push_str(k);
                self.buf.push_str("\":");
            }
        }
        self.first = false;
    }

    /// A string field holding client-supplied text: escaped and capped by the rule of
    /// [`crate::untrusted::Untrusted`] (`"xxxx…[cut N bytes]"`), so it forges no field and
    /// no line, and a 10 MB value makes no 10 MB line.
    #[inline(always)]
    pub fn str(&mut self, k: &str, v: &str) -> &mut Line {
        self.key(k);
        match self.format {
            LogFormat::Text => {
                if !crate::untrusted::push_plain(&mut self.buf, v) {
                    let _ = write!(self.buf, "{}", crate::untrusted::Untrusted::new(v));
                }
            }
            LogFormat::Json => {
                let (head, cut) = crate::untrusted::split_at_most(v, MAX_VALUE);
                let mut s = serde_json::to_string(head).unwrap_or_default();
                if cut > 0 {
                    s.insert_str(s.len() - 1, &format!("…[cut {cut} bytes]"));
                }
                self.buf.push_str(&s);
            }
        }
        self
    }

    /// A string field of the gateway's own (a route or upstream name, an end reason): written
    /// as it is in text, quoted in JSON.
    #[inline(always)]
    pub fn word(&mut self, k: &str, v: &str) -> &mut Line {
        self.key(k);
        match self.format {
            LogFormat::Text => self.buf.push_str(if v.is_empty() { "-" } else { v }),
            LogFormat::Json => {
                self.buf.push('"');
                self.buf.push_str(v);
                self.buf.push('"');
            }
        }
        self
    }

    /// A message of the gateway's that may quote client input (an error): escaped, at most
    /// 1 KiB.
    pub fn message(&mut self, k: &str, v: &str) -> &mut Line {
        self.key(k);
        let shown = crate::untrusted::Untrusted::message(v).to_string();
        match self.format {
            LogFormat::Text => self.buf.push_str(&shown),
            LogFormat::Json => {
                let inner = shown
                    .strip_prefix('"')
                    .and_then(|x| x.strip_suffix('"'))
                    .unwrap_or(&shown);
                self.buf.push('"');
                self.buf.push_str(inner);
                self.buf.push('"');
            }
        }
        self
    }

    /// A whole number.
    #[inline(always)]
    pub fn u64(&mut self, k: &str, v: u64) -> &mut Line {
        self.key(k);
        push_u64(&mut self.buf, v);
        self
    }

    /// A number of milliseconds, rounded to 3 significant decimals (`1.14`, not
    /// `1.1432280000000001`).
    #[inline(always)]
    pub fn ms(&mut self, k: &str, d: std::time::Duration) -> &mut Line {
        self.key(k);
        push_ms(&mut self.buf, d);
        self
    }

    /// A boolean.
    #[inline(always)]
    pub fn bool(&mut self, k: &str, v: bool) -> &mut Line {
        self.key(k);
        self.buf.push_str(if v { "true" } else { "false" });
        self
    }

    /// The time now, RFC 3339 in UTC with milliseconds.
    #[inline(always)]
    pub fn now(&mut self, k: &str) -> &mut Line {
        self.key(k);
        let json = self.format == LogFormat::Json;
        if json {
            self.buf.push('"');
        }
        push_now(&mut self.buf);
        if json {
            self.buf.push('"');
        }
        self
    }

    /// An IP address (the client's).
    #[inline(always)]
    pub fn ip(&mut self, k: &str, ip: std::net::IpAddr) -> &mut Line {
        self.key(k);
        let json = self.format == LogFormat::Json;
        if json {
            self.buf.push('"');
        }
        push_ip(&mut self.buf, ip);
        if json {
            self.buf.push('"');
        }
        self
    }

    /// A field of the gateway's own written by `write` (no spaces, quotes or control
    /// characters in it): as it is in text, quoted in JSON.
    #[inline(always)]
    pub fn own(&mut self, k: &str, write: impl FnOnce(&mut String)) -> &mut Line {
        self.key(k);
        let json = self.format == LogFormat::Json;
        if json {
            self.buf.push('"');
        }
        write(&mut self.buf);
        if json {
            self.buf.push('"');
        }
        self
    }

    fn finish(mut self) -> String {
        if self.format == LogFormat::Json {
            self.buf.push('}');
        }
        self.buf.push('\n');
        self.buf
    }
}

/// Appends `v` in decimal, without going through `fmt` (a log line holds a dozen numbers).
pub fn push_u64(buf: &mut String, v: u64) {
    buf.push_str(itoa::Buffer::new().format(v));
}

/// Appends a duration in milliseconds with 3 significant digits at most: `1.14`, `23.5`,
/// `1234` (rounded half up, from the nanoseconds).
pub fn push_ms(buf: &mut String, d: std::time::Duration) {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if nanos >= 100_000_000 {
        push_u64(buf, nanos.saturating_add(500_000) / 1_000_000);
    } else if nanos >= 10_000_000 {
        push_fixed(buf, (nanos + 50_000) / 100_000, 1);
    } else {
        push_fixed(buf, (nanos + 5_000) / 10_000, 2);
    }
}

/// Appends `scaled / 10^decimals` with exactly `decimals` digits after the point (1 or more;
/// callers write 1 or 2) and at least one before it.
///
/// `scaled`'s digits are formatted once and the point put between them: a log line holds half
/// a dozen such numbers, and formatting the two parts apart (two `itoa` calls and a division)
/// cost a third more.
pub fn push_fixed(buf: &mut String, scaled: u64, decimals: u32) {
    let decimals = decimals as usize;
    let mut b = itoa::Buffer::new();
    let digits = b.format(scaled);
    if digits.len() > decimals {
        let (whole, fraction) = digits.split_at(digits.len() - decimals);
        buf.push_str(whole);
        buf.push('.');
        buf.push_str(fraction);
    } else {
        buf.push_str("0.");
        for _ in digits.len()..decimals {
            buf.push('0');
        }
        buf.push_str(digits);
    }
}

thread_local! {
    /// The `YYYY-MM-DDTHH:MM:SS` of the current second, formatted once a second per thread.
    static SECOND: std::cell::RefCell<(u64, String)> = const {
        std::cell::RefCell::new((u64::MAX, String::new()))
    };
}

/// Appends the time now, RFC 3339 in UTC with milliseconds (`2026-12-01T03:41:00.567Z`).
fn push_now(buf: &mut String) {
    let now = std::time::SystemTime::now();
    let since = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    SECOND.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let t = humantime::format_rfc3339_seconds(whole).to_string();
            c.1 = t.trim_end_matches('Z').to_string();
            c.0 = secs;
        }
        buf.push_str(&c.1);
    });
    buf.push('.');
    let ms = since.subsec_millis();
    if ms < 100 {
        buf.push('0');
    }
    if ms < 10 {
        buf.push('0');
    }
    push_u64(buf, u64::from(ms));
    buf.push('Z');
}

/// Appends `ip` as text; IPv4 without going through `fmt` (once or twice per request).
pub fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_u64(out, u64::from(octet));
            }
        }
        IpAddr::V6(_) => {
            use std::fmt::Write as _;
            let _ = write!(out, "{ip}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn text(f: impl FnOnce(&mut Line)) -> String {
        let mut l = Line::new(LogFormat::Text);
        f(&mut l);
        l.finish()
    }

    #[test]
    fn client_values_cannot_forge_fields_or_lines() {
        let s = text(|l| {
            l.str("request_id", "a status=999")
                .str("model", "gpt\nfake=1 \u{1b}[31m");
        });
        assert_eq!(
            s,
            "request_id=\"a status=999\" model=\"gpt\\nfake=1 \\u{1b}[31m\"\n"
        );
        let mut j = Line::new(LogFormat::Json);
        j.str("model", "a\"b\nc");
        let v: serde_json::Value = serde_json::from_str(j.finish().trim()).unwrap();
        assert_eq!(v["model"], "a\"b\nc");
        assert_eq!(s.lines().count(), 1);
    }

    #[test]
    fn long_values_are_cut_and_marked() {
        let long = "x".repeat(10_000);
        let s = text(|l| {
            l.str("model", &long);
        });
        assert!(s.len() < 300, "{}", s.len());
        assert!(s.contains("…[cut 9744 bytes]"), "{s}");
        let mut j = Line::new(LogFormat::Json);
        j.str("model", &long).u64("status", 200);
        let v: serde_json::Value = serde_json::from_str(j.finish().trim()).unwrap();
        assert!(v["model"].as_str().unwrap().ends_with("…[cut 9744 bytes]"));
    }

    #[test]
    fn numbers_are_rounded() {
        let s = text(|l| {
            l.ms("a", Duration::from_nanos(1_143_228))
                .ms("b", Duration::from_micros(23_456))
                .ms("c", Duration::from_millis(1234));
        });
        assert_eq!(s, "a=1.14 b=23.5 c=1234\n");
        let s = text(|l| {
            l.ms("a", Duration::from_nanos(4_999))
                .ms("b", Duration::from_nanos(1_005_000))
                .ms("c", Duration::from_micros(99_960))
                .ms("d", Duration::from_micros(9_999))
                .ms("e", Duration::ZERO)
                .u64("f", u64::MAX);
        });
        assert_eq!(
            s,
            "a=0.00 b=1.01 c=100.0 d=10.00 e=0.00 f=18446744073709551615\n"
        );
    }

    /// How `push_fixed` wrote a number before it had its own digit loop: the integer part,
    /// the point, the fraction padded with zeros.
    fn fixed_by_parts(scaled: u64, decimals: u32) -> String {
        let unit = 10u64.pow(decimals);
        format!(
            "{}.{:0width$}",
            scaled / unit,
            scaled % unit,
            width = decimals as usize
        )
    }

    #[test]
    fn fixed_point_numbers_are_written_as_by_parts() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut samples = vec![0, 1, 9, 10, 99, 100, 101, 999, 1000, 1001, u64::MAX];
        for _ in 0..20_000 {
            // xorshift, over every magnitude.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push(x >> (x % 64));
        }
        for decimals in [1, 2, 3, 6, 19] {
            for &n in &samples {
                let mut s = String::from("a=");
                push_fixed(&mut s, n, decimals);
                assert_eq!(s[2..], fixed_by_parts(n, decimals), "{n} {decimals}");
            }
        }
    }

    #[test]
    fn the_timestamp_is_rfc3339_with_milliseconds() {
        let s = text(|l| {
            l.now("ts");
        });
        let ts = s.trim().strip_prefix("ts=").unwrap();
        assert_eq!(ts.len(), "2026-12-01T03:41:00.567Z".len(), "{ts}");
        let parsed = humantime::parse_rfc3339(ts).unwrap();
        let age = std::time::SystemTime::now().duration_since(parsed).unwrap();
        assert!(age < Duration::from_secs(5), "{ts}");
        let mut j = Line::new(LogFormat::Json);
        j.now("ts").ip("ip", "10.1.2.3".parse().unwrap());
        let v: serde_json::Value = serde_json::from_str(j.finish().trim()).unwrap();
        assert_eq!(v["ip"], "10.1.2.3");
        assert!(v["ts"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn a_blocked_sink_drops_lines_instead_of_waiting() {
        // A pipe nobody reads: the writer blocks as soon as the pipe's buffer is full.
        let (reader, writer) = std::io::pipe().unwrap();
        let stats = Arc::new(AccessLogStats::default());
        let (tx, rx) = std::sync::mpsc::sync_channel(DEFAULT_QUEUE);
        let s = stats.clone();
        let _w = std::thread::spawn(move || write_lines(rx, Box::new(writer), &s));
        let log = AccessLog {
            tx: Some(tx),
            format: LogFormat::Text,
            stats: stats.clone(),
            writer: None,
        };
        let t0 = tokio::time::Instant::now();
        let n = 200_000u64;
        for i in 0..n {
            let mut l = log.line();
            l.u64("i", i).str("pad", &"x".repeat(100));
            log.send(l);
        }
        // Never waited on the sink: all sends returned at once, and the excess was counted.
        assert!(t0.elapsed() < Duration::from_secs(5));
        let dropped = stats.dropped.load(Ordering::Relaxed);
        assert!(dropped > n / 2, "{dropped} dropped of {n}");
        drop(reader);
    }
}

/// `sluice_access_log_lines_total{outcome}`: lines written and dropped, read at scrape time.
#[derive(Debug)]
pub struct AccessLogCollector(pub Arc<AccessLogStats>);

impl prometheus_client::collector::Collector for AccessLogCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        let mut m = encoder.encode_descriptor(
            "access_log_lines",
            "Access log lines by outcome: written, or dropped because the sink could not keep up",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (outcome, n) in [
            ("written", self.0.written.load(Ordering::Relaxed)),
            ("dropped", self.0.dropped.load(Ordering::Relaxed)),
        ] {
            ConstCounter::new(n).encode(m.encode_family(&[("outcome", outcome)])?)?;
        }
        Ok(())
    }
}
