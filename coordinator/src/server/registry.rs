//! The connections the server has open, by [`ConnId`], and the bounded queue of frames
//! waiting to be written to each.
//!
//! Shards send pushes through the registry and responses through the handle carried by
//! the request. A frame is encoded when it is queued, so the queue is bounded by the
//! bytes it holds (and by a number of frames). A send never waits: a connection whose
//! queue is full belongs to a client that does not read, and is disconnected instead of
//! letting the server's memory grow.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use metrics::Counter;
use parking_lot::{Mutex, RwLock};
use rollcall_protocol::{Body, EncodeError, ErrorCode, Frame, FrameKind, Push, Response};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::core::ConnId;

/// Spare capacity an encoded frame may keep; a buffer with more is copied to its size,
/// so that what a queue holds is what it counts.
const SLACK: usize = 4096;

/// The bounds of every connection's queue and how its frames are encoded.
#[derive(Debug)]
pub(crate) struct SendLimits {
    /// Frames queued, at most.
    pub(crate) frames: usize,
    /// Bytes queued (encoded, length prefixes included), at most; a frame is always
    /// accepted into an empty queue.
    pub(crate) bytes: usize,
    /// The largest frame that may be sent (length prefix excluded).
    pub(crate) max_frame_size: usize,
    /// Every connection's buffers together.
    pub(crate) budget: Arc<BufferBudget>,
    /// Counts frames that do not fit `max_frame_size`.
    pub(crate) too_large: Counter,
}

/// Bytes of connection buffers (frames being read, frames queued) over all
/// connections, beyond a free allowance each connection has: a ceiling on what
/// connections can make the coordinator hold, whatever their number. Within its
/// allowance a connection never touches the shared counter, so heartbeats and their
/// answers do not contend on it.
#[derive(Debug)]
pub(crate) struct BufferBudget {
    used: AtomicUsize,
    max: usize,
}

/// Buffer bytes per connection that are not counted against the [`BufferBudget`].
pub(crate) const FREE_BUFFER_BYTES: usize = 64 * 1024;

impl BufferBudget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Moves a connection's buffers from `from` to `to` bytes. Growing past the budget
    /// is refused (`false`, nothing changes); shrinking always succeeds.
    pub(crate) fn resize(&self, from: usize, to: usize) -> bool {
        let was = from.saturating_sub(FREE_BUFFER_BYTES);
        let will = to.saturating_sub(FREE_BUFFER_BYTES);
        if will <= was {
            if will < was {
                self.used.fetch_sub(was - will, Ordering::AcqRel);
            }
            return true;
        }
        let more = will - was;
        let before = self.used.fetch_add(more, Ordering::AcqRel);
        if before + more > self.max {
            self.used.fetch_sub(more, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The budget, bytes.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Bytes counted now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

impl SendLimits {
    /// The shared buffer budget, bytes.
    pub(crate) fn budget_max(&self) -> usize {
        self.budget.max()
    }
}

/// What a connection's task and everyone sending to it share: the connection's queue
/// of encoded frames (its outbox) and how to wake the task when frames are queued.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// Cancelled to close the connection at once.
    pub(crate) kill: CancellationToken,
    /// Set when the connection was killed because its queue was full.
    pub(crate) overflowed: AtomicBool,
    /// Set when it was killed because every connection's buffers together were at
    /// the budget (with `overflowed`).
    pub(crate) over_budget: AtomicBool,
    /// Set once the connection writes nothing more.
    closed: AtomicBool,
    /// Set with `kill`, for the connection's task to check cheaply.
    killed: AtomicBool,
    /// Wakes the connection's task when another task queued frames.
    pub(crate) ready: Notify,
    outbox: Mutex<Outbox>,
    /// Where the outbox's bytes are counted; `None` in tests that need no budget.
    budget: Option<Arc<BufferBudget>>,
}

impl Drop for ConnState {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.resize(self.outbox.get_mut().bytes, 0);
        }
    }
}

/// Frames queued for a connection and not yet handed to its socket.
#[derive(Debug, Default)]
struct Outbox {
    /// Encoded frames; a superseded one is left empty in its place.
    frames: VecDeque<Bytes>,
    /// Frames queued or being written.
    count: usize,
    /// Bytes queued or being written: added when a frame is queued, taken off once
    /// the connection has handed it to the socket.
    bytes: usize,
    /// The newest queued push of each kind for each member, by [`Outbox::taken`]
    /// position: a newer one supersedes it.
    latest: HashMap<SupersedeKey, u64>,
    /// How many frames were ever taken off the front (positions count from it).
    taken: u64,
}

/// A push kind (0 Assignment, 1 Revoke), a group and a member id.
type SupersedeKey = (u8, String, String);

impl ConnState {
    /// Closes the connection at once: cancels `kill` and wakes the connection's task.
    pub(crate) fn terminate(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.cancel();
        self.ready.notify_one();
    }

    /// Whether the connection was killed.
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Wakes the connection's task (to look at the server's state).
    pub(crate) fn wake(&self) {
        self.ready.notify_one();
    }

    /// Moves every queued frame to the end of `into`, skipping superseded ones.
    pub(crate) fn take(&self, into: &mut VecDeque<Bytes>) {
        let mut outbox = self.outbox.lock();
        outbox.taken += outbox.frames.len() as u64;
        outbox.latest.clear();
        into.extend(outbox.frames.drain(..).filter(|b| !b.is_empty()));
    }

    /// `frames` frames of `bytes` bytes were handed to the socket.
    pub(crate) fn written(&self, frames: usize, bytes: usize) {
        let mut outbox = self.outbox.lock();
        outbox.count = outbox.count.saturating_sub(frames);
        let left = outbox.bytes.saturating_sub(bytes);
        if let Some(budget) = &self.budget {
            budget.resize(outbox.bytes, left);
        }
        outbox.bytes = left;
    }

    /// Whether frames wait in the queue.
    pub(crate) fn has_queued(&self) -> bool {
        !self.outbox.lock().frames.is_empty()
    }

    /// The connection writes nothing more: later frames are dropped.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut outbox = self.outbox.lock();
        if let Some(budget) = &self.budget {
            budget.resize(outbox.bytes, 0);
        }
        *outbox = Outbox::default();
    }

    /// Bytes queued or being written.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.outbox.lock().bytes
    }
}

/// A way to queue frames for one connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    state: Arc<ConnState>,
    limits: Arc<SendLimits>,
}

/// What became of a frame handed to [`ConnHandle::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Queued for writing.
    Queued,
    /// The queue was full: the connection is being closed and the frame dropped.
    Overflow,
    /// The connection is gone.
    Closed,
    /// A push that does not fit the maximum frame size: dropped.
    TooLarge,
}

impl ConnHandle {
    /// A handle to a new connection's queue, bounded by `limits`.
    pub(crate) fn new(limits: Arc<SendLimits>) -> (Self, Arc<ConnState>) {
        let mut state = ConnState::default();
        state.budget = Some(limits.budget.clone());
        let state = Arc::new(state);
        (
            Self {
                state: state.clone(),
                limits,
            },
            state,
        )
    }

    /// Closes the connection at once.
    pub(crate) fn kill(&self) {
        self.state.terminate();
    }

    /// Wakes the connection's task.
    pub(crate) fn wake(&self) {
        self.state.wake();
    }

    /// Encodes and queues `frame` without waiting; on a full queue, kills the
    /// connection. A response too large for a frame is replaced by a `frame_too_large`
    /// error answer; a push too large is dropped. An Assignment or Revoke push replaces
    /// the member's previous one of its kind still in the queue (each states the
    /// member's whole situation, so only the newest matters): a client multiplexing
    /// many members through a storm of rebalances gets the last word for each rather
    /// than every step. `quiet`: the caller is the connection's own task (which writes
    /// the queue before it waits again), so it is not woken.
    pub(crate) fn send(&self, frame: Frame, quiet: bool) -> Sent {
        if self.state.closed.load(Ordering::Acquire) {
            return Sent::Closed;
        }
        let supersede = supersede_key(&frame);
        let Some(bytes) = encode(&frame, &self.limits) else {
            return Sent::TooLarge;
        };
        let len = bytes.len();
        let mut outbox = self.state.outbox.lock();
        let mut freed = (0, 0);
        if let Some(key) = &supersede {
            if let Some(at) = outbox.latest.get(key).copied() {
                let index = (at - outbox.taken) as usize;
                if let Some(old) = outbox.frames.get_mut(index) {
                    freed = (1, old.len());
                    *old = Bytes::new();
                }
            }
        }
        let count = outbox.count - freed.0;
        let bytes_before = outbox.bytes - freed.1;
        if count != 0 && (bytes_before + len > self.limits.bytes || count >= self.limits.frames) {
            drop(outbox);
            return self.overflow();
        }
        if !self.limits.budget.resize(outbox.bytes, bytes_before + len) {
            // Every connection's buffers together are at the ceiling: this one, which
            // has a backlog beyond its free allowance, is the one that goes.
            drop(outbox);
            self.state.over_budget.store(true, Ordering::Relaxed);
            return self.overflow();
        }
        outbox.count = count + 1;
        outbox.bytes = bytes_before + len;
        if let Some(key) = supersede {
            let at = outbox.taken + outbox.frames.len() as u64;
            outbox.latest.insert(key, at);
        }
        let was_empty = outbox.frames.is_empty();
        outbox.frames.push_back(bytes);
        drop(outbox);
        if was_empty && !quiet {
            self.state.ready.notify_one();
        }
        Sent::Queued
    }

    fn overflow(&self) -> Sent {
        self.state.overflowed.store(true, Ordering::Relaxed);
        self.state.terminate();
        Sent::Overflow
    }
}

/// The key under which a push supersedes an older one: its kind and its member.
fn supersede_key(frame: &Frame) -> Option<SupersedeKey> {
    match &frame.body {
        Body::Push(Push::Assignment(p)) => Some((0, p.group.clone(), p.member_id.clone())),
        Body::Push(Push::Revoke(p)) => Some((1, p.group.clone(), p.member_id.clone())),
        _ => None,
    }
}

/// `frame` encoded, length prefix included; for a response that cannot be encoded, an
/// error answer in its place; `None` for a push that cannot be.
fn encode(frame: &Frame, limits: &SendLimits) -> Option<Bytes> {
    // Most frames fit; larger ones grow the buffer as they are written.
    let mut buf = BytesMut::with_capacity(128);
    let Err(e) = frame.encode(&mut buf, limits.max_frame_size) else {
        return Some(if buf.capacity() - buf.len() > SLACK {
            Bytes::copy_from_slice(&buf)
        } else {
            buf.freeze()
        });
    };
    let header = frame.header();
    let (code, message) = match &e {
        EncodeError::FrameTooLarge { len, max } => {
            limits.too_large.increment(1);
            (
                ErrorCode::FrameTooLarge,
                format!("the answer would be a frame of {len} bytes, more than the coordinator's maximum of {max}; the connection stays open"),
            )
        }
        // A field the protocol cannot carry: a bug, not the client's doing.
        e => (
            ErrorCode::Internal,
            format!("the answer cannot be encoded: {e}"),
        ),
    };
    if header.kind != FrameKind::Response {
        error!(api_key = header.api_key, error = %e, "push cannot be encoded; dropped");
        return None;
    }
    warn!(api_key = header.api_key, error = %e, "answer cannot be encoded; answering {code} instead");
    let substitute = Frame::response(
        header.correlation_id,
        Response::error(header.api_key, code, message),
    );
    buf.clear();
    substitute.encode(&mut buf, limits.max_frame_size).ok()?;
    Some(buf.freeze())
}

/// Open connections, by id. Split into independently locked parts so that connections
/// opening and closing do not contend with pushes to other connections.
#[derive(Debug)]
pub(crate) struct Registry {
    parts: Box<[RwLock<HashMap<ConnId, ConnHandle>>]>,
    /// When a request was last read on any connection.
    pub(crate) traffic: Traffic,
    /// How late the runtime runs ready tasks (see [`probe_lag`]).
    pub(crate) lag: Lag,
}

const PARTS: usize = 16;

impl Default for Registry {
    fn default() -> Self {
        Self::new(1)
    }
}

/// How late the runtime has lately been in running a task that was ready: the
/// evidence the backlog guard needs that frames wait unread because the coordinator,
/// not its members, is behind. The probe's lateness, in microseconds, as a maximum
/// that decays by a quarter per wake (so a stall is remembered for a few hundred
/// milliseconds after it ends).
#[derive(Debug)]
pub(crate) struct Lag {
    /// One per probe (one per runtime that serves connections), each the latest
    /// lateness its probe saw, decayed; a held reader's wait goes in the first.
    slots: Box<[AtomicU64]>,
}

impl Default for Lag {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Lag {
    /// For `probes` probes (at least one).
    pub(crate) fn new(probes: usize) -> Self {
        Self {
            slots: (0..probes.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The runtimes' recent lateness: the worst of them.
    pub(crate) fn recent(&self) -> std::time::Duration {
        let us = self
            .slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        std::time::Duration::from_micros(us)
    }

    /// Something ready to run waited `late` (a reader held by a full shard queue).
    pub(crate) fn saw(&self, late: std::time::Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.slots[0].fetch_max(us, Ordering::Relaxed);
    }

    /// Probe `probe` woke `late`: its slot forgets a quarter of what it remembers, and
    /// keeps the larger of that and `late`.
    fn probe_woke(&self, probe: usize, late: std::time::Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let slot = &self.slots[probe % self.slots.len()];
        let before = slot.load(Ordering::Relaxed);
        // A reader's report between the load and the store may be lost; the next one
        // (it is still waiting, or will wait again) brings it back.
        slot.store(us.max(before - before / 4), Ordering::Relaxed);
    }
}

/// How often the lag probe asks to be woken: a quarter of the lateness the backlog
/// guard acts on ([`crate::core::guards::BACKLOG_FLOOR`]), so a stall that long reads at least
/// three quarters of its length. Finer costs an idle coordinator for nothing: in a
/// virtual machine each wake of an idle process costs it about 90 µs of CPU, and a
/// 10 ms probe was most of an idle coordinator's 10 ms of CPU per second.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(25);

/// Wakes every [`PROBE_EVERY`] and records, as probe `probe`, how much later than
/// asked it ran: a task ready to run on the same runtime (a connection with frames to
/// read) waits about as long. Runs until `stop`.
pub(crate) async fn probe_lag(
    registry: std::sync::Arc<Registry>,
    probe: usize,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut next = tokio::time::Instant::now() + PROBE_EVERY;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let now = tokio::time::Instant::now();
        registry
            .lag
            .probe_woke(probe, now.saturating_duration_since(next));
        next = now + PROBE_EVERY;
    }
}

/// When the server last read a request on any connection: the evidence the isolation
/// guard needs that the coordinator, not its members, has gone deaf. Kept at
/// millisecond resolution in one atomic, written only when it moves.
#[derive(Debug)]
pub(crate) struct Traffic {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Traffic {
    /// A request was read at `at`.
    pub(crate) fn heard(&self, at: Instant) {
        let ms =
            u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        if self.last_ms.load(Ordering::Relaxed) < ms {
            self.last_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// When a request was last read, if ever.
    pub(crate) fn last(&self) -> Option<Instant> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + std::time::Duration::from_millis(ms)),
        }
    }
}

impl Registry {
    /// For connections served by `runtimes` runtimes, each probed for its lateness.
    pub(crate) fn new(runtimes: usize) -> Self {
        Self {
            parts: (0..PARTS).map(|_| RwLock::default()).collect(),
            traffic: Traffic::default(),
            lag: Lag::new(runtimes),
        }
    }

    fn part(&self, conn: ConnId) -> &RwLock<HashMap<ConnId, ConnHandle>> {
        // Connection ids are sequential, so the low bits spread them evenly.
        &self.parts[(conn % PARTS as u64) as usize]
    }

    pub(crate) fn insert(&self, conn: ConnId, handle: ConnHandle) {
        self.part(conn).write().insert(conn, handle);
    }

    pub(crate) fn remove(&self, conn: ConnId) {
        self.part(conn).write().remove(&conn);
    }

    /// Queues `frame` for `conn`, if it is still open. The frame is encoded outside
    /// the lock.
    pub(crate) fn send(&self, conn: ConnId, frame: Frame) -> Sent {
        let handle = self.part(conn).read().get(&conn).cloned();
        match handle {
            Some(handle) => handle.send(frame, false),
            None => Sent::Closed,
        }
    }

    /// Every open connection.
    pub(crate) fn handles(&self) -> Vec<ConnHandle> {
        self.parts
            .iter()
            .flat_map(|p| p.read().values().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The number of open connections.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(|p| p.read().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::guards::{BACKLOG_FLOOR, BACKLOG_MEMORY};
    use rollcall_protocol::{Push, ShutdownPush};
    use std::time::Duration;

    fn push() -> Frame {
        Frame::push(Push::Shutdown(ShutdownPush {
            message: "x".into(),
        }))
    }

    fn limits(frames: usize, bytes: usize) -> Arc<SendLimits> {
        Arc::new(SendLimits {
            frames,
            bytes,
            max_frame_size: 1024,
            too_large: Counter::noop(),
            budget: Arc::new(BufferBudget::new(usize::MAX)),
        })
    }

    #[test]
    fn the_budget_counts_only_bytes_beyond_each_connections_allowance() {
        let budget = BufferBudget::new(100_000);
        assert!(budget.resize(0, FREE_BUFFER_BYTES));
        assert_eq!(budget.used(), 0);
        assert!(budget.resize(FREE_BUFFER_BYTES, FREE_BUFFER_BYTES + 60_000));
        assert_eq!(budget.used(), 60_000);
        // A second connection may not take it past the ceiling; nothing is counted.
        assert!(!budget.resize(0, FREE_BUFFER_BYTES + 50_000));
        assert_eq!(budget.used(), 60_000);
        assert!(budget.resize(0, FREE_BUFFER_BYTES + 40_000));
        assert!(budget.resize(FREE_BUFFER_BYTES + 60_000, 10));
        assert!(budget.resize(FREE_BUFFER_BYTES + 40_000, 0));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_backlog_past_the_shared_budget_kills_the_connection_that_grows_it() {
        let budget = Arc::new(BufferBudget::new(4096));
        let shared = Arc::new(SendLimits {
            frames: usize::MAX,
            bytes: usize::MAX,
            max_frame_size: 1 << 20,
            too_large: Counter::noop(),
            budget: budget.clone(),
        });
        let (a, a_state) = ConnHandle::new(shared.clone());
        let (b, b_state) = ConnHandle::new(shared);
        let big = || {
            Frame::push(Push::Shutdown(ShutdownPush {
                message: "x".repeat(8 * 1024),
            }))
        };
        // Within its free allowance a connection queues without counting.
        for _ in 0..7 {
            assert!(matches!(a.send(big(), true), Sent::Queued));
        }
        assert_eq!(budget.used(), 0);
        let mut sent = 0;
        while matches!(a.send(big(), true), Sent::Queued) {
            sent += 1;
            assert!(sent < 100, "the budget never stopped it");
        }
        assert!(a_state.over_budget.load(Ordering::Relaxed));
        assert!(budget.used() <= 4096);
        // The other connection, within its allowance, is untouched.
        assert!(matches!(b.send(big(), true), Sent::Queued));
        assert!(!b_state.is_killed());
        // Closing the first gives its bytes back.
        a_state.close();
        assert_eq!(budget.used(), 0);
        drop(b);
        drop(b_state);
    }

    fn drain(state: &ConnState) -> Vec<Bytes> {
        let mut out = VecDeque::new();
        state.take(&mut out);
        out.into()
    }

    #[test]
    fn full_queue_kills_the_connection_instead_of_growing() {
        let registry = Registry::default();
        let (handle, state) = ConnHandle::new(limits(2, 1 << 20));
        registry.insert(7, handle);
        assert_eq!(registry.send(7, push()), Sent::Queued);
        assert_eq!(registry.send(7, push()), Sent::Queued);
        assert!(!state.kill.is_cancelled());
        assert_eq!(registry.send(7, push()), Sent::Overflow);
        assert!(state.kill.is_cancelled());
        assert!(state.overflowed.load(Ordering::Relaxed));
        // Only what fitted was queued.
        assert_eq!(drain(&state).len(), 2);
    }

    #[test]
    fn sends_to_unknown_or_closed_connections_are_dropped() {
        let registry = Registry::default();
        assert_eq!(registry.send(1, push()), Sent::Closed);
        let (handle, state) = ConnHandle::new(limits(2, 1 << 20));
        registry.insert(1, handle);
        assert_eq!(registry.len(), 1);
        state.close();
        assert_eq!(registry.send(1, push()), Sent::Closed);
        registry.remove(1);
        assert_eq!(registry.len(), 0);
        assert_eq!(registry.send(1, push()), Sent::Closed);
    }

    fn assignment(member: &str, generation: u32) -> Frame {
        Frame::push(Push::Assignment(rollcall_protocol::AssignmentPush {
            group: "g".into(),
            member_id: member.into(),
            generation,
            partitions: Vec::new(),
        }))
    }

    fn generation_of(bytes: &Bytes) -> Option<(String, u32)> {
        match Frame::decode(&bytes[4..]).unwrap().body {
            Body::Push(Push::Assignment(a)) => Some((a.member_id, a.generation)),
            _ => None,
        }
    }

    #[test]
    fn a_newer_assignment_supersedes_the_queued_one_for_the_same_member() {
        let (handle, state) = ConnHandle::new(limits(3, 1 << 20));
        // Three frames fill the queue; superseded ones do not count against it.
        for generation in 1..=10 {
            assert_eq!(
                handle.send(assignment("a", generation), false),
                Sent::Queued
            );
            assert_eq!(
                handle.send(assignment("b", generation), false),
                Sent::Queued
            );
        }
        assert_eq!(handle.send(push(), false), Sent::Queued);
        assert!(!state.kill.is_cancelled());
        let queued = drain(&state);
        let seen: Vec<_> = queued.iter().map(generation_of).collect();
        // Only the newest of each member's, in the order the newest were queued, and
        // the shutdown push after them.
        assert_eq!(
            seen,
            vec![Some(("a".into(), 10)), Some(("b".into(), 10)), None]
        );
        // Once taken for writing, a frame is no longer superseded: the next one queues.
        assert_eq!(handle.send(assignment("a", 11), false), Sent::Overflow);
        let total: usize = queued.iter().map(Bytes::len).sum();
        state.written(3, total);
        assert_eq!(state.queued_bytes(), 0);
    }

    fn big_push(len: usize) -> Frame {
        Frame::push(Push::Shutdown(ShutdownPush {
            message: "x".repeat(len),
        }))
    }

    #[test]
    fn queued_bytes_are_bounded_and_returned_when_written() {
        let (handle, state) = ConnHandle::new(limits(100, 1000));
        // A frame of any size that fits a frame is accepted into an empty queue.
        assert_eq!(handle.send(big_push(1000), false), Sent::Queued);
        let first = state.queued_bytes();
        assert!(first > 1000);
        let taken = drain(&state);
        assert_eq!(taken[0].len(), first);
        // Still counted while being written; given back once written.
        assert_eq!(state.queued_bytes(), first);
        state.written(1, first);
        for _ in 0..4 {
            assert_eq!(handle.send(big_push(200), false), Sent::Queued);
        }
        assert!(!state.kill.is_cancelled());
        assert_eq!(handle.send(big_push(200), false), Sent::Overflow);
        assert!(state.kill.is_cancelled());
        assert!(state.overflowed.load(Ordering::Relaxed));
        assert!(state.queued_bytes() <= 1000);
    }

    #[test]
    fn too_large_answers_are_replaced_by_an_error_and_pushes_dropped() {
        let (handle, state) = ConnHandle::new(limits(100, 1 << 20));
        assert_eq!(handle.send(big_push(2000), false), Sent::TooLarge);
        assert!(drain(&state).is_empty());
        let answer = Frame::response(
            9,
            Response::error(7, ErrorCode::UnknownGroup, "y".repeat(2000)),
        );
        assert_eq!(handle.send(answer, false), Sent::Queued);
        let bytes = drain(&state).remove(0);
        let frame = Frame::decode(&bytes[4..]).unwrap();
        assert_eq!(frame.correlation_id, 9);
        let rollcall_protocol::Body::Response(Response::Error(e)) = frame.body else {
            panic!("{frame:?}");
        };
        assert_eq!(e.code, ErrorCode::FrameTooLarge);
        assert_eq!(e.api_key, 7);
        assert!(e
            .message
            .contains("more than the coordinator's maximum of 1024"));
    }

    /// A stall of the backlog floor is seen as one (a reader's wait is taken whole, and
    /// a probe due during the stall wakes at most one period less late than it
    /// lasted), remembered for a few wakes, and forgotten well within the guard's
    /// memory once the probe wakes on time again.
    #[test]
    fn lag_sees_a_floor_long_stall_and_forgets_it() {
        assert!(PROBE_EVERY * 4 <= BACKLOG_FLOOR);
        let lag = Lag::default();
        lag.saw(BACKLOG_FLOOR);
        assert_eq!(lag.recent(), BACKLOG_FLOOR);
        lag.probe_woke(0, BACKLOG_FLOOR - PROBE_EVERY);
        assert!(lag.recent() >= BACKLOG_FLOOR - PROBE_EVERY);
        let mut on_time_wakes = 0u32;
        while lag.recent() >= Duration::from_millis(1) {
            lag.probe_woke(0, Duration::ZERO);
            on_time_wakes += 1;
            assert!(on_time_wakes < 100, "the lag is never forgotten");
        }
        assert!(PROBE_EVERY * on_time_wakes < BACKLOG_MEMORY);
    }

    /// With a probe per connection thread, the worst thread counts, and each thread's
    /// lateness fades with its own probe's wakes only.
    #[test]
    fn lag_is_the_worst_probe_and_each_fades_on_its_own() {
        let lag = Lag::new(2);
        lag.probe_woke(1, Duration::from_millis(200));
        lag.probe_woke(0, Duration::from_millis(5));
        assert_eq!(lag.recent(), Duration::from_millis(200));
        for _ in 0..10 {
            lag.probe_woke(0, Duration::ZERO);
        }
        assert_eq!(lag.recent(), Duration::from_millis(200));
        lag.probe_woke(1, Duration::ZERO);
        assert_eq!(lag.recent(), Duration::from_millis(150));
        // A held reader's wait is seen whatever the probes say.
        lag.saw(Duration::from_millis(300));
        assert_eq!(lag.recent(), Duration::from_millis(300));
    }
}
