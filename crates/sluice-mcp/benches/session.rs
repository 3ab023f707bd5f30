//! The cost of a session id: minting one at `initialize` (HMAC-SHA256 over the upstream
//! sessions, base64url) and verifying one on every later request (base64url, HMAC compared
//! in constant time, decode), with one and with three upstream servers; and refusing a forged
//! one (what a flood of made-up ids costs). Target: microseconds, not a slow KDF.
//!
//! Run: `cargo bench -p sluice-mcp --bench session -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice_mcp::protocol::Version;
use sluice_mcp::session::{
    key_tag, unix_now, SessionClaims, SessionCodec, UpstreamEntry, UpstreamState,
};

fn claims(servers: usize) -> SessionClaims {
    SessionClaims {
        issued_at: unix_now(SystemTime::now()),
        version: Version::V2025_11_25,
        key_tag: key_tag(Some("team-a")),
        upstreams: (0..servers)
            .map(|i| UpstreamEntry {
                server: format!("server-{i}"),
                state: UpstreamState::Session {
                    version: Version::V2025_11_25,
                    // The length of the Python SDK's session ids (uuid4 hex).
                    id: format!("{i:032x}"),
                },
            })
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let codec = SessionCodec::new(&[0x5a; 48], Duration::from_secs(3600));
    let mut g = c.benchmark_group("session_id");
    for servers in [1, 3] {
        let cl = claims(servers);
        let id = codec.mint(&cl).unwrap();
        let tag = cl.key_tag;
        g.bench_with_input(BenchmarkId::new("mint", servers), &cl, |b, cl| {
            b.iter(|| codec.mint(black_box(cl)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("verify", servers), &id, |b, id| {
            b.iter(|| codec.verify(black_box(id), tag, SystemTime::now()).unwrap())
        });
        let mut forged = id.clone().into_bytes();
        let last = forged.len() - 2;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        g.bench_with_input(
            BenchmarkId::new("refuse_forged", servers),
            &forged,
            |b, id| {
                b.iter(|| {
                    codec
                        .verify(black_box(id), tag, SystemTime::now())
                        .unwrap_err()
                })
            },
        );
        println!(
            "session id with {servers} server(s): {} characters",
            id.len()
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
