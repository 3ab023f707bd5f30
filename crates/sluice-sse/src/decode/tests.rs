//! One test per parsing rule. Property tests (re-chunking, round trips, a second parser) live in
//! `tests/`.

use super::*;

/// Decodes `chunks` to the end: the items, and the final error if any.
fn decode_chunks(dec: &mut Decoder, chunks: &[&[u8]]) -> (Vec<Item>, Option<DecodeError>) {
    let mut items = Vec::new();
    for chunk in chunks {
        dec.feed(Bytes::copy_from_slice(chunk));
        while let Some(r) = dec.next_item() {
            match r {
                Ok(item) => items.push(item),
                Err(e) => return (items, Some(e)),
            }
        }
    }
    dec.finish();
    while let Some(r) = dec.next_item() {
        match r {
            Ok(item) => items.push(item),
            Err(e) => return (items, Some(e)),
        }
    }
    (items, None)
}

fn decode(chunks: &[&[u8]]) -> (Vec<Item>, Option<DecodeError>) {
    decode_chunks(&mut Decoder::new(), chunks)
}

fn events(chunks: &[&[u8]]) -> Vec<Event> {
    let (items, err) = decode(chunks);
    assert_eq!(err, None);
    items
        .into_iter()
        .filter_map(|i| match i {
            Item::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn datas(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
    events(chunks).iter().map(|e| e.data().to_vec()).collect()
}

fn raw_concat(items: &[Item], err: &Option<DecodeError>) -> Vec<u8> {
    let mut out: Vec<u8> = items.iter().flat_map(|i| i.raw().to_vec()).collect();
    if let Some(DecodeError::Truncated { raw }) = err {
        out.extend_from_slice(raw);
    }
    out
}

#[test]
fn bom_at_start_is_dropped() {
    assert_eq!(datas(&[b"\xEF\xBB\xBFdata: a\n\n"]), vec![b"a".to_vec()]);
    // Without the BOM being dropped, the first field name would be "\u{FEFF}data".
}

#[test]
fn bom_split_across_chunks_is_dropped() {
    for chunks in [
        &[&b"\xEF"[..], &b"\xBB\xBFdata: a\n\n"[..]][..],
        &[&b"\xEF\xBB"[..], &b"\xBFdata: a\n\n"[..]][..],
        &[
            &b"\xEF"[..],
            &b"\xBB"[..],
            &b"\xBF"[..],
            &b"data: a\n\n"[..],
        ][..],
    ] {
        assert_eq!(datas(chunks), vec![b"a".to_vec()], "{chunks:?}");
    }
}

#[test]
fn bom_is_kept_in_the_first_raw_span() {
    let (items, err) = decode(&[b"\xEF\xBB", b"\xBFdata: a\n\n"]);
    assert_eq!(err, None);
    assert_eq!(&items[0].raw()[..], b"\xEF\xBB\xBFdata: a\n\n");
}

#[test]
fn only_one_bom_and_only_at_the_start_is_dropped() {
    // A second BOM is part of the field name, which is then unknown.
    assert_eq!(
        datas(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"]),
        vec![b"b".to_vec()]
    );
    assert_eq!(
        datas(&[b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"]),
        vec![b"a".to_vec()]
    );
}

#[test]
fn partial_bom_is_not_a_bom() {
    // EF BB then 'd' is not a BOM: the bytes belong to the first line's field name.
    let (items, err) = decode(&[b"\xEF\xBB", b"data: a\n\n"]);
    assert_eq!(err, None);
    assert!(matches!(&items[0], Item::Skipped(_)));
    assert_eq!(raw_concat(&items, &err), b"\xEF\xBBdata: a\n\n");
}

#[test]
fn lone_bom_is_a_clean_empty_stream() {
    let (items, err) = decode(&[b"\xEF\xBB\xBF"]);
    assert_eq!(err, None);
    assert_eq!(raw_concat(&items, &err), b"\xEF\xBB\xBF");
}

#[test]
fn lines_end_at_lf_crlf_or_cr() {
    let want = vec![b"a\nb".to_vec(), b"c".to_vec()];
    assert_eq!(datas(&[b"data: a\ndata: b\n\ndata: c\n\n"]), want);
    assert_eq!(datas(&[b"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"]), want);
    assert_eq!(datas(&[b"data: a\rdata: b\r\rdata: c\r\r"]), want);
    assert_eq!(datas(&[b"data: a\rdata: b\r\n\ndata: c\n\r"]), want);
}

#[test]
fn cr_at_chunk_end_waits_for_the_next_chunk() {
    // "\r" then "\n" is one CRLF break, not a CR break followed by a blank LF line, so
    // this is one event with two data lines, not two events.
    let mut dec = Decoder::new();
    dec.feed(Bytes::from_static(b"data: a\r"));
    assert!(dec.next_item().is_none());
    dec.feed(Bytes::from_static(b"\ndata: b\r"));
    assert!(dec.next_item().is_none());
    dec.feed(Bytes::from_static(b"\n\r"));
    assert!(
        dec.next_item().is_none(),
        "the blank line might still be CRLF"
    );
    dec.feed(Bytes::from_static(b"\n"));
    let Some(Ok(Item::Event(ev))) = dec.next_item() else {
        panic!("expected an event")
    };
    assert_eq!(ev.data(), b"a\nb");
    assert_eq!(&ev.raw()[..], b"data: a\r\ndata: b\r\n\r\n");
}

#[test]
fn cr_at_chunk_end_followed_by_other_bytes_is_a_cr_break() {
    assert_eq!(
        datas(&[b"data: a\r", b"data: b\r", b"\r"]),
        vec![b"a\nb".to_vec()]
    );
}

#[test]
fn final_cr_at_end_of_stream_ends_the_line() {
    assert_eq!(datas(&[b"data: a\r\r"]), vec![b"a".to_vec()]);
    let (items, err) = decode(&[b"data: a\r", b"\r"]);
    assert_eq!(err, None);
    assert_eq!(items.len(), 1);
}

#[test]
fn comments_are_reported_not_dispatched() {
    let (items, err) = decode(&[b": ping\n:\n:: x\ndata: a\n\n"]);
    assert_eq!(err, None);
    let texts: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Comment(c) => Some(c.text().to_vec()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec![b"ping".to_vec(), b"".to_vec(), b": x".to_vec()]);
    assert_eq!(items.len(), 4);
    let Item::Comment(c) = &items[0] else {
        panic!()
    };
    assert_eq!(&c.raw()[..], b": ping\n");
    assert!(!c.in_event());
}

#[test]
fn comment_inside_an_event_travels_with_the_event() {
    let (items, err) = decode(&[b"data: a\n: keepalive\ndata: b\n\n"]);
    assert_eq!(err, None);
    let [Item::Comment(c), Item::Event(ev)] = &items[..] else {
        panic!("{items:?}")
    };
    assert!(c.in_event());
    assert!(c.raw().is_empty());
    assert_eq!(c.text_str(), "keepalive");
    assert_eq!(ev.data(), b"a\nb");
    assert_eq!(&ev.raw()[..], b"data: a\n: keepalive\ndata: b\n\n");
}

#[test]
fn field_and_value_split_at_first_colon_with_one_space_removed() {
    let ev = &events(&[b"data:  two spaces: and a colon\n\n"])[0];
    assert_eq!(ev.data(), b" two spaces: and a colon");
    let ev = &events(&[b"data:no space\n\n"])[0];
    assert_eq!(ev.data(), b"no space");
    let ev = &events(&[b"event:a:b\ndata\n\n"])[0];
    assert_eq!(ev.event_type(), b"a:b");
}

#[test]
fn line_without_colon_is_a_field_with_empty_value() {
    // "data" alone appends an empty line; two of them give "\n".
    assert_eq!(datas(&[b"data\n\n"]), vec![b"".to_vec()]);
    assert_eq!(datas(&[b"data\ndata\n\n"]), vec![b"\n".to_vec()]);
}

#[test]
fn data_lines_are_joined_with_lf() {
    assert_eq!(
        datas(&[b"data: a\ndata:\ndata: c\n\n"]),
        vec![b"a\n\nc".to_vec()]
    );
}

#[test]
fn single_line_event_in_one_chunk_is_zero_copy() {
    let input = Bytes::from_static(b"data: hello\n\n");
    let mut dec = Decoder::new();
    dec.feed(input.clone());
    let Some(Ok(Item::Event(ev))) = dec.next_item() else {
        panic!()
    };
    // Both slices point into the input's memory.
    assert_eq!(ev.raw().as_ptr(), input.as_ptr());
    assert_eq!(ev.data_bytes().as_ptr(), input[6..].as_ptr());
    assert_eq!(dec.buffered_bytes(), 0);
}

#[test]
fn event_field_sets_type_and_defaults_to_message() {
    let evs = events(&[b"event: a\nevent: b\ndata: x\n\ndata: y\n\nevent:\ndata: z\n\n"]);
    let types: Vec<_> = evs
        .iter()
        .map(|e| e.event_type_str().into_owned())
        .collect();
    assert_eq!(types, ["b", "message", "message"]);
}

#[test]
fn event_type_is_reset_even_when_nothing_is_dispatched() {
    let evs = events(&[b"event: lost\n\ndata: x\n\n"]);
    assert_eq!(evs[0].event_type(), b"message");
}

#[test]
fn id_sets_last_event_id_which_persists() {
    let mut dec = Decoder::new();
    let (items, err) = decode_chunks(&mut dec, &[b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"]);
    assert_eq!(err, None);
    let evs: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(evs[0].id(), Some(&b"1"[..]));
    assert_eq!(evs[0].last_event_id(), b"1");
    assert_eq!(evs[1].id(), None);
    assert_eq!(evs[1].last_event_id(), b"1");
    // `id` with no value resets it.
    assert_eq!(evs[2].id(), Some(&b""[..]));
    assert_eq!(evs[2].last_event_id(), b"");
    assert_eq!(&dec.last_event_id()[..], b"");
}

#[test]
fn id_containing_nul_is_ignored() {
    let evs = events(&[b"id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n"]);
    assert_eq!(evs[1].id(), None);
    assert_eq!(evs[1].last_event_id(), b"1");
}

#[test]
fn id_without_data_sets_last_event_id_but_dispatches_nothing() {
    let mut dec = Decoder::new();
    let (items, err) = decode_chunks(&mut dec, &[b"id: 7\n\n"]);
    assert_eq!(err, None);
    assert!(matches!(&items[..], [Item::Skipped(_)]));
    assert_eq!(&dec.last_event_id()[..], b"7");
}

#[test]
fn id_of_an_unfinished_event_does_not_count() {
    let mut dec = Decoder::new();
    let (_, err) = decode_chunks(&mut dec, &[b"id: 1\ndata: a\n\nid: 2\ndata: b\n"]);
    assert!(matches!(err, Some(DecodeError::Truncated { .. })));
    assert_eq!(&dec.last_event_id()[..], b"1");
}

#[test]
fn retry_accepts_ascii_digits_only() {
    let mut dec = Decoder::new();
    let (items, err) = decode_chunks(
        &mut dec,
        &[b"retry: 1500\ndata: a\n\nretry: 2s\ndata: b\n\nretry: -5\n\n"],
    );
    assert_eq!(err, None);
    let retries: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Event(e) => Some(e.retry()),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [Some(1500), None]);
    assert_eq!(dec.retry(), Some(1500));
}

#[test]
fn unknown_fields_are_ignored() {
    let (items, err) = decode(&[b"foo: bar\ndata: a\nDATA: b\n\nfoo\n\n"]);
    assert_eq!(err, None);
    let Item::Event(ev) = &items[0] else { panic!() };
    assert_eq!(ev.data(), b"a");
    assert!(matches!(&items[1], Item::Skipped(_)));
}

#[test]
fn blank_line_dispatches_and_empty_data_is_not_dispatched() {
    let (items, err) = decode(&[b"\n\nevent: x\n\ndata:\n\n"]);
    assert_eq!(err, None);
    let kinds: Vec<_> = items
        .iter()
        .map(|i| match i {
            Item::Event(_) => "event",
            Item::Comment(_) => "comment",
            Item::Skipped(_) => "skipped",
        })
        .collect();
    // Two stray blank lines, an event block with no data, then an event whose data is empty
    // (one `data:` line makes the data buffer non-empty).
    assert_eq!(kinds, ["skipped", "skipped", "skipped", "event"]);
    let Item::Event(ev) = &items[3] else { panic!() };
    assert_eq!(ev.data(), b"");
}

#[test]
fn unfinished_event_at_end_is_truncated_not_dispatched() {
    for input in [
        &b"data: a\n\ndata: b\n"[..],
        b"data: a\n\ndata: b",
        b"data: a\n\n: pi",
    ] {
        let (items, err) = decode(&[input]);
        assert_eq!(items.len(), 1, "{input:?}");
        let Some(DecodeError::Truncated { raw }) = &err else {
            panic!("{input:?}: {err:?}")
        };
        assert_eq!(&raw[..], &input[9..]);
        assert_eq!(
            err.as_ref().map(DecodeError::metric_label),
            Some("sse_truncated")
        );
    }
}

#[test]
fn clean_end_is_not_truncated() {
    for input in [
        &b""[..],
        b"data: a\n\n",
        b"data: a\n\n: ping\n",
        b"data: a\n\n\n",
    ] {
        assert_eq!(decode(&[input]).1, None, "{input:?}");
    }
}

#[test]
fn nothing_after_an_error_or_the_end() {
    let mut dec = Decoder::new();
    dec.feed(Bytes::from_static(b"data: a"));
    dec.finish();
    assert!(matches!(
        dec.next_item(),
        Some(Err(DecodeError::Truncated { .. }))
    ));
    assert!(dec.next_item().is_none());
    dec.feed(Bytes::from_static(b"\n\n"));
    assert!(dec.next_item().is_none());
}

#[test]
fn event_over_the_limit_is_an_error() {
    let mut dec = Decoder::with_max_event_bytes(16).unwrap();
    // Exactly 16 bytes is fine.
    let (items, err) = decode_chunks(&mut dec, &[b"data: 01234567\n\ndata: 012345678\n\n"]);
    assert_eq!(items.len(), 1);
    assert_eq!(err, Some(DecodeError::EventTooLarge { limit: 16 }));
    assert_eq!(err.unwrap().metric_label(), "sse_event_too_large");
}

#[test]
fn event_over_the_limit_across_chunks_is_an_error_without_growth() {
    let mut dec = Decoder::with_max_event_bytes(1000).unwrap();
    dec.feed(Bytes::from_static(b"data: "));
    let chunk = Bytes::from(vec![b'x'; 100]);
    for _ in 0..9 {
        dec.feed(chunk.clone());
        assert!(dec.next_item().is_none());
        assert!(dec.buffered_bytes() <= 1000);
    }
    dec.feed(chunk);
    assert_eq!(
        dec.next_item(),
        Some(Err(DecodeError::EventTooLarge { limit: 1000 }))
    );
    assert_eq!(dec.buffered_bytes(), 0);
}

#[test]
fn feeding_a_failed_decoder_holds_nothing() {
    let mut dec = Decoder::with_max_event_bytes(8).unwrap();
    dec.feed(Bytes::from_static(b"data: 0123456789"));
    assert!(matches!(dec.next_item(), Some(Err(_))));
    dec.feed(Bytes::from_static(b"\n\ndata: x\n\n"));
    assert!(dec.queue.is_empty());
    assert!(dec.next_item().is_none());
}

#[test]
fn line_without_terminator_is_bounded_too() {
    let mut dec = Decoder::with_max_event_bytes(64).unwrap();
    let (_, err) = decode_chunks(&mut dec, &[&[b':'; 40], &[b'x'; 40]]);
    assert_eq!(err, Some(DecodeError::EventTooLarge { limit: 64 }));
}

#[test]
fn limit_must_be_within_range() {
    assert!(Decoder::with_max_event_bytes(0).is_err());
    assert!(Decoder::with_max_event_bytes(MAX_EVENT_BYTES_CEILING).is_ok());
    let err = Decoder::with_max_event_bytes(MAX_EVENT_BYTES_CEILING + 1).unwrap_err();
    assert_eq!(err.got, MAX_EVENT_BYTES_CEILING + 1);
    assert_eq!(Decoder::new().max_event_bytes(), DEFAULT_MAX_EVENT_BYTES);
}

#[test]
fn invalid_utf8_becomes_replacement_char_but_raw_is_exact() {
    let input = b"event: \xFFx\ndata: a\xC3\n\n";
    let (items, err) = decode(&[input]);
    assert_eq!(err, None);
    let Item::Event(ev) = &items[0] else { panic!() };
    assert_eq!(ev.data_str(), "a\u{FFFD}");
    assert_eq!(ev.event_type_str(), "\u{FFFD}x");
    assert_eq!(&ev.raw()[..], input);
}

#[test]
fn raw_spans_reproduce_the_input_byte_for_byte() {
    let input: &[u8] = b"\xEF\xBB\xBF: hi\r\n\r\nid: 1\rdata: a\r: c\r\r\nevent: e\ndata: b\n\nretry: 5\n\nfoo\n\ndata: cut";
    for split in 0..input.len() {
        let (items, err) = decode(&[&input[..split], &input[split..]]);
        assert_eq!(raw_concat(&items, &err), input, "split at {split}");
    }
}

#[test]
fn event_spanning_chunks_is_copied_once_and_values_slice_the_copy() {
    let (items, err) = decode(&[b"event: e\nda", b"ta: hel", b"lo\n", b"\n"]);
    assert_eq!(err, None);
    let Item::Event(ev) = &items[0] else { panic!() };
    assert_eq!(ev.data(), b"hello");
    assert_eq!(ev.event_type(), b"e");
    assert_eq!(&ev.raw()[..], b"event: e\ndata: hello\n\n");
    let data = ev.data_bytes();
    let raw_range = ev.raw().as_ptr_range();
    assert!(raw_range.contains(&data.as_ptr()));
}

#[test]
fn single_line_fast_path_matches_the_general_path() {
    // In one chunk `data: x\n\n` takes the fast path; split between its two LFs it cannot.
    let (fast, _) = decode(&[b"id: 3\n\ndata: x\n\n"]);
    let (general, _) = decode(&[b"id: 3\n\ndata: x\n", b"\n"]);
    assert_eq!(fast, general);
    let Item::Event(ev) = &fast[1] else { panic!() };
    assert_eq!(ev.last_event_id(), b"3");
    assert_eq!(ev.data(), b"x");
}
