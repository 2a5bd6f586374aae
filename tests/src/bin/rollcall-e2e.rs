//! The `rollcall` command line, built inside the test crate so that end-to-end tests can
//! run it as a process (`CARGO_BIN_EXE_rollcall-e2e`). Named differently from the real
//! binary so that the two never overwrite each other in the target directory.

#![forbid(unsafe_code)]

/// The allocator of the real binary (`coordinator/src/main.rs`), so that what the
/// tests measure of a coordinator's memory is what it would hold.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rollcall_coordinator::cli::main()
}
