//! A criterion measurement in CPU time of the benchmark thread (`/proc/thread-self/schedstat`),
//! not wall time: on a machine shared with builds, wall time counts the time the thread
//! waited for a core. Elsewhere (no such file) it falls back to wall time. Shared by the
//! admission benches of sluice-state and sluice-gateway (`#[path]`).

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the calling thread, in ns, from the scheduler's own account.
pub struct ThreadCpuTime;

fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn wall_ns() -> u64 {
    static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(tokio::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns().unwrap_or_else(wall_ns)
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns()
            .unwrap_or_else(wall_ns)
            .saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, formatted as durations.
        WallTime.formatter()
    }
}
