//! A quick run of the `detector` lab end to end: the `rollcall-bench` binary on a short
//! noisy-then-calm trace (2 minutes noisy, then calm long enough for the adaptive
//! detector's tail memory to forget the noise, 3 runs), its JSON report and its charts;
//! and a trace file with a bad line, which must fail with the line named.

use std::process::Command;

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "rollcall-bench-detector-smoke-{}-{name}",
        std::process::id()
    ))
}

#[test]
fn detector_smoke_preset() {
    let (json, svg, timeline) = (temp("out.json"), temp("chart.svg"), temp("timeline.svg"));
    let output = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
        .args([
            "detector",
            "--preset",
            "noisy-then-calm",
            "--noisy-for",
            "120s",
            "--duration",
            "1300s",
            "--runs",
            "3",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .arg("--timeline-svg")
        .arg(&timeline)
        .output()
        .expect("rollcall-bench runs");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{}:\n{report}", output.status);
    assert!(report.contains("check"), "{report}");
    let text = std::fs::read_to_string(&json).expect("the JSON report was written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["scenario"], "detector", "{report}");
    let f = &v["figures"];
    assert_eq!(f["runs"], 3, "{report}");
    assert_eq!(f["crash_s"], 1300.5, "{report}");
    let settings = f["settings"].as_array().expect("settings");
    assert!(
        settings.iter().any(|s| s["detector"] == "fixed"),
        "{report}"
    );
    let adaptive = settings
        .iter()
        .find(|s| s["detector"] == "adaptive" && s["default"] == true)
        .expect("the adaptive detector at its defaults");
    assert_eq!(adaptive["false_expulsions"], 0, "{report}");
    for path in [&svg, &timeline] {
        let chart = std::fs::read_to_string(path).expect("chart written");
        assert!(chart.starts_with("<svg"), "{}", path.display());
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(&json);
}

#[test]
fn detector_smoke_bad_trace_file() {
    let path = temp("bad.csv");
    std::fs::write(&path, "seconds\n0.0\n1.0\n2.0 s\n").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
        .args(["detector", "--quiet", "--trace"])
        .arg(&path)
        .output()
        .expect("rollcall-bench runs");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.csv:4: '2.0 s'"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
