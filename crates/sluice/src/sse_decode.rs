//! `sluice sse decode`: reads a raw server-sent events stream and prints one JSON object per
//! event, as the events arrive.
//!
//! Exit status: 0 when the stream ended cleanly, 3 when it ended inside an event (truncated),
//! 4 when an event exceeded `--max-event-bytes`, 1 on an I/O error, 2 on bad arguments.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_sse::{DecodeError, Decoder, Item, DEFAULT_MAX_EVENT_BYTES};

/// Exit status when the stream ended in the middle of an event.
pub const EXIT_TRUNCATED: i32 = 3;
/// Exit status when an event exceeded `--max-event-bytes`.
pub const EXIT_TOO_LARGE: i32 = 4;

/// `sluice sse ...` subcommands.
#[derive(Debug, Subcommand)]
pub enum SseCommand {
    /// Decode a raw SSE stream (stdin or FILE) into one JSON object per line, flushed per event:
    /// {"event":…,"data":…,"id":…,"retry":…}. Exits 3 if the stream ends inside an event, 4 if
    /// an event is larger than --max-event-bytes.
    Decode(DecodeArgs),
}

/// Arguments of `sluice sse decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The stream to read; stdin when absent or `-`.
    file: Option<PathBuf>,
    /// Also print comment lines (heartbeats) as {"comment": "..."}.
    #[arg(long)]
    comments: bool,
    /// Fail (exit 4) when one event exceeds this many bytes; at most 64 MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_EVENT_BYTES, value_parser = parse_max_event_bytes)]
    max_event_bytes: usize,
}

/// Rejects an out-of-range limit as a usage error (exit 2) with the decoder's own message.
fn parse_max_event_bytes(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    Decoder::with_max_event_bytes(n)
        .map(|_| n)
        .map_err(|e| e.to_string())
}

/// Runs an `sse` subcommand. Exits the process with [`EXIT_TRUNCATED`] or [`EXIT_TOO_LARGE`]
/// (after flushing stdout) when the stream is cut or an event too large.
///
/// # Errors
///
/// Reading the input or writing stdout failed (a closed stdout, as with `| head`, is not an
/// error: decoding just stops).
pub fn run(command: SseCommand) -> anyhow::Result<()> {
    match command {
        SseCommand::Decode(args) => {
            let input: Box<dyn Read> = match &args.file {
                Some(path) if path.as_os_str() != "-" => Box::new(
                    File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
                ),
                _ => Box::new(io::stdin().lock()),
            };
            let decoder = Decoder::with_max_event_bytes(args.max_event_bytes)?;
            let mut out = io::stdout().lock();
            match decode(input, &mut out, decoder, args.comments) {
                Ok(()) => Ok(()),
                Err(Failure::Decode(e)) => {
                    // Flush what was decoded before saying why the rest was not.
                    let _ = out.flush();
                    eprintln!("sluice: {e}");
                    std::process::exit(match e {
                        DecodeError::Truncated { .. } => EXIT_TRUNCATED,
                        DecodeError::EventTooLarge { .. } => EXIT_TOO_LARGE,
                    });
                }
                Err(Failure::Output(e)) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
                Err(Failure::Output(e)) => Err(e).context("cannot write to stdout"),
                Err(Failure::Input(e)) => Err(e).context("cannot read the input stream"),
            }
        }
    }
}

enum Failure {
    Decode(DecodeError),
    Input(io::Error),
    Output(io::Error),
}

/// Streams `input` through `decoder` into `out`. Reads whatever is available (a pipe returns
/// as soon as the writer wrote) so events print as they arrive rather than at the end.
fn decode(
    mut input: impl Read,
    out: &mut impl Write,
    mut decoder: Decoder,
    comments: bool,
) -> Result<(), Failure> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::Input(e)),
        };
        decoder.feed(Bytes::copy_from_slice(&buf[..n]));
        drain(&mut decoder, out, comments)?;
    }
    decoder.finish();
    drain(&mut decoder, out, comments)
}

fn drain(decoder: &mut Decoder, out: &mut impl Write, comments: bool) -> Result<(), Failure> {
    while let Some(item) = decoder.next_item() {
        let written = match item.map_err(Failure::Decode)? {
            Item::Event(ev) => write_line(out, &EventLine::new(&ev)),
            Item::Comment(c) if comments => write_line(
                out,
                &CommentLine {
                    comment: c.text_str(),
                },
            ),
            Item::Comment(_) | Item::Skipped(_) => continue,
        };
        written.map_err(Failure::Output)?;
    }
    Ok(())
}

/// One JSON object and a newline, flushed so a reader downstream sees it now.
fn write_line(out: &mut impl Write, line: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The event as a browser's EventSource would report it: `event` defaults to "message", `id` is
/// the last event ID (which persists across events) or null when empty, `retry` is the
/// reconnection time this event's block set, or null. Invalid UTF-8 shows as U+FFFD.
#[derive(Serialize)]
struct EventLine<'a> {
    event: Cow<'a, str>,
    data: Cow<'a, str>,
    id: Option<Cow<'a, str>>,
    retry: Option<u64>,
}

impl<'a> EventLine<'a> {
    fn new(ev: &'a sluice_sse::Event) -> Self {
        EventLine {
            event: ev.event_type_str(),
            data: ev.data_str(),
            id: (!ev.last_event_id().is_empty()).then(|| ev.last_event_id_str()),
            retry: ev.retry(),
        }
    }
}

#[derive(Serialize)]
struct CommentLine<'a> {
    comment: Cow<'a, str>,
}
