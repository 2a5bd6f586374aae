//! What the smoke tests that spawn `rollcall-bench` share: the run, bounded in time, and
//! its JSON report.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a run left: its exit status, its output (stdout and stderr, for messages) and
/// its JSON report.
pub(crate) struct Run {
    pub(crate) status: ExitStatus,
    pub(crate) report: String,
    pub(crate) json: serde_json::Value,
}

/// Runs `rollcall-bench <scenario> --spawn --rollcall-bin <rollcall-bench-serve> <args>
/// --quiet --json <tmp>` for at most `limit` (killed and failed past it) and reads its
/// JSON report.
pub(crate) fn run_bench(scenario: &str, args: &[&str], limit: Duration) -> Run {
    let spawn = [
        "--spawn",
        "--rollcall-bin",
        env!("CARGO_BIN_EXE_rollcall-bench-serve"),
    ];
    run_scenario(scenario, &[&spawn[..], args].concat(), limit)
}

/// Runs `rollcall-bench <scenario> <args> --quiet --json <tmp>`, as [`run_bench`] does,
/// for a scenario that starts no coordinator.
pub(crate) fn run_scenario(scenario: &str, args: &[&str], limit: Duration) -> Run {
    let json = std::env::temp_dir().join(format!(
        "rollcall-bench-{scenario}-smoke-{}.json",
        std::process::id()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
        .arg(scenario)
        .args(args)
        .args(["--quiet", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rollcall-bench starts");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the {scenario} smoke run took over {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!("the JSON report was not written ({e}), exit {status}:\n{report}")
    });
    let _ = std::fs::remove_file(&json);
    let json = serde_json::from_str(&text).expect("valid JSON");
    Run {
        status,
        report,
        json,
    }
}
