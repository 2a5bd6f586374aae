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

/// A group's trace as `rollcall trace` writes it: three members with sequence numbers
/// (one loss), a connection that closed and reopened, a recorded pause of the
/// coordinator, and member 0's process crash (its connection closed after it). Under
/// the fixed 10 s rule with a 3.25 s lease, the crash is caught by the lease, the
/// pause expels nobody, and a silent crash (the close ignored) waits the session.
#[test]
fn smoke_group_trace_with_events() {
    let dir = std::env::temp_dir().join(format!("rollcall-lab-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("group.csv");
    let mut text = String::from("time_s,member_id,seq\n");
    for s in 1..=60u32 {
        for (i, m) in ["a", "b", "c"].iter().enumerate() {
            let t = f64::from(s) + 0.01 * i as f64;
            // b loses its 20th beat; the coordinator is paused from 30.5 s to 33 s
            // (the beats sent meanwhile are read at its wake).
            if *m == "b" && s == 20 {
                continue;
            }
            if (31..=32).contains(&s) {
                continue;
            }
            if s == 33 && i == 0 {
                text.push_str("pause,33.000000,2.500000\n");
            }
            if *m == "c" && s == 40 {
                text.push_str("closed,39.500000,c\nopened,40.000000,c\n");
            }
            if *m == "a" && s > 50 {
                continue;
            }
            text.push_str(&format!("{t:.6},{m},{s}\n"));
        }
        if s == 50 {
            text.push_str("closed,50.501000,a\n");
        }
    }
    text.push_str("crash,50.5\n");
    std::fs::write(&path, text).expect("write");
    let a = args(&[
        "--trace",
        path.to_str().unwrap(),
        "--member",
        "a",
        "--sweep",
        "defaults",
    ]);
    let out = lab(&a).expect("the lab runs");
    let f = &out.figures;
    assert_eq!(f.members, 3);
    let fixed = |kind: CrashKind| {
        f.settings
            .iter()
            .find(|s| s.setting.detector == DetectorKind::Fixed && s.crash == kind)
            .expect("swept")
    };
    for kind in [CrashKind::Process, CrashKind::Silent] {
        assert_eq!(fixed(kind).false_expulsions, 0, "{kind:?}: {}", out.text);
    }
    // Last beat at 50 s: the lease expels at 53.25 s, the session at 60 s.
    let process = fixed(CrashKind::Process).detection_median_s.unwrap();
    assert!((process - 2.75).abs() < 1e-6, "{process}");
    let silent = fixed(CrashKind::Silent).detection_median_s.unwrap();
    assert!((silent - 9.5).abs() < 1e-6, "{silent}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--crash` on a trace recorded without a crash: member 0's beats after it are a dead
/// process's and are not replayed, so the crash is detected, and its best fixed timeout
/// comes from the gaps it showed alive.
#[test]
fn crash_flag_cuts_the_member_s_later_beats_from_a_file() {
    let dir = std::env::temp_dir().join(format!("rollcall-lab-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("group.csv");
    let mut text = String::from("time_s,member_id,seq\n");
    for s in 1..=60u32 {
        for (i, m) in ["a", "b"].iter().enumerate() {
            let t = f64::from(s) + 0.01 * i as f64;
            text.push_str(&format!("{t:.6},{m},{s}\n"));
        }
    }
    std::fs::write(&path, text).expect("write");
    let a = args(&[
        "--trace",
        path.to_str().unwrap(),
        "--member",
        "a",
        "--crash",
        "20.5",
        "--sweep",
        "defaults",
    ]);
    let out = lab(&a).expect("the lab runs");
    let f = &out.figures;
    let fixed = |kind: CrashKind| {
        f.settings
            .iter()
            .find(|s| s.setting.detector == DetectorKind::Fixed && s.crash == kind)
            .expect("swept")
    };
    // Last beat alive at 20 s: the session expels at 30 s, 9.5 s after the crash.
    let silent = fixed(CrashKind::Silent).detection_median_s.unwrap();
    assert!((silent - 9.5).abs() < 1e-6, "{silent}: {}", out.text);
    assert_eq!(fixed(CrashKind::Silent).false_expulsions, 0, "{}", out.text);
    let best = f
        .best_fixed_per_trace
        .iter()
        .find(|b| b.crash == CrashKind::Silent)
        .and_then(|b| b.detection_median_s)
        .expect("best fixed");
    // Just over its 1 s gaps, 0.5 s after the crash.
    assert!((best - 0.501).abs() < 1e-3, "{best}");
    let _ = std::fs::remove_dir_all(&dir);
}
