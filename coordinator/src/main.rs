//! The `rollcall` binary: see [`rollcall_coordinator::cli`].

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: the heartbeat path allocates small,
/// short-lived buffers (decoded strings, encoded frames) on two threads, where glibc's
/// malloc spent a fifth of the coordinator's CPU in `_int_malloc` and
/// `malloc_consolidate` and kept freed memory in per-thread arenas.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rollcall_coordinator::cli::main()
}
