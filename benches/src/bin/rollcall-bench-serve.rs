//! The `rollcall` command line, built inside the bench crate so that its end-to-end
//! smoke tests can spawn a coordinator process (`CARGO_BIN_EXE_rollcall-bench-serve`):
//! for the `pause` scenario to stop and resume, and for the `connections` scenario to
//! read the memory of. Named differently from the real binary so that the two never
//! overwrite each other in the target directory.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    rollcall_coordinator::cli::main()
}
