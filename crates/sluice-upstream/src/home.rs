//! Which thread a connection was opened on. When the gateway pins client connections to
//! worker threads (each its own single-threaded runtime), an HTTP/1.1 upstream connection's
//! socket is driven by the runtime of the thread that opened it; used from another thread,
//! each of its reads would wake two threads instead of one. So a connection records its home
//! thread, and a thread reusing an idle connection takes one of its own first.

use std::cell::Cell;

thread_local! {
    static HOME: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as worker `id` (1 and up; 0, the default, is "no worker": a
/// runtime shared by many threads, where any connection suits any thread).
pub fn set(id: usize) {
    HOME.with(|h| h.set(id));
}

/// The calling thread's worker id; 0 when it is not a worker.
pub(crate) fn current() -> usize {
    HOME.with(Cell::get)
}
