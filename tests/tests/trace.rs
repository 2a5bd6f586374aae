//! `rollcall trace` against a real server over loopback TCP: members beat, one's
//! connection closes, another comes back on a new one, and the CSV the command writes
//! has every beat with its sequence number and those events, as TraceGroup version 1
//! carries them.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use rollcall_tests::{bounded, join, start, test_config, Member, RawClient};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");

/// One line of `rollcall trace`'s output.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    Beat {
        t: f64,
        member: String,
        seq: u64,
    },
    Member {
        kind: String,
        t: f64,
        member: String,
    },
    Shard {
        kind: String,
        t: f64,
        dur: f64,
    },
}

impl Line {
    fn t(&self) -> f64 {
        match self {
            Self::Beat { t, .. } | Self::Member { t, .. } | Self::Shard { t, .. } => *t,
        }
    }
}

fn parse(line: &str) -> Line {
    let fields: Vec<&str> = line.split(',').collect();
    let number = |s: &str| -> f64 { s.parse().unwrap_or_else(|_| panic!("'{line}'")) };
    match fields[..] {
        [kind @ ("closed" | "opened"), t, member] => Line::Member {
            kind: kind.into(),
            t: number(t),
            member: member.into(),
        },
        [kind @ ("pause" | "lag" | "silent"), t, dur] => Line::Shard {
            kind: kind.into(),
            t: number(t),
            dur: number(dur),
        },
        [t, member, seq] => Line::Beat {
            t: number(t),
            member: member.into(),
            seq: seq.parse().unwrap_or_else(|_| panic!("'{line}'")),
        },
        _ => panic!("not a trace line: '{line}'"),
    }
}

#[tokio::test]
async fn rollcall_trace_writes_beats_with_their_sequence_numbers_and_connection_events() {
    let server = start(test_config()).await;
    let addr = server.local_addr();
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(Member::join(addr, join("g", "t", 6, 10_000)).await);
    }

    let mut child = tokio::process::Command::new(BIN)
        .args([
            "trace",
            "g",
            "--duration",
            "3s",
            "--addr",
            &addr.to_string(),
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("runs");
    // The trace records from the command's first read on, which it announces.
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut said = String::new();
    bounded("the trace begins", async {
        while let Some(line) = stderr.next_line().await.expect("reads stderr") {
            said.push_str(&line);
            said.push('\n');
            if line.contains("tracing group g") {
                return;
            }
        }
        panic!("the command ended without tracing: {said}");
    })
    .await;

    for _ in 0..4 {
        for m in &mut members {
            m.heartbeat().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last member's process goes away: its connection closes.
    let gone = members.pop().expect("three members");
    let gone_id = gone.id.clone();
    drop(gone);
    // The first comes back on a new connection and beats there.
    members[0].client = RawClient::connected(addr).await;
    members[0].heartbeat().await;
    members[1].heartbeat().await;

    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .await
        .expect("reads stdout");
    let status = bounded("the trace ends", child.wait())
        .await
        .expect("exits");
    while let Some(line) = stderr.next_line().await.expect("reads stderr") {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(status.success(), "{status}: {said}");

    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("time_s,member_id,seq"), "{stdout}");
    let lines: Vec<Line> = lines.map(parse).collect();
    assert!(
        lines.windows(2).all(|w| w[0].t() <= w[1].t()),
        "lines go back in time: {stdout}"
    );
    let mut seqs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for line in &lines {
        if let Line::Beat { member, seq, .. } = line {
            seqs.entry(member).or_default().push(*seq);
        }
    }
    // Every beat sent after the trace began, each member's numbered as it sent them.
    let (back, stayed) = (&members[0].id, &members[1].id);
    assert_eq!(
        seqs.get(back.as_str()),
        Some(&vec![1, 2, 3, 4, 5]),
        "{stdout}"
    );
    assert_eq!(
        seqs.get(stayed.as_str()),
        Some(&vec![1, 2, 3, 4, 5]),
        "{stdout}"
    );
    assert_eq!(
        seqs.get(gone_id.as_str()),
        Some(&vec![1, 2, 3, 4]),
        "{stdout}"
    );
    let at = |wanted: &Line| lines.iter().position(|l| l == wanted);
    let last_beat_of = |id: &str| {
        lines
            .iter()
            .rposition(|l| matches!(l, Line::Beat { member, .. } if member == id))
    };
    let closed = lines
        .iter()
        .position(|l| matches!(l, Line::Member { kind, member, .. } if kind == "closed" && *member == gone_id))
        .unwrap_or_else(|| panic!("no closed line for {gone_id}: {stdout}"));
    assert!(closed > last_beat_of(&gone_id).expect("beats"), "{stdout}");
    // The member back on a new connection: `opened`, then its fifth beat.
    let opened = lines
        .iter()
        .position(|l| matches!(l, Line::Member { kind, member, .. } if kind == "opened" && member == back))
        .unwrap_or_else(|| panic!("no opened line for {back}: {stdout}"));
    let fifth = lines
        .iter()
        .find(|l| matches!(l, Line::Beat { member, seq: 5, .. } if member == back))
        .expect("the fifth beat");
    assert!(opened < at(fifth).expect("there"), "{stdout}");
    // The shard's events have no member, and a duration.
    assert!(lines
        .iter()
        .all(|l| !matches!(l, Line::Shard { dur, .. } if *dur <= 0.0)));
    server.shutdown().await.unwrap();
}
