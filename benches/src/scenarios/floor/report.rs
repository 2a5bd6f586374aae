//! The report of a `floor` run: its generator line, its tables, checks and notes.

use super::FloorFigures;
use crate::common::{Check, GeneratorInfo};
use crate::procfs;
use crate::stats::{fmt_bytes, fmt_count, kv, table, LATENCY_HEADER};

fn load_label(f: &FloorFigures) -> String {
    let what = if f.beats_per_frame == 1 {
        "heartbeat".to_owned()
    } else {
        format!("Heartbeats frame of {} beats", f.beats_per_frame)
    };
    if f.closed_loop {
        format!("closed loop: one {what} outstanding per connection")
    } else {
        format!(
            "open loop: {} hb/s offered, each connection every {:.1} ms on a fixed timeline, one {what} outstanding at most (latency from the intended send time)",
            fmt_count(f.offered_hb_per_s.unwrap_or_default()),
            f.heartbeat_interval_ms.unwrap_or_default()
        )
    }
}

pub(super) fn generator(f: &FloorFigures) -> GeneratorInfo {
    GeneratorInfo {
        driver: "raw TCP with the protocol's Codec, one task per connection",
        members: f.conns * f.beats_per_frame,
        connections: f.conns,
        members_per_conn: f.beats_per_frame,
        multiplexed: f.beats_per_frame > 1,
        batch_heartbeats: f.beats_per_frame > 1,
        load: load_label(f),
    }
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "n/a".to_owned(), f)
}

pub(super) fn render(f: &FloorFigures) -> String {
    let threads = f.server_threads.map_or_else(
        || format!("tokio's default ({})", procfs::cpus()),
        |n| n.to_string(),
    );
    let answers = if f.beats_per_frame == 1 {
        format!(
            "a canned Heartbeat answer ({} B) per Heartbeat frame ({} B)",
            f.response_frame_bytes, f.request_frame_bytes
        )
    } else {
        format!(
            "a canned Heartbeats answer of {n} results ({} B) per Heartbeats frame of {n} beats ({} B)",
            f.response_frame_bytes,
            f.request_frame_bytes,
            n = f.beats_per_frame
        )
    };
    let mut out = kv(&[
        (
            "server",
            format!(
                "bare echo in a process of its own, {threads} worker threads, one task per connection; {answers}"
            ),
        ),
        (
            "setup",
            format!(
                "{:.1} s to start the server and open {} connections; {:.1} s warm-up",
                f.setup_s,
                fmt_count(f.conns as f64),
                f.warmup_s
            ),
        ),
        (
            "window",
            format!(
                "{:.1} s: sent {} hb/s, handled {} hb/s ({} beats per frame, {} frames/s), {:.2} % sent over 2 ms late",
                f.window_s,
                fmt_count(f.sent_hb_per_s),
                fmt_count(f.handled_hb_per_s),
                f.beats_per_frame,
                fmt_count(f.handled_frames_per_s),
                f.late_sends_pct
            ),
        ),
        (
            "server CPU",
            format!(
                "{:.2} s ({:.3} cores); {} hb per CPU-second ({} us CPU per hb); peak RSS {}",
                f.server_cpu_s,
                f.server_cores,
                opt(f.hb_per_cpu_s, fmt_count),
                opt(f.cpu_us_per_hb, |v| format!("{v:.2}")),
                opt(f.server_peak_rss_bytes, fmt_bytes),
            ),
        ),
        (
            "errors",
            format!(
                "heartbeat errors {}, connections lost {}",
                f.heartbeat_errors, f.connections_lost
            ),
        ),
    ]);
    out.push('\n');
    out.push_str(&table(
        &[
            "offered hb/s",
            "handled hb/s",
            "server cores",
            "hb per server CPU-s",
            "client cores",
        ],
        &[vec![
            f.offered_hb_per_s
                .map_or_else(|| "closed loop".to_owned(), fmt_count),
            fmt_count(f.handled_hb_per_s),
            format!("{:.3}", f.server_cores),
            opt(f.hb_per_cpu_s, fmt_count),
            format!("{:.3}", f.client_cores),
        ]],
    ));
    out.push('\n');
    let mut latencies = vec![f.rtt_from_sent.row("heartbeat RTT, from actual send")];
    if !f.closed_loop {
        latencies.insert(
            0,
            f.rtt_from_intended.row("heartbeat RTT, from intended send"),
        );
    }
    out.push_str(&table(&LATENCY_HEADER, &latencies));
    out
}

pub(super) fn checks(f: &FloorFigures) -> Vec<Check> {
    let mut checks = vec![Check::new(
        "heartbeats answered without error",
        "0 errors, 0 connections lost",
        format!(
            "{} errors, {} connections lost",
            f.heartbeat_errors, f.connections_lost
        ),
        f.heartbeat_errors == 0 && f.connections_lost == 0,
    )];
    if let Some(offered) = f.offered_hb_per_s {
        // Below it, the figure is not one at the offered rate.
        checks.push(Check::new(
            "offered rate handled",
            format!("within 10 % of {}", fmt_count(offered)),
            fmt_count(f.handled_hb_per_s),
            (f.handled_hb_per_s - offered).abs() <= 0.1 * offered,
        ));
    }
    checks
}

pub(super) fn notes(f: &FloorFigures) -> Vec<String> {
    let mut notes = vec![
        "no coordinator: the server only decodes heartbeats and writes a canned answer; its hb per CPU-second is the ceiling of rollcall's steady figure on this machine".to_owned(),
    ];
    if f.beats_per_frame > 1 {
        notes.push(format!(
            "{n} beats per Heartbeats frame: hb figures count beats (renewals), as steady's do with --batch-heartbeats; compare with steady --members-per-conn {n} --batch-heartbeats",
            n = f.beats_per_frame
        ));
    }
    if f.hb_per_cpu_s.is_none() {
        notes.push(
            "the server's CPU time did not move over the window (clock ticks of 10 ms): run longer or faster"
                .to_owned(),
        );
    }
    notes
}
