//! The daemon process's footprint: a tokio runtime of a few fixed workers, glibc's malloc held
//! to few arenas, and freed heap handed back to the kernel when the daemon goes idle.
//!
//! The daemon's own work is I/O: gRPC, `/metrics`, the collector's timer. GPU work runs in child
//! processes and every blocking call (NVML on its own thread, the collector, a work call's wait,
//! SQLite) on the blocking pool, so two workers serve any node. tokio's default of one worker
//! per core gave 16 idle threads on a 16-core node, each with its own malloc arena.

use std::time::Duration;

/// Runtime workers unless `TOKIO_WORKER_THREADS` says otherwise (tokio reads it when no count is
/// set in code, so an operator can still raise it).
pub const WORKER_THREADS: usize = 2;

/// An idle blocking-pool thread ends after this. tokio's default, 10 s, kept the collector's
/// thread alive for a third of every 30 s interval.
pub const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// glibc malloc arenas at most: one per thread that ever allocated (up to 8 per core) keeps
/// pages of every thread's churn resident; the daemon allocates little and rarely contends.
pub const MALLOC_ARENAS: i32 = 2;

/// Caps malloc's arenas; call before any thread starts. Elsewhere than glibc, nothing.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
    unsafe {
        let _ = libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}

/// Hands freed heap pages back to the kernel (glibc keeps them otherwise): after start-up and
/// after each collection, so the idle daemon's resident size is what it holds, not what it once
/// parsed. Elsewhere than glibc, nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it is safe to call from any thread at any time.
    unsafe {
        let _ = libc::malloc_trim(0);
    }
}

/// The daemon's runtime: [`WORKER_THREADS`] workers (or `TOKIO_WORKER_THREADS`), blocking
/// threads that end after [`BLOCKING_KEEP_ALIVE`] idle.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        b.worker_threads(WORKER_THREADS);
    }
    b.thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
}
