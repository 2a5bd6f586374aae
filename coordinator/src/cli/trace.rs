//! `rollcall trace GROUP`: what the coordinator saw of a group's heartbeats, on its own
//! clock, as CSV on standard output, for the detector lab (`rollcall-bench detector`).
//!
//! It polls TraceGroup with a cursor for `--duration`: every entry once, oldest first,
//! times in seconds since the trace began. At TraceGroup version 1 (unless the
//! coordinator answers `unsupported_version`) a heartbeat is a `time_s,member_id,seq`
//! line and an event a line of its own: `closed,t,member`, `opened,t,member`,
//! `pause,t,dur`, `lag,t,dur` or `silent,t,dur` (durations in seconds). At version 0
//! a heartbeat is a `time_s,member_id` line and there are no events. With `--member`,
//! that member's arrival times alone, one per line. The polls share one connection,
//! opened again if the coordinator restarts.

use super::*;
use rollcall_protocol::{Arrival, ArrivalKind};

/// How often the trace is read when the last page was not full.
const POLL: Duration = Duration::from_millis(200);

/// `rollcall trace`'s arguments.
#[derive(Debug, Args)]
pub(super) struct TraceArgs {
    /// The group.
    group: String,
    /// How long to record.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Only this member's arrivals, one time per line (the lab's single-trace form).
    #[arg(long)]
    member: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
}

pub(super) fn trace_command(args: TraceArgs) -> ExitCode {
    let runtime = match client_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let mut out = std::io::stdout().lock();
    match runtime.block_on(record(&args, &mut out)) {
        Ok(counts) => {
            eprintln!("rollcall: {counts}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rollcall: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// What a recording wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    beats: u64,
    events: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} heartbeats and {} events recorded",
            self.beats, self.events
        )
    }
}

/// Seconds, as the lab reads them.
fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

/// Writes one entry of a page read at version 1 (`events`) or 0; `member`: only that
/// member's heartbeats, as times alone. Returns whether it was a heartbeat, or `None`
/// when nothing was written.
fn write_entry(
    out: &mut impl std::io::Write,
    a: &Arrival,
    events: bool,
    member: Option<&str>,
) -> std::io::Result<Option<bool>> {
    let t = seconds(a.at_us);
    match (a.kind, member) {
        (ArrivalKind::Beat, Some(m)) if m == a.member_id => writeln!(out, "{t:.6}")?,
        (_, Some(_)) => return Ok(None),
        (ArrivalKind::Beat, None) if events => {
            writeln!(out, "{t:.6},{},{}", a.member_id, a.sequence)?;
        }
        (ArrivalKind::Beat, None) => writeln!(out, "{t:.6},{}", a.member_id)?,
        (ArrivalKind::Closed | ArrivalKind::Opened, None) => {
            writeln!(out, "{},{t:.6},{}", a.kind.as_str(), a.member_id)?;
        }
        (ArrivalKind::Pause | ArrivalKind::Lag | ArrivalKind::Silence, None) => {
            let dur = seconds(a.value_us);
            writeln!(out, "{},{t:.6},{dur:.6}", a.kind.as_str())?;
        }
    }
    Ok(Some(a.kind == ArrivalKind::Beat))
}

/// Records for `--duration` into `out`; what it wrote.
async fn record(args: &TraceArgs, out: &mut impl std::io::Write) -> Result<Counts, AdminError> {
    let write_failed = |e: std::io::Error| AdminError::Unexpected(format!("cannot write: {e}"));
    let until = tokio::time::Instant::now() + args.duration;
    let mut next_progress = tokio::time::Instant::now() + Duration::from_secs(1);
    let (mut epoch, mut cursor, mut counts) = (0, 0, Counts::default());
    // Version 1 until the coordinator says it does not speak it; `None` until the first
    // page (the header says which).
    let mut events = true;
    let mut speaking: Option<bool> = None;
    let mut session = AdminSession::new(&args.admin);
    loop {
        let request = Request::TraceGroup(TraceGroupRequest {
            group: args.group.clone(),
            epoch,
            cursor,
            events,
        });
        let page = match session.request(request).await? {
            Response::TraceGroup(page) => page,
            Response::Error(e) if e.code == ErrorCode::UnknownGroup => {
                return Err(AdminError::UnknownGroup(args.group.clone()))
            }
            // A coordinator that does not speak version 1 (the answer lists what it
            // does): version 0, unless lines of version 1 were written already (the
            // coordinator was replaced by an older one), which the file cannot mix.
            Response::Error(e) if e.code == ErrorCode::UnsupportedVersion && events => {
                if speaking == Some(true) {
                    return Err(AdminError::Refused {
                        code: e.code,
                        message: "the coordinator no longer speaks TraceGroup version 1; the trace stops here".into(),
                    });
                }
                events = false;
                continue;
            }
            Response::Error(e) => {
                return Err(AdminError::Refused {
                    code: e.code,
                    message: e.message,
                })
            }
            other => return Err(AdminError::Unexpected(format!("{other:?}"))),
        };
        if speaking.is_none() {
            if args.member.is_none() {
                let header = if events {
                    "time_s,member_id,seq"
                } else {
                    "time_s,member_id"
                };
                writeln!(out, "{header}").map_err(write_failed)?;
            }
            if !events {
                eprintln!(
                    "rollcall: the coordinator speaks TraceGroup version 0 only: heartbeats without sequence numbers, and no events"
                );
            }
            eprintln!(
                "rollcall: tracing group {} from now on (trace {}) for {}",
                args.group,
                page.epoch,
                format_duration(args.duration)
            );
            speaking = Some(events);
        }
        if epoch != 0 && page.epoch != epoch {
            eprintln!(
                "rollcall: the trace restarted (the coordinator let it lapse or restarted); arrivals in between are missing"
            );
        }
        if page.dropped > 0 {
            eprintln!(
                "rollcall: {} entries were dropped before they could be read",
                page.dropped
            );
        }
        let full = !page.arrivals.is_empty() && page.cursor > cursor && page.epoch == epoch;
        epoch = page.epoch;
        cursor = page.cursor;
        for a in &page.arrivals {
            match write_entry(out, a, events, args.member.as_deref()).map_err(write_failed)? {
                Some(true) => counts.beats += 1,
                Some(false) => counts.events += 1,
                None => {}
            }
        }
        let now = tokio::time::Instant::now();
        if now >= next_progress {
            eprintln!("rollcall: {counts}");
            next_progress = now + Duration::from_secs(1);
        }
        if now >= until {
            out.flush().map_err(write_failed)?;
            return Ok(counts);
        }
        if !full {
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(member: &str, at_us: u64, sequence: u64, kind: ArrivalKind, value_us: u64) -> Arrival {
        Arrival {
            member_id: member.into(),
            at_us,
            sequence,
            kind,
            value_us,
        }
    }

    fn lines(entries: &[Arrival], events: bool, member: Option<&str>) -> String {
        let mut out = Vec::new();
        for a in entries {
            write_entry(&mut out, a, events, member).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_kind_has_its_line_and_times_are_seconds() {
        let entries = [
            entry("m-1", 2_000_412, 3, ArrivalKind::Beat, 0),
            entry("", 2_962_000, 0, ArrivalKind::Silence, 62_000),
            entry("m-1", 3_418_000, 0, ArrivalKind::Closed, 0),
            entry("m-1", 4_000_001, 0, ArrivalKind::Opened, 0),
            entry("m-1", 4_000_001, 5, ArrivalKind::Beat, 0),
            entry("", 5_250_000, 0, ArrivalKind::Pause, 1_500_000),
            entry("", 6_000_000, 0, ArrivalKind::Lag, 120_000),
        ];
        assert_eq!(
            lines(&entries, true, None),
            "2.000412,m-1,3\n\
             silent,2.962000,0.062000\n\
             closed,3.418000,m-1\n\
             opened,4.000001,m-1\n\
             4.000001,m-1,5\n\
             pause,5.250000,1.500000\n\
             lag,6.000000,0.120000\n"
        );
        // Version 0: heartbeats without a sequence number (it never carries events).
        assert_eq!(lines(&entries[..1], false, None), "2.000412,m-1\n");
        // One member: its heartbeats' times alone.
        assert_eq!(lines(&entries, true, Some("m-1")), "2.000412\n4.000001\n");
    }
}
