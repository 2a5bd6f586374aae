use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Wrapper {
    #[command(flatten)]
    args: DetectorArgs,
}

fn args(extra: &[&str]) -> DetectorArgs {
    Wrapper::parse_from(
        std::iter::once("lab")
            .chain(extra.iter().copied())
            .chain(["--quiet"]),
    )
    .args
}

/// A short seed 002 run end to end: the figures, the checks and both charts.
#[test]
fn smoke_seed002() {
    let dir = std::env::temp_dir().join(format!("rollcall-lab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (chart, timeline) = (dir.join("chart.svg"), dir.join("timeline.svg"));
    let a = args(&[
        "--preset",
        "seed002",
        "--runs",
        "3",
        "--svg",
        chart.to_str().unwrap(),
        "--timeline-svg",
        timeline.to_str().unwrap(),
    ]);
    let out = lab(&a).expect("the lab runs");
    let f = &out.figures;
    assert_eq!(f.runs, 3);
    assert_eq!(f.crash_s, Some(100.0));
    assert_eq!(f.members, 20);
    assert_eq!(
        f.settings.len(),
        (11 + 12) * 2,
        "10 fixed timeouts and the session's, 4 φ × 3 floors; a process and a silent crash"
    );
    let fixed = |t: f64| {
        f.settings
            .iter()
            .find(|s| s.setting.detector == DetectorKind::Fixed && s.setting.session_s == t)
            .expect("swept")
    };
    assert_eq!(
        fixed(1.5).runs_with_false_expulsion,
        3,
        "1.5 s mourns the pause"
    );
    assert_eq!(fixed(6.0).false_expulsions, 0);
    assert!(
        out.checks.iter().all(|c| c.met),
        "{:?}\n{}",
        out.checks,
        out.text
    );
    assert!(out.text.contains("mourns the pause"), "{}", out.text);
    for path in [&chart, &timeline] {
        let svg = std::fs::read_to_string(path).expect("written");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace file streamed: the crash line found, the QoS of the hand-made trace of
/// `qos`'s tests; a bad line is an error naming it.
#[test]
fn smoke_csv() {
    let dir = std::env::temp_dir().join(format!("rollcall-lab-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let good = dir.join("good.csv");
    std::fs::write(&good, "arrival_s\n0\n1\n2\n5\n6\n7\n8\n14\n15\ncrash,16\n").expect("write");
    let a = args(&[
        "--trace",
        good.to_str().unwrap(),
        "--crash-kind",
        "silent",
        "--timeouts",
        "4s",
        "--phi",
        "8",
        "--floor",
        "1",
    ]);
    let out = lab(&a).expect("the lab runs");
    let f = &out.figures;
    assert_eq!((f.inputs, f.crash_s), (9, Some(16.0)));
    let s = &f.settings[0];
    assert_eq!((s.false_suspicions, s.false_expulsions), (2, 1));
    assert_eq!(s.detection_median_s, Some(3.0));
    assert!((s.query_accuracy - 0.5).abs() < 1e-9);
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "0\n1\n1.5.2\n").expect("write");
    let a = args(&["--trace", bad.to_str().unwrap()]);
    let e = lab(&a).err().expect("a bad line is an error");
    assert!(e.contains("bad.csv:3:"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
