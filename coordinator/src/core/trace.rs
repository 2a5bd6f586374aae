//! Heartbeat traces: what the core saw of a group's heartbeats, on the coordinator's
//! clock, kept while a client reads them (TraceGroup, `rollcall trace`), for the
//! detector lab: each beat with its sequence number, the members' connections closing
//! and opening, and the shard's evidence for its guards (late wake-ups, lag reports,
//! silences of the whole server), so that a replay can give the core the same inputs.
//!
//! A trace begins with the first TraceGroup request for a group and lapses when no
//! request has come for [`TRACE_LINGER`]; it holds at most [`TRACE_CAPACITY`]
//! entries (the oldest are dropped and counted), and a core traces at most
//! [`MAX_TRACES`] groups at once, so tracing has a fixed memory bound (40 bytes an
//! entry, member ids shared with the roster).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    ApiKey, Arrival, ArrivalKind, ErrorCode, Response, TraceGroupRequest, TraceGroupResponse,
};

use super::group::Member;
use super::{refuse, ConnId, Coordinator};

/// A trace nobody has asked for for this long ends.
pub(crate) const TRACE_LINGER: Duration = Duration::from_secs(10);

/// Entries a trace keeps, at most.
pub(crate) const TRACE_CAPACITY: usize = 65_536;

/// Groups a core traces at once, at most.
pub(crate) const MAX_TRACES: usize = 8;

/// A silence of the whole server this long or longer is recorded.
pub(crate) const SILENCE_FLOOR: Duration = Duration::from_millis(50);

/// Encoded bytes of entries one answer carries, about at most: well within the default
/// frame size (1 MiB); a client reads again at once while pages come back full. (A
/// coordinator configured with frames under 64 KiB answers `frame_too_large`.)
const PAGE_BYTES: usize = 48 * 1024;

/// One entry of a trace.
#[derive(Debug)]
struct Entry {
    /// Microseconds since the trace began.
    at_us: u64,
    /// The member's; `None` for the shard's events.
    member: Option<Arc<str>>,
    /// A beat's sequence number, or an event's duration in microseconds.
    value: u64,
    kind: ArrivalKind,
}

/// One group's trace.
#[derive(Debug)]
pub(crate) struct Trace {
    epoch: u64,
    began: Instant,
    /// When it lapses unless asked for again.
    until: Instant,
    /// The cursor of `entries[0]`.
    first: u64,
    entries: VecDeque<Entry>,
}

/// The core's traces: the epochs it hands out, and the groups it traces (for the
/// shard's events, which go to every one of them).
#[derive(Debug, Default)]
pub(crate) struct Tracing {
    /// The last trace epoch handed out.
    epoch: u64,
    /// Groups that began a trace and may still have it (checked when used).
    groups: Vec<Arc<str>>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Trace {
    fn new(epoch: u64, now: Instant) -> Self {
        Self {
            epoch,
            began: now,
            until: now + TRACE_LINGER,
            first: 0,
            entries: VecDeque::new(),
        }
    }

    /// Whether the trace has lapsed at `now`.
    pub(crate) fn lapsed(&self, now: Instant) -> bool {
        now > self.until
    }

    /// Adds an entry at `at`, or at the last entry's time if that is later: entries
    /// stay in order.
    fn push(&mut self, at: Instant, member: Option<&Arc<str>>, kind: ArrivalKind, value: u64) {
        if self.entries.len() == TRACE_CAPACITY {
            self.entries.pop_front();
            self.first += 1;
        }
        let last = self.entries.back().map_or(0, |e| e.at_us);
        self.entries.push_back(Entry {
            at_us: micros(at.saturating_duration_since(self.began)).max(last),
            member: member.cloned(),
            value,
            kind,
        });
    }

    /// A heartbeat of `m` with `sequence` arrived at `now` over `conn`: after an
    /// `Opened` entry if that is a new connection for a member known before.
    pub(crate) fn beat(&mut self, now: Instant, m: &Member, conn: ConnId, sequence: u64) {
        self.rebinding(now, m, conn);
        self.push(now, Some(&m.id), ArrivalKind::Beat, sequence);
    }

    /// `m` speaks over `conn` at `now`, before it is bound to it: an `Opened` entry if
    /// that is a new connection for a member bound before (its connection closed, or it
    /// moves from another); nothing for a member's first connection.
    pub(crate) fn rebinding(&mut self, now: Instant, m: &Member, conn: ConnId) {
        if m.conn != Some(conn) && (m.conn.is_some() || m.conn_closed) {
            self.push(now, Some(&m.id), ArrivalKind::Opened, 0);
        }
    }

    /// `member`'s connection closed at `now`.
    pub(crate) fn closed(&mut self, now: Instant, member: &Arc<str>) {
        self.push(now, Some(member), ArrivalKind::Closed, 0);
    }

    /// The next cursor.
    fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }
}

/// The group's trace at `now`, unless it has none or it lapsed (then it is dropped).
pub(crate) fn live(trace: &mut Option<Box<Trace>>, now: Instant) -> Option<&mut Trace> {
    if trace.as_ref().is_some_and(|t| t.lapsed(now)) {
        *trace = None;
    }
    trace.as_deref_mut()
}

impl Coordinator {
    /// A shard's event at `at` (a late wake-up, a lag report, a silence of the whole
    /// server), recorded in every group this core traces. Nothing to do, and no cost
    /// beyond a check, while none is traced.
    pub(crate) fn trace_shard(&mut self, at: Instant, kind: ArrivalKind, lasted: Duration) {
        if self.tracing.groups.is_empty() {
            return;
        }
        let now = self.now.unwrap_or(at).max(at);
        let groups = &mut self.groups;
        self.tracing.groups.retain(|name| {
            let Some(trace) = groups.get_mut(name).and_then(|g| live(&mut g.trace, now)) else {
                return false;
            };
            trace.push(at, None, kind, micros(lasted));
            true
        });
    }

    /// A member frame was read at `at` somewhere on the server: a silence of the whole
    /// server of at least [`SILENCE_FLOOR`] ended, if the last one was read that long
    /// before. (Called before the guards note `at`.)
    pub(crate) fn trace_silence(&mut self, at: Instant) {
        if self.tracing.groups.is_empty() {
            return;
        }
        let last = self.guards.last_frame_at;
        if let Some(silent) = last.and_then(|t| at.checked_duration_since(t)) {
            if silent >= SILENCE_FLOOR {
                self.trace_shard(at, ArrivalKind::Silence, silent);
            }
        }
    }

    /// TraceGroup: starts or extends the group's trace and answers the entries from
    /// the request's cursor on (none when the trace begins with this request): at
    /// version 1 every entry, at version 0 the heartbeats alone.
    pub(super) fn trace(&mut self, now: Instant, r: TraceGroupRequest) -> Response {
        let groups = &mut self.groups;
        self.tracing.groups.retain(|name| {
            groups
                .get_mut(name)
                .is_some_and(|g| live(&mut g.trace, now).is_some())
        });
        let traced = self.tracing.groups.len();
        let Some(group) = self.groups.get_mut(r.group.as_str()) else {
            return refuse(
                ApiKey::TraceGroup,
                ErrorCode::UnknownGroup,
                format!("no group {:?}", r.group),
            );
        };
        let trace = match live(&mut group.trace, now) {
            Some(t) => t,
            None => {
                if traced >= MAX_TRACES {
                    return refuse(
                        ApiKey::TraceGroup,
                        ErrorCode::InvalidRequest,
                        format!("this coordinator already traces {MAX_TRACES} groups; try again once one lapses"),
                    );
                }
                self.tracing.epoch += 1;
                self.tracing.groups.push(group.name.clone());
                group
                    .trace
                    .insert(Box::new(Trace::new(self.tracing.epoch, now)))
            }
        };
        trace.until = now + TRACE_LINGER;
        let version = u16::from(r.events);
        if r.epoch != trace.epoch {
            // A new trace (or the client's lapsed): it reads from here on.
            return Response::TraceGroup(TraceGroupResponse {
                epoch: trace.epoch,
                cursor: trace.end(),
                dropped: 0,
                arrivals: Vec::new(),
                events: r.events,
            });
        }
        let from = r.cursor.max(trace.first).min(trace.end());
        let dropped = trace.first.saturating_sub(r.cursor);
        let (mut bytes, mut read) = (0, 0);
        let mut arrivals = Vec::new();
        for e in trace.entries.iter().skip((from - trace.first) as usize) {
            if bytes >= PAGE_BYTES {
                break;
            }
            read += 1;
            if !r.events && e.kind != ArrivalKind::Beat {
                continue;
            }
            let beat = e.kind == ArrivalKind::Beat;
            let arrival = Arrival {
                member_id: e.member.as_deref().unwrap_or_default().to_owned(),
                at_us: e.at_us,
                sequence: if beat && r.events { e.value } else { 0 },
                kind: e.kind,
                value_us: if e.kind.is_shard_event() { e.value } else { 0 },
            };
            bytes += arrival.encoded_size(version);
            arrivals.push(arrival);
        }
        Response::TraceGroup(TraceGroupResponse {
            epoch: trace.epoch,
            cursor: from + read,
            dropped,
            arrivals,
            events: r.events,
        })
    }
}

#[cfg(test)]
mod tests {
    use rollcall_protocol::Request;

    use super::*;
    use crate::core::tests::{TestContext, M};

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

    fn trace(group: &str, epoch: u64, cursor: u64) -> Request {
        read(group, epoch, cursor, false)
    }

    fn read(group: &str, epoch: u64, cursor: u64, events: bool) -> Request {
        Request::TraceGroup(TraceGroupRequest {
            group: group.into(),
            epoch,
            cursor,
            events,
        })
    }

    /// A trace begun for `group`: its epoch and cursor.
    fn begin(t: &mut TestContext, group: &str) -> (u64, u64) {
        let Response::TraceGroup(page) = t.request(99, read(group, 0, 0, true)) else {
            panic!("no trace");
        };
        assert!(page.arrivals.is_empty());
        (page.epoch, page.cursor)
    }

    /// Every entry from `cursor` on, at version 1: (kind, member, sequence, duration µs).
    fn entries(
        t: &mut TestContext,
        group: &str,
        (epoch, cursor): (u64, u64),
    ) -> Vec<(ArrivalKind, String, u64, u64)> {
        let Response::TraceGroup(page) = t.request(99, read(group, epoch, cursor, true)) else {
            panic!("no trace");
        };
        assert!(page.events);
        assert!(page.arrivals.windows(2).all(|w| w[0].at_us <= w[1].at_us));
        page.arrivals
            .into_iter()
            .map(|a| (a.kind, a.member_id, a.sequence, a.value_us))
            .collect()
    }

    fn beat(m: &M) -> (ArrivalKind, String, u64, u64) {
        (ArrivalKind::Beat, m.id.clone(), m.seq, 0)
    }

    #[test]
    fn a_trace_pages_arrivals_from_its_cursor_and_counts_what_it_dropped() {
        let t0 = crate::core::tests::start_instant();
        let mut trace = Trace::new(7, t0);
        let a: Arc<str> = Arc::from("a");
        for i in 0..(TRACE_CAPACITY as u64 + 5) {
            trace.push(
                t0 + Duration::from_micros(i),
                Some(&a),
                ArrivalKind::Beat,
                i,
            );
        }
        assert_eq!(trace.first, 5);
        assert_eq!(trace.end(), TRACE_CAPACITY as u64 + 5);
        assert!(!trace.lapsed(t0 + TRACE_LINGER));
        assert!(trace.lapsed(t0 + TRACE_LINGER + Duration::from_millis(1)));
        // The memory bound: an entry is 40 bytes, ids shared with the roster.
        assert_eq!(std::mem::size_of::<Entry>(), 40);
    }

    #[test]
    fn trace_group_answers_unknown_group_and_starts_then_reads() {
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
        // The cursor is past the entries read: the 3 heartbeats, and the 3 silences of
        // the server (500 ms each) that came before them, which version 0 leaves out.
        assert_eq!(page.cursor, cursor + 6);
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

    /// Version 1 has each beat's sequence number, a closed connection and a member back
    /// on a new one; version 0 reads the same trace as heartbeats alone, its cursor past
    /// the events.
    #[test]
    fn version_1_records_sequences_and_connections_and_version_0_skips_them() {
        let mut t = TestContext::new();
        let mut a = t.join(1, "g", &[("t", 4)]);
        let mut b = t.join(2, "g", &[("t", 4)]);
        let from = begin(&mut t, "g");
        t.advance(Duration::from_millis(100));
        t.beat(&mut a);
        let a1 = beat(&a);
        t.beat(&mut b);
        let b1 = beat(&b);
        // A sequence number the member skipped (beats lost on the way) is as sent.
        a.seq += 2;
        t.advance(Duration::from_millis(100));
        t.beat(&mut a);
        let a2 = beat(&a);
        t.core.handle_disconnect(t.now, 2);
        t.advance(Duration::from_millis(100));
        b.conn = 3;
        t.beat(&mut b);
        let b2 = beat(&b);
        // A commit over another connection moves the member too.
        a.conn = 4;
        t.advance(Duration::from_millis(100));
        t.commit(&a, "t", 0, 1);
        let closed = (ArrivalKind::Closed, b.id.clone(), 0, 0);
        let opened = |m: &M| (ArrivalKind::Opened, m.id.clone(), 0, 0);
        let all = entries(&mut t, "g", from);
        let (silences, members): (Vec<_>, Vec<_>) = all
            .iter()
            .cloned()
            .partition(|e| e.0 == ArrivalKind::Silence);
        assert_eq!(
            members,
            [
                a1.clone(),
                b1,
                a2.clone(),
                closed,
                opened(&b),
                b2,
                opened(&a)
            ]
        );
        assert_eq!((a1.2, a2.2), (1, 4));
        // No member frame for 100 ms before each of the four steps.
        assert_eq!(
            silences,
            vec![(ArrivalKind::Silence, String::new(), 0, 100_000); 4]
        );

        let Response::TraceGroup(v0) = t.request(99, trace("g", from.0, from.1)) else {
            panic!("no trace");
        };
        assert!(!v0.events);
        let beats: Vec<_> = v0.arrivals.iter().map(|a| &a.member_id).collect();
        assert_eq!(beats, [&a.id, &b.id, &a.id, &b.id]);
        assert!(v0
            .arrivals
            .iter()
            .all(|e| e.kind == ArrivalKind::Beat && e.sequence == 0 && e.value_us == 0));
        assert_eq!(v0.cursor, from.1 + all.len() as u64);
    }

    /// A rejoin over a new connection is the member back (an `Opened`); a first join
    /// is not.
    #[test]
    fn a_first_join_is_no_event_and_a_rejoin_on_a_new_connection_is() {
        let mut t = TestContext::new();
        let a = t.join(1, "g", &[("t", 4)]);
        let from = begin(&mut t, "g");
        let b = t.join(2, "g", &[("t", 4)]);
        let mut again = t.join_request("g", &[("t", 4)]);
        again.member_id = Some(a.id.clone());
        t.core.handle_disconnect(t.now, 1);
        t.join_with(5, again).expect("rejoined");
        assert_eq!(
            entries(&mut t, "g", from),
            [
                (ArrivalKind::Closed, a.id.clone(), 0, 0),
                (ArrivalKind::Opened, a.id.clone(), 0, 0)
            ]
        );
        let _ = b;
    }

    /// Late wake-ups past 50 ms, lag reports from 100 ms and silences of the server from
    /// 50 ms go to every traced group, as the shard's (no member id), in order.
    #[test]
    fn the_shard_s_evidence_goes_to_every_traced_group() {
        let mut t = TestContext::new();
        let mut a = t.join(1, "g", &[("t", 4)]);
        let _h = t.join(2, "h", &[("t", 4)]);
        let _untraced = t.join(3, "u", &[("t", 4)]);
        let g = begin(&mut t, "g");
        let h = begin(&mut t, "h");
        t.beat(&mut a);
        let a1 = beat(&a);
        let ms = Duration::from_millis;
        // Lag: under the floor, nothing; from it, its size.
        t.core.observe_lag(t.now, ms(99));
        t.core.observe_lag(t.now, ms(150));
        // Silence: measured from the latest member frame (the beat above).
        let beat_at = t.now;
        t.advance(ms(40));
        t.core.observe_traffic(beat_at + ms(30));
        t.advance(ms(100));
        // 50 ms after the last frame (at +30 ms): recorded.
        t.core.observe_traffic(beat_at + ms(80));
        // A wake-up 2 s past the member's deadline: the core was not running.
        let deadline = t.core.poll_timeout().expect("a timer");
        t.now = deadline + Duration::from_secs(2);
        t.core.handle_timeout(t.now);
        let lag = (ArrivalKind::Lag, String::new(), 0, 150_000);
        let silent = (ArrivalKind::Silence, String::new(), 0, 50_000);
        let pause = (ArrivalKind::Pause, String::new(), 0, 2_000_000);
        assert_eq!(
            entries(&mut t, "g", g),
            [a1, lag.clone(), silent.clone(), pause.clone()]
        );
        assert_eq!(entries(&mut t, "h", h), [lag, silent, pause]);
    }

    /// A silence is placed at the frame that ended it, unless an entry above it is
    /// later: entries never go back in time.
    #[test]
    fn entries_never_go_back_in_time() {
        let mut t = TestContext::new();
        let a = t.join(1, "g", &[("t", 4)]);
        let from = begin(&mut t, "g");
        let heard = t.now;
        t.advance(Duration::from_millis(300));
        t.core.handle_disconnect(t.now, a.conn);
        t.core.observe_traffic(heard + Duration::from_millis(200));
        let Response::TraceGroup(page) = t.request(99, read("g", from.0, from.1, true)) else {
            panic!("no trace");
        };
        let got: Vec<_> = page
            .arrivals
            .iter()
            .map(|e| (e.kind, e.at_us, e.value_us))
            .collect();
        assert_eq!(got[0].0, ArrivalKind::Closed);
        assert_eq!(got[1].0, ArrivalKind::Silence);
        assert_eq!(got[1].1, got[0].1);
        assert_eq!(got[1].2, 200_000);
    }

    /// Nothing traced: the shard's events cost a check and are kept nowhere.
    #[test]
    fn without_a_trace_nothing_is_kept() {
        let mut t = TestContext::new();
        let mut a = t.join(1, "g", &[("t", 4)]);
        t.beat(&mut a);
        t.core.observe_lag(t.now, Duration::from_secs(1));
        assert!(t.core.tracing.groups.is_empty());
        assert!(t.core.groups.values().all(|g| g.trace.is_none()));
    }
}
