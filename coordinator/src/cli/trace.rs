//! `rollcall trace GROUP`: a group's heartbeat arrivals on the coordinator's clock,
//! as CSV on standard output, for the detector lab (`rollcall-bench detector`).
//!
//! It polls TraceGroup with a cursor for `--duration`: every arrival once, oldest
//! first, as `time_s,member_id` lines (seconds since the trace began), or, with
//! `--member`, that member's arrival times alone, one per line. The polls share one
//! connection, opened again if the coordinator restarts.

use super::*;

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
        Ok(count) => {
            eprintln!("rollcall: {count} arrivals recorded");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rollcall: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Records for `--duration` into `out`; the number of arrivals written.
async fn record(args: &TraceArgs, out: &mut impl std::io::Write) -> Result<u64, AdminError> {
    let write_failed = |e: std::io::Error| AdminError::Unexpected(format!("cannot write: {e}"));
    if args.member.is_none() {
        writeln!(out, "time_s,member_id").map_err(write_failed)?;
    }
    let until = tokio::time::Instant::now() + args.duration;
    let mut next_progress = tokio::time::Instant::now() + Duration::from_secs(1);
    let (mut epoch, mut cursor, mut written) = (0, 0, 0u64);
    let mut session = AdminSession::new(&args.admin);
    loop {
        let request = Request::TraceGroup(TraceGroupRequest {
            group: args.group.clone(),
            epoch,
            cursor,
        });
        let page = match session.request(request).await? {
            Response::TraceGroup(page) => page,
            Response::Error(e) if e.code == ErrorCode::UnknownGroup => {
                return Err(AdminError::UnknownGroup(args.group.clone()))
            }
            Response::Error(e) => {
                return Err(AdminError::Refused {
                    code: e.code,
                    message: e.message,
                })
            }
            other => return Err(AdminError::Unexpected(format!("{other:?}"))),
        };
        if epoch != 0 && page.epoch != epoch {
            eprintln!(
                "rollcall: the trace restarted (the coordinator let it lapse or restarted); arrivals in between are missing"
            );
        }
        if page.dropped > 0 {
            eprintln!(
                "rollcall: {} arrivals were dropped before they could be read",
                page.dropped
            );
        }
        let full = !page.arrivals.is_empty() && page.cursor > cursor && page.epoch == epoch;
        epoch = page.epoch;
        cursor = page.cursor;
        for a in &page.arrivals {
            let seconds = a.at_us as f64 / 1e6;
            match &args.member {
                Some(m) if *m == a.member_id => writeln!(out, "{seconds:.6}"),
                Some(_) => continue,
                None => writeln!(out, "{seconds:.6},{}", a.member_id),
            }
            .map_err(write_failed)?;
            written += 1;
        }
        let now = tokio::time::Instant::now();
        if now >= next_progress {
            eprintln!("rollcall: {written} arrivals recorded");
            next_progress = now + Duration::from_secs(1);
        }
        if now >= until {
            out.flush().map_err(write_failed)?;
            return Ok(written);
        }
        if !full {
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }
}
