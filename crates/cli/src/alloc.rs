//! The process's allocator: jemalloc, configured to give freed memory back to the system.
//!
//! The design decision to know: a daemon lives through thousands of sessions, each of which
//! allocates and frees many small blocks (events, JSON, buffers) on every async worker. glibc's
//! malloc keeps what was freed in its per-thread arenas, and a page stays resident while one live
//! block sits in it; trimming (`intendant_daemon::memory`) gives back only whole free pages. The
//! soak (`bench/src/bin/soak.rs`) measured the daemon's live heap growing by about 0.4 MiB over a
//! second wave of 100 sessions while its RSS grew by 5-6.6 MiB, so its goal (RSS after a second
//! wave within 10% of the first) missed at 1.11-1.14x. jemalloc packs blocks of a size class
//! together, and with the options below a background thread returns pages that stay unused for
//! half a second (`dirty_decay_ms`) straight to the system (`muzzy_decay_ms:0`): the full soak
//! (500 sessions, then 250) measured 1.063-1.078x in four runs, where glibc's measured
//! 1.06-1.15x, over the goal in three of five (`docs/benchmarks.md`). Only this binary's Rust
//! heap is jemalloc's; C libraries that call `malloc` themselves (the bundled SQLite) still use
//! glibc's, which the daemon trims.

/// Every allocation of this binary (and of its test harness) goes through jemalloc.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The options jemalloc reads at its start: its `malloc_conf` (the crate's builds prefix every
/// symbol with `_rjem_`), a C string read before `main` runs. `MALLOC_CONF` in the environment
/// (`_RJEM_MALLOC_CONF` for this build) is read after it and can override it.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: the pointer is the first byte of a 'static, NUL-terminated string.
    unsafe { &*c"background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0".as_ptr() },
);

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, c_void};

    /// Reads jemalloc's option `name` of type `T` (as its `mallctl` reports it).
    fn option<T: Default>(name: &CStr) -> T {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `value` is a `T` of `len` bytes, the type jemalloc documents for `name`; no
        // new value is written.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast::<c_void>(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {name:?}");
        assert_eq!(len, std::mem::size_of::<T>());
        value
    }

    /// The options are the ones jemalloc runs with: a misspelled symbol would be ignored
    /// without a word, and freed pages kept for jemalloc's default of ten seconds.
    #[test]
    fn jemalloc_runs_with_the_options_that_give_freed_pages_back() {
        assert!(option::<bool>(c"opt.background_thread"));
        assert_eq!(option::<isize>(c"opt.dirty_decay_ms"), 500);
        assert_eq!(option::<isize>(c"opt.muzzy_decay_ms"), 0);
    }
}
