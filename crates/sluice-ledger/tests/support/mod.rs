//! Test support: a real PostgreSQL server per test (Debian's `postgresql` binaries, a private
//! data directory, a free loopback port, no Unix socket), and varied request records.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root (CI does) `initdb` and
//! `postgres` run as the `postgres` user (created by Debian's package; else `nobody`) through
//! `setpriv`, which execs in place: the child's pid is the server's, for `kill`.
//!
//! The tests that start a server are `#[ignore]`d when the crate was built without the binaries
//! (see build.rs), except under `CI=true`, where they run and fail.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice_ledger::{Catalog, Latency, RequestRecord, Tokens};
use tokio::time::Instant;

/// `$PG_BIN`, else the directory of `initdb` on the PATH, else the newest Debian
/// `/usr/lib/postgresql/<version>/bin` (as build.rs looks).
pub fn pg_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|d| d.join("initdb").is_file()) {
        return Some(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The unprivileged user to run as, when running as root: (name, uid, gid).
fn run_as() -> Option<(String, u32, u32)> {
    if output("id", &["-u"]).as_deref() != Some("0") {
        return None;
    }
    for user in ["postgres", "nobody"] {
        let uid = output("id", &["-u", user]).and_then(|s| s.parse().ok());
        let gid = output("id", &["-g", user]).and_then(|s| s.parse().ok());
        if let (Some(uid), Some(gid)) = (uid, gid) {
            return Some((user.to_string(), uid, gid));
        }
    }
    panic!("running as root and there is neither a `postgres` nor a `nobody` user to run PostgreSQL as");
}

pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<(String, u32, u32)>,
    port: u16,
    durable: bool,
    child: Option<Child>,
}

impl PgServer {
    /// A running server with `fsync` off (tests need no durability).
    pub async fn start() -> PgServer {
        PgServer::start_with(false).await
    }

    /// A running server; `durable` keeps PostgreSQL's default `fsync = on`.
    ///
    /// # Panics
    /// Without the binaries (see build.rs), or if the server does not come up.
    pub async fn start_with(durable: bool) -> PgServer {
        let bin = pg_bin().expect(
            "PostgreSQL is not installed: apt-get install postgresql (CI: .ci/run does) or set PG_BIN",
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let run_as = run_as();
        if let Some((_, uid, gid)) = &run_as {
            std::os::unix::fs::chown(dir.path(), Some(*uid), Some(*gid))
                .expect("chown the data dir");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("no free port")
            .port();
        let mut server = PgServer {
            dir,
            bin,
            run_as,
            port,
            durable,
            child: None,
        };
        let data = server.data();
        let status = server
            .command("initdb")
            .args([
                "-D",
                &data,
                "-U",
                "sluice",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .expect("cannot run initdb");
        assert!(status.success(), "initdb failed");
        server.restart().await;
        server
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match &self.run_as {
            Some((_, uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://sluice@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again) on its port and waits until it answers a query.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let fsync = if self.durable { "on" } else { "off" };
        let child = self
            .command("postgres")
            .args(["-D", &self.data(), "-p", &self.port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", &format!("fsync={fsync}"), "-c", "max_connections=30"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start postgres");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok((client, conn)) =
                tokio_postgres::connect(&self.url(), tokio_postgres::NoTls).await
            {
                tokio::spawn(conn);
                if client.simple_query("SELECT 1").await.is_ok() {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("postgres exited with {status}: {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "postgres did not answer on port {}: {}",
            self.port,
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// An immediate shutdown (SIGQUIT): the server and its backends exit at once, no
    /// checkpoint; the next start runs crash recovery. A crash, but one that leaves no orphan
    /// backends holding the shared memory (as SIGKILL of the postmaster would).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen server acts on SIGQUIT only once continued.
            let pid = child.id().to_string();
            let children = output("ps", &["-o", "pid=", "--ppid", &pid]).unwrap_or_default();
            let _ = Command::new("kill")
                .arg("-CONT")
                .args(children.split_whitespace())
                .arg(&pid)
                .status();
            let _ = Command::new("kill")
                .args(["-QUIT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// SIGSTOP to the postmaster and its children (each backend is its own session, so a
    /// process group would not reach them): the server keeps its sockets but answers nothing
    /// (a hung database).
    pub fn freeze(&self) {
        self.signal_all("-STOP");
    }

    /// SIGCONT after [`PgServer::freeze`].
    pub fn thaw(&self) {
        self.signal_all("-CONT");
    }

    fn signal_all(&self, sig: &str) {
        let pid = self.child.as_ref().expect("not running").id().to_string();
        let children = output("ps", &["-o", "pid=", "--ppid", &pid]).unwrap_or_default();
        let mut pids: Vec<&str> = children.split_whitespace().collect();
        // Children first when stopping, so none notices its parent stopped first; any order
        // works when continuing.
        pids.push(&pid);
        let status = Command::new("kill")
            .arg(sig)
            .args(&pids)
            .status()
            .expect("cannot run kill");
        assert!(status.success(), "kill {sig} {pids:?}");
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A record, varied by `i`: five keys (one keyless), three teams, four models on two
/// providers, three routes, two upstreams; tokens from the provider's own usage shape, priced
/// by the shipped catalog (one model unpriced); every tenth a refusal without usage.
pub fn record(catalog: &Catalog, i: u64, ts_us: i64) -> RequestRecord {
    let mut r = RequestRecord::new(
        ts_us,
        Arc::from(format!("req-{i}")),
        Arc::from(["chat", "batch", "support"][(i % 3) as usize]),
        "openai.chat",
    );
    if i % 5 != 0 {
        r.key_id = Some(Arc::from(format!("k{}", i % 5)));
        r.team = Some(Arc::from(["red", "green", "blue"][(i % 3) as usize]));
        r.owner = Some(Arc::from("owner@example.com"));
    }
    let (provider, model) = [
        ("openai", "gpt-4o"),
        ("openai", "gpt-4o-mini"),
        ("anthropic", "claude-sonnet-4-5-20250929"),
        ("openai", "some-unpriced-model"),
    ][(i % 4) as usize];
    r.requested_model = Some(Arc::from(model));
    if i % 10 == 9 {
        r.status = 429;
        r.end_reason = "refused_limit";
        return r;
    }
    r.served_model = Some(Arc::from(model));
    r.provider = Some(Arc::from(provider));
    r.upstream = Some(Arc::from(if provider == "openai" {
        "oai-east"
    } else {
        "claude"
    }));
    r.attempts = 1 + (i % 3 == 0) as u16;
    if r.attempts > 1 {
        r.attempt_classes = vec!["connect"];
    }
    r.status = 200;
    r.end_reason = "ok";
    r.stream = i % 2 == 0;
    r.tokens = if provider == "anthropic" {
        Tokens::from_anthropic(100 + i % 50, 20 + i % 7, 1_000, 10 * (i % 3), i % 2, 0)
    } else {
        Tokens::from_openai(500 + i % 100, 40 + i % 13, 100 * (i % 4), i % 5)
    };
    r.pricing = catalog.pricing(provider, model, &r.tokens);
    r.latency = Latency {
        first_byte_us: Some(20_000 + i % 1000),
        first_token_us: Some(25_000 + i % 1000),
        total_us: 500_000 + i % 10_000,
    };
    r.cache_hit = i % 17 == 0;
    r
}

/// The usage rows `query` should give for `records`, computed here from the records
/// themselves, independently of any SQL.
pub fn expected_rows(
    records: &[RequestRecord],
    query: &sluice_ledger::UsageQuery,
) -> Vec<sluice_ledger::UsageRow> {
    use sluice_ledger::{Bucket, GroupBy, Pricing, UsageRow};
    use std::collections::BTreeMap;
    const H: i64 = 3_600_000_000;
    const D: i64 = 86_400_000_000;
    let mut acc: BTreeMap<(i64, Vec<u8>), UsageRow> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.ts_us >= query.from_us && r.ts_us < query.to_us)
    {
        let bucket = match query.bucket {
            Bucket::Hour => r.ts_us / H * H,
            Bucket::Day => r.ts_us / D * D,
            Bucket::None => query.from_us,
        };
        let group = match query.group_by {
            GroupBy::Key => r.key_id.as_deref().unwrap_or(""),
            GroupBy::Team => r.team.as_deref().unwrap_or(""),
            GroupBy::Model => r.model().unwrap_or(""),
            GroupBy::Route => &r.route,
            GroupBy::Upstream => r.upstream.as_deref().unwrap_or(""),
        }
        .to_string();
        let row = acc
            .entry((bucket, group.clone().into_bytes()))
            .or_insert(UsageRow {
                bucket_start_us: bucket,
                group,
                requests: 0,
                input: 0,
                output: 0,
                cache_read: 0,
                cache_write: 0,
                reasoning: 0,
                cost_micros: 0,
                unpriced: 0,
                cache_hits: 0,
                saved_micros: 0,
            });
        row.requests += 1;
        if r.cache_hit {
            // What a hit saved, apart from what was spent.
            row.cache_hits += 1;
            row.saved_micros += r.pricing.cost_micros().unwrap_or(0);
            continue;
        }
        row.input += r.tokens.input as i64;
        row.output += r.tokens.output as i64;
        row.cache_read += r.tokens.cache_read as i64;
        row.cache_write += r.tokens.cache_write as i64;
        row.reasoning += r.tokens.reasoning as i64;
        row.cost_micros += r.pricing.cost_micros().unwrap_or(0);
        row.unpriced += i64::from(matches!(r.pricing, Pricing::Unpriced));
    }
    acc.into_values().collect()
}

/// Every grouping and bucketing over `[from, to)`.
pub fn all_queries(from_us: i64, to_us: i64) -> Vec<sluice_ledger::UsageQuery> {
    use sluice_ledger::{Bucket, GroupBy, UsageQuery};
    let mut out = Vec::new();
    for group_by in [
        GroupBy::Key,
        GroupBy::Team,
        GroupBy::Model,
        GroupBy::Route,
        GroupBy::Upstream,
    ] {
        for bucket in [Bucket::Hour, Bucket::Day, Bucket::None] {
            out.push(UsageQuery {
                from_us,
                to_us,
                group_by,
                bucket,
            });
        }
    }
    out
}

/// The direct-SQL totals over `[from, to)`: requests, input, output, cache_read,
/// cache_write, reasoning, cost, unpriced. The same text runs on both databases.
/// Every record counts as a request; cache hits' tokens and costs are what they saved, not
/// spend, so the sums leave them out.
pub const DIRECT_SUM: &str = "SELECT COUNT(*), \
    CAST(SUM(input_tokens) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(SUM(output_tokens) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(SUM(cache_read_tokens) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(SUM(cache_write_tokens) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(SUM(reasoning_tokens) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(SUM(cost_micros) FILTER (WHERE NOT cache_hit) AS BIGINT), \
    CAST(COUNT(*) FILTER (WHERE pricing = 1 AND NOT cache_hit) AS BIGINT) \
    FROM sluice_requests WHERE ts_us >= {from} AND ts_us < {to}";

pub fn direct_sum_sql(from_us: i64, to_us: i64) -> String {
    DIRECT_SUM
        .replace("{from}", &from_us.to_string())
        .replace("{to}", &to_us.to_string())
}

pub fn totals_array(t: &sluice_ledger::query::UsageTotals) -> [i64; 8] {
    [
        t.requests,
        t.input,
        t.output,
        t.cache_read,
        t.cache_write,
        t.reasoning,
        t.cost_micros,
        t.unpriced,
    ]
}

/// A config for tests: small batches, quick flushes.
pub fn test_config() -> sluice_ledger::LedgerConfig {
    sluice_ledger::LedgerConfig {
        queue_capacity: 100_000,
        batch_size: 500,
        flush_interval: Duration::from_millis(20),
        write_timeout: Duration::from_secs(10),
        ..sluice_ledger::LedgerConfig::default()
    }
}

/// Polls `f` every 10 ms until it is true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `got == want`, reporting only the first difference (the rows are many).
pub fn assert_rows_eq(
    got: &[sluice_ledger::UsageRow],
    want: &[sluice_ledger::UsageRow],
    q: &sluice_ledger::UsageQuery,
) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{q:?}: {} rows, expected {}; first difference at row {i}:\n got  {:?}\n want {:?}",
            got.len(),
            want.len(),
            got.get(i),
            want.get(i)
        );
    }
}
