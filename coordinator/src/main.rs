//! The `rollcall` binary: see [`rollcall_coordinator::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    rollcall_coordinator::cli::main()
}
