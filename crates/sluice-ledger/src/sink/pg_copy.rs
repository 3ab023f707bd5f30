//! PostgreSQL's binary `COPY` format for a batch of records, written by hand (the format:
//! <https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4>): a signature, then
//! per record the field count and each field as a length and its bytes in network order (-1
//! for NULL), then a trailer of -1.
//!
//! Why not `tokio_postgres::binary_copy::BinaryCopyInWriter`: it checks every value's type
//! against the column's and goes through `dyn ToSql` and an `await` per row, several K
//! instructions a record on the gateway's CPU, where the whole batch is fixed types written
//! into one buffer and sent as one message here.

use bytes::{BufMut, BytesMut};

use crate::record::{sat_i64, RequestRecord};

/// `PGCOPY\n\377\r\n\0`, then the flags field and the header extension's length (both 0).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// Fields a record has.
const FIELDS: i16 = super::schema::COLUMNS.len() as i16;

/// `batch` as one binary COPY stream, columns in [`super::schema::COLUMNS`] order with the
/// types of the table (`BIGINT`, `INTEGER`, `SMALLINT`, `BOOLEAN`, `TEXT`).
pub(crate) fn encode(batch: &[RequestRecord]) -> BytesMut {
    let mut out = BytesMut::with_capacity(HEADER.len() + 2 + batch.len() * 400);
    out.put_slice(HEADER);
    for r in batch {
        record(&mut out, r);
    }
    out.put_i16(-1);
    out
}

fn record(out: &mut BytesMut, r: &RequestRecord) {
    let t = &r.tokens;
    let capture = r.capture.as_deref();
    out.put_i16(FIELDS);
    int8(out, r.ts_us);
    text(out, &r.request_id);
    opt_text(out, r.key_id.as_deref());
    opt_text(out, r.team.as_deref());
    opt_text(out, r.owner.as_deref());
    text(out, &r.route);
    text(out, r.client_api);
    opt_text(out, r.requested_model.as_deref());
    opt_text(out, r.served_model.as_deref());
    opt_text(out, r.upstream.as_deref());
    opt_text(out, r.provider.as_deref());
    int4(out, i32::from(r.attempts));
    if r.attempt_classes.is_empty() {
        null(out);
    } else {
        let len: usize =
            r.attempt_classes.iter().map(|c| c.len()).sum::<usize>() + r.attempt_classes.len() - 1;
        out.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
        for (i, c) in r.attempt_classes.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_slice(c.as_bytes());
        }
    }
    int4(out, i32::from(r.status));
    text(out, r.end_reason);
    boolean(out, r.stream);
    for v in [
        t.input,
        t.output,
        t.cache_read,
        t.cache_write,
        t.cache_write_1h,
        t.reasoning,
    ] {
        int8(out, sat_i64(v));
    }
    out.put_i32(2);
    out.put_i16(r.pricing.code());
    opt_text(out, r.pricing.entry());
    opt_int8(out, r.pricing.cost_micros());
    opt_int8(out, r.latency.first_byte_us.map(sat_i64));
    opt_int8(out, r.latency.first_token_us.map(sat_i64));
    int8(out, sat_i64(r.latency.total_us));
    boolean(out, r.cache_hit);
    boolean(out, r.idempotent_replay);
    opt_text(out, capture.map(|c| c.prompt.as_str()));
    opt_text(out, capture.map(|c| c.response.as_str()));
    match capture {
        Some(c) => boolean(out, c.prompt_truncated || c.response_truncated),
        None => null(out),
    }
    opt_text(out, r.guardrails.as_deref());
}

fn null(out: &mut BytesMut) {
    out.put_i32(-1);
}

fn int8(out: &mut BytesMut, v: i64) {
    out.put_i32(8);
    out.put_i64(v);
}

fn opt_int8(out: &mut BytesMut, v: Option<i64>) {
    match v {
        Some(v) => int8(out, v),
        None => null(out),
    }
}

fn int4(out: &mut BytesMut, v: i32) {
    out.put_i32(4);
    out.put_i32(v);
}

fn boolean(out: &mut BytesMut, v: bool) {
    out.put_i32(1);
    out.put_u8(u8::from(v));
}

fn text(out: &mut BytesMut, s: &str) {
    // A text longer than 2 GiB cannot be a field: capture is capped far below that.
    out.put_i32(i32::try_from(s.len()).unwrap_or(i32::MAX));
    out.put_slice(s.as_bytes());
}

fn opt_text(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => text(out, s),
        None => null(out),
    }
}
