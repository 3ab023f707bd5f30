use super::*;

fn parse(input: &[u8], head_request: bool) -> (Result<Head, CodecError>, BytesMut) {
    let mut buf = BytesMut::from(input);
    let parsed = parse_head(&mut buf, head_request);
    (parsed, buf)
}

fn final_head(input: &[u8]) -> (ResponseHead, BytesMut) {
    match parse(input, false) {
        (Ok(Head::Final(h)), rest) => (h, rest),
        (other, _) => panic!("expected a final head, got {other:?}"),
    }
}

fn error(input: &[u8]) -> CodecError {
    match parse(input, false).0 {
        Err(e) => e,
        Ok(h) => panic!("expected an error, got {h:?}"),
    }
}

/// Feeds `input` to a decoder `step` bytes at a time, as reads would: the data frames
/// concatenated, the trailers, and whether the body ended.
fn decode_split(
    framing: Framing,
    input: &[u8],
    step: usize,
) -> Result<(Vec<u8>, Option<HeaderMap>, bool, BytesMut), CodecError> {
    let mut dec = BodyDecoder::new(framing);
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut trailers = None;
    let mut fed = 0;
    loop {
        match dec.decode(&mut buf)? {
            Decoded::Data(d) => {
                assert!(!d.is_empty(), "an empty data frame");
                data.extend_from_slice(&d);
            }
            Decoded::Trailers(t) => {
                trailers = Some(t);
                break;
            }
            Decoded::End => break,
            Decoded::NeedMore => {
                if fed == input.len() {
                    let ended = dec.eof().is_ok();
                    return Ok((data, trailers, ended, buf));
                }
                let end = (fed + step).min(input.len());
                buf.extend_from_slice(&input[fed..end]);
                fed = end;
            }
        }
    }
    buf.extend_from_slice(&input[fed..]);
    Ok((data, trailers, dec.is_done(), buf))
}

#[test]
fn the_request_head_is_written_as_given() {
    let mut req = Request::new(Bytes::from_static(b"{}"));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = "/v1/chat/completions?x=1".parse().unwrap();
    *req.version_mut() = Version::HTTP_2;
    let h = req.headers_mut();
    h.insert("host", HeaderValue::from_static("up.test:8080"));
    h.insert("content-length", HeaderValue::from_static("2"));
    h.append("x-tag", HeaderValue::from_static("a"));
    h.append("x-tag", HeaderValue::from_static("b"));
    let mut out = Vec::new();
    encode_request_head(&req, &mut out);
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: up.test:8080\r\n\
         content-length: 2\r\nx-tag: a\r\nx-tag: b\r\n\r\n"
    );
}

#[test]
fn a_body_without_a_length_gets_one_and_an_empty_one_none() {
    let mut req = Request::new(Bytes::from_static(b"hello"));
    *req.uri_mut() = "/x".parse().unwrap();
    let mut out = Vec::new();
    encode_request_head(&req, &mut out);
    assert_eq!(out, b"GET /x HTTP/1.1\r\ncontent-length: 5\r\n\r\n");
    let req = Request::new(Bytes::new());
    out.clear();
    encode_request_head(&req, &mut out);
    assert_eq!(out, b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn a_small_response_parses_whole_and_leaves_its_body_buffered() {
    let (head, rest) = final_head(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\
          X-A: 1\r\nx-a: 2\r\n\r\n{}",
    );
    assert_eq!(head.parts.status, StatusCode::OK);
    assert_eq!(head.parts.version, Version::HTTP_11);
    assert_eq!(head.parts.headers["content-type"], "application/json");
    let xa: Vec<_> = head.parts.headers.get_all("x-a").iter().collect();
    assert_eq!(xa, ["1", "2"]);
    assert_eq!(head.framing, Framing::Length(2));
    assert!(head.keep_alive);
    assert_eq!(&rest[..], b"{}");
}

#[test]
fn a_head_split_at_every_byte_is_partial_until_whole() {
    let whole: &[u8] = b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\nx-y: z\r\n\r\n";
    for cut in 0..whole.len() {
        let (parsed, rest) = parse(&whole[..cut], false);
        assert!(matches!(parsed, Ok(Head::Partial)), "cut at {cut}");
        assert_eq!(rest.len(), cut, "nothing consumed at {cut}");
    }
    let (head, rest) = final_head(whole);
    assert_eq!(head.parts.status, StatusCode::CREATED);
    assert_eq!(head.framing, Framing::Length(0));
    assert!(rest.is_empty());
}

#[test]
fn interim_responses_are_consumed_and_101_is_an_error() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
           HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"[..],
    );
    assert!(matches!(
        parse_head(&mut buf, false),
        Ok(Head::Interim(StatusCode::CONTINUE))
    ));
    assert!(matches!(
        parse_head(&mut buf, false),
        Ok(Head::Interim(StatusCode::EARLY_HINTS))
    ));
    let Ok(Head::Final(head)) = parse_head(&mut buf, false) else {
        panic!("no final head");
    };
    assert_eq!(head.parts.status, StatusCode::OK);
    assert_eq!(&buf[..], b"x");
    assert_eq!(
        error(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n"),
        CodecError::UnexpectedUpgrade
    );
}

#[test]
fn framing_follows_rfc_9112() {
    let framing = |input: &[u8], head_request: bool| match parse(input, head_request).0 {
        Ok(Head::Final(h)) => (h.framing, h.keep_alive),
        other => panic!("{other:?}"),
    };
    // No body whatever the fields say.
    let cl = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n";
    assert_eq!(framing(cl, true), (Framing::Empty, true));
    assert_eq!(
        framing(
            b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n",
            false
        ),
        (Framing::Empty, true)
    );
    assert_eq!(
        framing(b"HTTP/1.1 304 Not Modified\r\n\r\n", false),
        (Framing::Empty, true)
    );
    assert_eq!(framing(cl, false), (Framing::Length(10), true));
    // Chunked (case-insensitive, last coding).
    assert_eq!(
        framing(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n",
            false
        ),
        (Framing::Chunked, true)
    );
    // A final coding other than chunked runs until close.
    assert_eq!(
        framing(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", false),
        (Framing::UntilClose, false)
    );
    // Neither: until close.
    assert_eq!(
        framing(b"HTTP/1.1 200 OK\r\n\r\n", false),
        (Framing::UntilClose, false)
    );
    // Both: the coding wins, Content-Length goes, the connection closes after.
    let (head, _) =
        final_head(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n");
    assert_eq!(head.framing, Framing::Chunked);
    assert!(!head.keep_alive);
    assert!(!head.parts.headers.contains_key("content-length"));
    // Equal repeated lengths are one length.
    assert_eq!(
        framing(
            b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 4, 4\r\n\r\n",
            false
        ),
        (Framing::Length(4), true)
    );
}

#[test]
fn bad_lengths_are_errors() {
    for input in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 4, 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
    ] {
        assert_eq!(error(input), CodecError::ContentLength, "{input:?}");
    }
    assert_eq!(
        error(b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
        CodecError::TransferEncodingHttp10
    );
    // Where no length frames the body, a bad one is let through (as hyper does).
    let (head, _) = final_head(b"HTTP/1.1 204 No Content\r\ncontent-length: x\r\n\r\n");
    assert_eq!(head.framing, Framing::Empty);
}

#[test]
fn connection_close_and_http_1_0_end_keep_alive() {
    let keep = |input: &[u8]| final_head(input).0.keep_alive;
    assert!(!keep(
        b"HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n"
    ));
    assert!(!keep(
        b"HTTP/1.1 200 OK\r\nconnection: upgrade, close\r\ncontent-length: 0\r\n\r\n"
    ));
    assert!(!keep(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"));
    assert!(keep(
        b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"
    ));
    let (head, _) = final_head(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(head.parts.version, Version::HTTP_10);
}

#[test]
fn malformed_and_oversized_heads_are_errors() {
    assert!(matches!(
        error(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"),
        CodecError::Head(_)
    ));
    assert!(matches!(
        error(b"HTTP/1.1 2000 OK\r\n\r\n"),
        CodecError::Head(_)
    ));
    assert!(matches!(
        error(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"),
        CodecError::Head(_)
    ));
    assert!(matches!(
        error(b"HTTP/1.1 200 OK\r\nx: a\x01b\r\n\r\n"),
        CodecError::Head(_) | CodecError::HeaderValue(_)
    ));
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(error(&many), CodecError::TooManyHeaders);
    // Too large while still incomplete, and too large once complete.
    let mut big = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
    big.resize(MAX_HEAD, b'a');
    assert_eq!(error(&big), CodecError::HeadTooLarge);
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(error(&big), CodecError::HeadTooLarge);
}

#[test]
fn a_length_body_stops_at_its_length_at_any_split() {
    for step in [1, 2, 3, 7, 100] {
        let (data, trailers, ended, rest) =
            decode_split(Framing::Length(11), b"hello worldEXTRA", step).unwrap();
        assert_eq!(data, b"hello world", "step {step}");
        assert!(trailers.is_none() && ended);
        // What follows the body is left for the caller (who will not reuse the connection).
        assert_eq!(&rest[..], b"EXTRA");
    }
    let (data, _, ended, _) = decode_split(Framing::Length(11), b"hello", 2).unwrap();
    assert_eq!(data, b"hello");
    assert!(!ended, "a short body at EOF is incomplete");
}

#[test]
fn a_length_body_reports_what_is_left() {
    let mut dec = BodyDecoder::new(Framing::Length(5));
    assert_eq!(dec.remaining(), Some(5));
    let mut buf = BytesMut::from(&b"abc"[..]);
    assert_eq!(
        dec.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"abc"))
    );
    assert_eq!(dec.remaining(), Some(2));
    buf.extend_from_slice(b"de");
    assert_eq!(
        dec.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"de"))
    );
    assert!(dec.is_done());
    assert_eq!(dec.remaining(), Some(0));
    assert!(BodyDecoder::new(Framing::Empty).is_done());
    assert!(BodyDecoder::new(Framing::Length(0)).is_done());
}

#[test]
fn a_body_until_close_ends_at_eof() {
    for step in [1, 4, 64] {
        let (data, _, ended, _) = decode_split(Framing::UntilClose, b"all of it", step).unwrap();
        assert_eq!(data, b"all of it");
        assert!(ended);
    }
}

#[test]
fn chunked_bodies_decode_at_any_split() {
    let input: &[u8] = b"5;name=value\r\nhello\r\n1A \t; ext\r\nabcdefghijklmnopqrstuvwxyz\r\n\
                         0\r\nx-trailer: t\r\nx-other: o\r\n\r\n";
    for step in 1..=input.len() {
        let (data, trailers, ended, rest) = decode_split(Framing::Chunked, input, step).unwrap();
        assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
        let t = trailers.expect("trailers");
        assert_eq!(t["x-trailer"], "t");
        assert_eq!(t["x-other"], "o");
        assert!(ended);
        assert!(rest.is_empty());
    }
    let (data, trailers, ended, _) =
        decode_split(Framing::Chunked, b"3\r\nabc\r\n0\r\n\r\n", 1).unwrap();
    assert_eq!(data, b"abc");
    assert!(trailers.is_none() && ended);
}

#[test]
fn a_chunked_end_that_came_with_the_last_data_ends_the_body_at_once() {
    // A streamed response's last event and its terminating chunk in one read: the body is
    // over when the data is returned, so the caller needs no further read or poll.
    let mut dec = BodyDecoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"6\r\ndata\n\n\r\n0\r\n\r\n"[..]);
    assert_eq!(
        dec.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"data\n\n"))
    );
    assert!(dec.is_done());
    assert!(buf.is_empty());
    // Part of a chunk is passed on as it arrives.
    let mut dec = BodyDecoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"a\r\nabc"[..]);
    assert_eq!(
        dec.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"abc"))
    );
    assert_eq!(dec.decode(&mut buf).unwrap(), Decoded::NeedMore);
    assert!(!dec.is_done());
}

#[test]
fn a_chunked_body_cut_short_is_incomplete() {
    for input in [&b"5\r\nhel"[..], b"5\r\nhello\r\n", b"5\r\nhello\r\n0\r\n"] {
        let (_, _, ended, _) = decode_split(Framing::Chunked, input, 3).unwrap();
        assert!(!ended, "{input:?}");
    }
}

#[test]
fn malformed_chunked_framing_is_an_error() {
    let cases: [(&[u8], CodecError); 8] = [
        (b"x\r\n", CodecError::ChunkSize),
        (b"\r\n", CodecError::ChunkSize),
        (b"5 5\r\nhello\r\n", CodecError::ChunkSize),
        (b"5\nhello\r\n", CodecError::ChunkSize),
        (b"5;a\rb\r\nhello\r\n", CodecError::ChunkSize),
        (b"3\r\nabcX\r\n", CodecError::ChunkDelimiter),
        (b"3\r\nabc\rX", CodecError::ChunkDelimiter),
        (b"10000000000000000\r\n", CodecError::ChunkSizeOverflow),
    ];
    for (input, expected) in cases {
        for step in [1, input.len()] {
            assert_eq!(
                decode_split(Framing::Chunked, input, step).unwrap_err(),
                expected,
                "{input:?} step {step}"
            );
        }
    }
    // The largest size that fits is a size, not an error (the body is then cut short).
    assert!(decode_split(Framing::Chunked, b"ffffffffffffffff\r\nab", 5).is_ok());
    let mut long = b"5;".to_vec();
    long.resize(MAX_CHUNK_LINE, b'a');
    assert_eq!(
        decode_split(Framing::Chunked, &long, 1000).unwrap_err(),
        CodecError::ChunkLineTooLong
    );
    let mut trailers = b"0\r\nx-t: ".to_vec();
    trailers.resize(MAX_TRAILERS + 8, b'a');
    let mut many_fields = b"0\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many_fields.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    many_fields.extend_from_slice(b"\r\n");
    assert!(matches!(
        decode_split(Framing::Chunked, &many_fields, 4096).unwrap_err(),
        CodecError::Trailers(_)
    ));
    assert!(matches!(
        decode_split(Framing::Chunked, &trailers, 1024).unwrap_err(),
        CodecError::TrailersTooLarge
    ));
    assert!(matches!(
        decode_split(Framing::Chunked, b"0\r\nnot a field\r\n\r\n", 64).unwrap_err(),
        CodecError::Trailers(_)
    ));
}
