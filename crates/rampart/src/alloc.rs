//! The global allocator: jemalloc on Linux with glibc.
//!
//! glibc's malloc keeps freed memory resident: after a burst of connections a worker's RSS stays
//! near the burst's peak until `malloc_trim` (which the runtime calls after a burst) walks its
//! heaps. jemalloc packs small allocations tighter and hands pages nobody uses back to the system
//! by itself: with a background thread and a decay of about a second, the memory of connections
//! that closed or went idle returns within a second or two, without anyone asking. Measured
//! against glibc on every bench scenario (docs/benchmarks.md, "Connection churn and burst
//! memory"): less RSS per idle connection after a burst, CPU per request equal or lower in all
//! but one scenario, and more RSS per idle connection in the sequential pattern (connections
//! opened one after another), where glibc reuses what the previous pass left resident.
//!
//! jemalloc is linked with its symbols prefixed (`_rjem_`): C code in the process (the TLS
//! library) still uses glibc's malloc, which `malloc_trim` keeps covering.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` from this symbol (the prefixed name of `malloc_conf`):
/// a background thread purges unused pages, dirty pages go back to the system (MADV_DONTNEED
/// after `muzzy`, or at once) within about a second. `MALLOC_CONF` in the environment can still
/// override any of them.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: Option<&'static libc::c_char> = Some(
    // SAFETY: a pointer to the first byte of a NUL-terminated string literal, valid for 'static.
    unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000".as_ptr() },
);
