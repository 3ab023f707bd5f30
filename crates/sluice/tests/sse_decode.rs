//! `sluice sse decode` end to end: the built binary on stdin (and on the guide's file).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Runs `sluice sse decode ARGS` with `input` on stdin.
fn decode(args: &[&str], input: &[u8]) -> Output {
    let mut child = sluice()
        .args(["sse", "decode"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait for sluice")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

#[test]
fn lf_crlf_and_cr_streams_print_the_same_events() {
    let want = concat!(
        r#"{"event":"message","data":"a\nb","id":null,"retry":null}"#,
        "\n",
        r#"{"event":"done","data":"","id":"7","retry":1000}"#,
        "\n",
    );
    for eol in ["\n", "\r\n", "\r"] {
        let input =
            "data: a\ndata: b\n\nevent: done\nid: 7\nretry: 1000\ndata:\n\n".replace('\n', eol);
        let out = decode(&[], input.as_bytes());
        assert_eq!(out.status.code(), Some(0), "{eol:?}");
        assert_eq!(stdout(&out), want, "{eol:?}");
    }
}

#[test]
fn comments_only_with_the_flag() {
    let input = b": ping\ndata: x\n\n";
    let event = "{\"event\":\"message\",\"data\":\"x\",\"id\":null,\"retry\":null}\n";
    assert_eq!(stdout(&decode(&[], input)), event);
    let out = decode(&["--comments"], input);
    assert_eq!(stdout(&out), format!("{{\"comment\":\"ping\"}}\n{event}"));
}

#[test]
fn truncated_stream_exits_3_after_printing_complete_events() {
    let out = decode(&[], b"data: whole\n\ndata: half");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        stdout(&out),
        "{\"event\":\"message\",\"data\":\"whole\",\"id\":null,\"retry\":null}\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ended in the middle of an event"),
        "{stderr}"
    );
}

#[test]
fn oversized_event_exits_4() {
    let out = decode(&["--max-event-bytes", "16"], b"data: 0123456789abcdef\n\n");
    assert_eq!(out.status.code(), Some(4));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("16-byte limit"), "{stderr}");
}

#[test]
fn out_of_range_limit_is_a_usage_error() {
    let out = decode(&["--max-event-bytes", "0"], b"");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn invalid_utf8_prints_replacement_characters() {
    let out = decode(&[], b"data: \xFF!\n\n");
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("\"data\":\"\u{FFFD}!\""));
}

#[test]
fn events_print_as_they_arrive() {
    let mut child = sluice()
        .args(["sse", "decode"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.expect("read stdout")).is_err() {
                break;
            }
        }
    });
    // The first event must come out while stdin is still open.
    stdin.write_all(b"data: first\n\n").expect("write");
    stdin.flush().expect("flush");
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("first event printed before the input ended");
    assert!(first.contains("\"data\":\"first\""), "{first}");
    stdin.write_all(b"data: second\n\n").expect("write");
    drop(stdin);
    let second = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("second event");
    assert!(second.contains("\"data\":\"second\""), "{second}");
    assert!(child.wait().expect("wait").success());
    reader.join().expect("reader thread");
}

/// The guide's `sluice sse decode` example: the input it shows is the file it names, and the
/// output it shows is what the binary prints.
#[test]
fn readme_example_is_true() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let section = std::fs::read_to_string(root.join("docs/guide/src/sse-decode.md"))
        .expect("docs/guide/src/sse-decode.md");
    let block = |lang: &str| {
        let start = section
            .find(&format!("```{lang}\n"))
            .unwrap_or_else(|| panic!("a ```{lang} block"))
            + lang.len()
            + 4;
        let len = section[start..].find("```").expect("closing fence");
        section[start..start + len].to_string()
    };
    let file = "crates/sluice/tests/data/chat.sse";
    assert!(section.contains(&format!("sse decode --comments {file}")));
    let input = std::fs::read_to_string(root.join(file)).expect("example file");
    assert_eq!(block("text"), input, "guide input differs from {file}");

    let out = sluice()
        .args(["sse", "decode", "--comments"])
        .arg(root.join(file))
        .output()
        .expect("run sluice");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), block("json"), "guide output differs");
}
