//! Architecture invariant: the coordinator's core is deterministic and sans-IO.
//!
//! It never reads a clock, never does I/O, never spawns and never mentions tokio: time
//! arrives as `now`, and everything it wants done comes out as outputs. This test reads
//! the core's source and fails if any of that creeps in. The core's own tests (under
//! `core/tests/`) may read a clock once to get a base instant, so they are exempt.

use std::path::{Path, PathBuf};

const FORBIDDEN: &[(&str, &str)] = &[
    ("tokio", "the core must not depend on the async runtime"),
    ("Instant::now", "time must arrive as `now`"),
    ("SystemTime", "wall-clock time must arrive as an input"),
    ("std::net", "the core does no networking"),
    ("std::fs", "the core does no file I/O"),
    ("std::io", "the core does no I/O"),
    ("std::thread", "the core never spawns or sleeps"),
    ("std::process", "the core never spawns"),
    ("thread_rng", "randomness would make runs irreproducible"),
    ("metrics::", "observability goes out as events"),
    ("tracing::", "observability goes out as events"),
    (
        "serde",
        "encodings belong to the store and the protocol, not the core's types",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read core dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_never_reads_a_clock_does_io_or_mentions_tokio() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    rust_files(&core, &mut files);
    assert!(files.len() >= 5, "core sources not found in {core:?}");
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (needle, why) in FORBIDDEN {
                if code.contains(needle) {
                    violations.push(format!("{}:{}: `{needle}`: {why}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
