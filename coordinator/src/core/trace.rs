//! Heartbeat traces: a group's heartbeat arrivals on the coordinator's clock, kept
//! while a client reads them (TraceGroup, `rollcall trace`), for the detector lab.
//!
//! A trace begins with the first TraceGroup request for a group and lapses when no
//! request has come for [`TRACE_LINGER`]; it holds at most [`TRACE_CAPACITY`]
//! arrivals (the oldest are dropped and counted), and a core traces at most
//! [`MAX_TRACES`] groups at once, so tracing has a fixed memory bound.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    ApiKey, Arrival, ErrorCode, Response, TraceGroupRequest, TraceGroupResponse,
};

use super::{refuse, Coordinator};

/// A trace nobody has asked for for this long ends.
pub(crate) const TRACE_LINGER: Duration = Duration::from_secs(10);

/// Arrivals a trace keeps, at most.
pub(crate) const TRACE_CAPACITY: usize = 65_536;

/// Groups a core traces at once, at most.
pub(crate) const MAX_TRACES: usize = 8;

/// Encoded bytes of arrivals one answer carries, about at most: well within the default
/// frame size (1 MiB); a client reads again at once while pages come back full. (A
/// coordinator configured with frames under 64 KiB answers `frame_too_large`.)
const PAGE_BYTES: usize = 48 * 1024;

/// One group's trace.
#[derive(Debug)]
pub(crate) struct Trace {
    epoch: u64,
    began: Instant,
    /// When it lapses unless asked for again.
    until: Instant,
    /// The sequence number of `arrivals[0]`.
    first: u64,
    arrivals: VecDeque<(Instant, Arc<str>)>,
}

impl Trace {
    fn new(epoch: u64, now: Instant) -> Self {
        Self {
            epoch,
            began: now,
            until: now + TRACE_LINGER,
            first: 0,
            arrivals: VecDeque::new(),
        }
    }

    /// Whether the trace has lapsed at `now`.
    pub(crate) fn lapsed(&self, now: Instant) -> bool {
        now > self.until
    }

    /// A heartbeat of `member` arrived at `now`.
    pub(crate) fn record(&mut self, now: Instant, member: &Arc<str>) {
        if self.arrivals.len() == TRACE_CAPACITY {
            self.arrivals.pop_front();
            self.first += 1;
        }
        self.arrivals.push_back((now, member.clone()));
    }

    /// The next sequence number.
    fn end(&self) -> u64 {
        self.first + self.arrivals.len() as u64
    }
}

impl Coordinator {
    /// TraceGroup: starts or extends the group's trace and answers the arrivals from
    /// the request's cursor on (none when the trace begins with this request).
    pub(super) fn trace(&mut self, now: Instant, r: TraceGroupRequest) -> Response {
        let traced = self
            .groups
            .values()
            .filter(|g| g.trace.as_ref().is_some_and(|t| !t.lapsed(now)))
            .count();
        let epoch_seed = &mut self.next_trace_epoch;
        let Some(group) = self.groups.get_mut(r.group.as_str()) else {
            return refuse(
                ApiKey::TraceGroup,
                ErrorCode::UnknownGroup,
                format!("no group {:?}", r.group),
            );
        };
        if group.trace.as_ref().is_some_and(|t| t.lapsed(now)) {
            group.trace = None;
        }
        let trace = match &mut group.trace {
            Some(t) => t,
            None => {
                if traced >= MAX_TRACES {
                    return refuse(
                        ApiKey::TraceGroup,
                        ErrorCode::InvalidRequest,
                        format!("this coordinator already traces {MAX_TRACES} groups; try again once one lapses"),
                    );
                }
                *epoch_seed += 1;
                group.trace.insert(Box::new(Trace::new(*epoch_seed, now)))
            }
        };
        trace.until = now + TRACE_LINGER;
        if r.epoch != trace.epoch {
            // A new trace (or the client's lapsed): it reads from here on.
            return Response::TraceGroup(TraceGroupResponse {
                epoch: trace.epoch,
                cursor: trace.end(),
                dropped: 0,
                arrivals: Vec::new(),
            });
        }
        let from = r.cursor.max(trace.first).min(trace.end());
        let dropped = trace.first.saturating_sub(r.cursor);
        let mut bytes = 0;
        let mut arrivals = Vec::new();
        for (at, member) in trace.arrivals.iter().skip((from - trace.first) as usize) {
            if bytes >= PAGE_BYTES {
                break;
            }
            bytes += member.len() + 10;
            arrivals.push(Arrival {
                member_id: member.to_string(),
                at_us: u64::try_from(at.duration_since(trace.began).as_micros())
                    .unwrap_or(u64::MAX),
            });
        }
        Response::TraceGroup(TraceGroupResponse {
            epoch: trace.epoch,
            cursor: from + arrivals.len() as u64,
            dropped,
            arrivals,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(r: &Response) -> (&TraceGroupResponse, Vec<(String, u64)>) {
        let Response::TraceGroup(t) = r else {
            panic!("{r:?}");
        };
        (
            t,
            t.arrivals
                .iter()
                .map(|a| (a.member_id.clone(), a.at_us))
                .collect(),
        )
    }

    #[test]
    fn a_trace_pages_arrivals_from_its_cursor_and_counts_what_it_dropped() {
        let t0 = crate::core::tests::start_instant();
        let mut trace = Trace::new(7, t0);
        let a: Arc<str> = Arc::from("a");
        for i in 0..(TRACE_CAPACITY as u64 + 5) {
            trace.record(t0 + Duration::from_micros(i), &a);
        }
        assert_eq!(trace.first, 5);
        assert_eq!(trace.end(), TRACE_CAPACITY as u64 + 5);
        assert!(!trace.lapsed(t0 + TRACE_LINGER));
        assert!(trace.lapsed(t0 + TRACE_LINGER + Duration::from_millis(1)));
    }

    #[test]
    fn trace_group_answers_unknown_group_and_starts_then_reads() {
        use crate::core::tests::TestContext;
        use rollcall_protocol::Request;

        let trace = |group: &str, epoch: u64, cursor: u64| {
            Request::TraceGroup(TraceGroupRequest {
                group: group.into(),
                epoch,
                cursor,
            })
        };
        let mut t = TestContext::new();
        let unknown = t.request(9, trace("nope", 0, 0));
        assert!(
            matches!(&unknown, Response::Error(e) if e.code == ErrorCode::UnknownGroup),
            "{unknown:?}"
        );
        let mut m = t.join(1, "g", &[("t", 4)]);
        let start = t.request(9, trace("g", 0, 0));
        let (page, got) = arrivals(&start);
        assert!(got.is_empty());
        let (epoch, cursor) = (page.epoch, page.cursor);
        assert_ne!(epoch, 0);
        for _ in 0..3 {
            t.advance(Duration::from_millis(500));
            t.beat(&mut m);
        }
        let read = t.request(9, trace("g", epoch, cursor));
        let (page, got) = arrivals(&read);
        assert_eq!(page.epoch, epoch);
        assert_eq!(page.dropped, 0);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|(id, _)| *id == m.id));
        // Half a second apart on the coordinator's clock.
        assert_eq!(got[1].1 - got[0].1, 500_000);
        assert_eq!(page.cursor, cursor + 3);
        // Read again from there: nothing new.
        let (_, none) = arrivals(&t.request(9, trace("g", epoch, page.cursor)));
        assert!(none.is_empty());
        // Nobody asks for long enough: the trace lapses (the member's beats stop being
        // kept), and the next request starts a new one: a new epoch, nothing before it.
        for _ in 0..12 {
            t.advance(Duration::from_secs(1));
            t.beat(&mut m);
        }
        let again = t.request(9, trace("g", epoch, page.cursor));
        let (page, got) = arrivals(&again);
        assert_ne!(page.epoch, epoch);
        assert!(got.is_empty());
    }
}
