//! Each connection's outbox: the bounded queue of frames waiting to be written to it,
//! and the handle through which shards, the sender stage and the connection's own task
//! queue them.
//!
//! A frame is encoded when it is queued, so the queue is bounded by the bytes it holds
//! (and by a number of frames). A send never waits: a connection whose queue is full
//! belongs to a client that does not read, and is disconnected instead of letting the
//! server's memory grow.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use metrics::Counter;
use parking_lot::Mutex;
use rollcall_protocol::{Body, EncodeError, ErrorCode, Frame, FrameKind, Push, Response};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::budget::{BufferBudget, FREE_BUFFER_BYTES};

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
    /// Frames and bytes the connection handed to its socket and the outbox has not
    /// counted off yet: whoever next takes the outbox's lock does (see
    /// [`ConnState::written`]).
    written_frames: AtomicUsize,
    written_bytes: AtomicUsize,
    /// Whether the outbox holds more than the free allowance, so that its bytes count
    /// against the shared budget: then what is written is counted off at once.
    budgeted: AtomicBool,
    /// Where the outbox's bytes are counted; `None` in tests that need no budget.
    budget: Option<Arc<BufferBudget>>,
}

impl Drop for ConnState {
    fn drop(&mut self) {
        let bytes = self.outbox.get_mut().bytes;
        if let Some(budget) = &self.budget {
            budget.resize(bytes, 0);
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

    /// Moves the oldest queued frames into `into`, as many as it has room for,
    /// skipping superseded ones; returns how many, and whether more wait.
    pub(crate) fn take_some(&self, into: &mut [Option<Bytes>]) -> (usize, bool) {
        let mut outbox = self.outbox.lock();
        self.settle(&mut outbox);
        let mut taken = 0;
        while taken < into.len() {
            let Some(frame) = outbox.frames.pop_front() else {
                break;
            };
            outbox.taken += 1;
            if !frame.is_empty() {
                into[taken] = Some(frame);
                taken += 1;
            }
        }
        let more = !outbox.frames.is_empty();
        if !more && !outbox.latest.is_empty() {
            outbox.latest.clear();
        }
        (taken, more)
    }

    /// Moves every queued frame to the end of `into`, skipping superseded ones.
    #[cfg(test)]
    pub(crate) fn take(&self, into: &mut VecDeque<Bytes>) {
        loop {
            let mut batch: [Option<Bytes>; 16] = Default::default();
            let (taken, more) = self.take_some(&mut batch);
            into.extend(batch.into_iter().take(taken).flatten());
            if !more {
                return;
            }
        }
    }

    /// `frames` frames of `bytes` bytes were handed to the socket. Counted off without
    /// the lock (by whoever takes it next: a heartbeat's answer costs the connection's
    /// task one lock to queue and one to take, not a third to count off), unless the
    /// outbox's bytes count against the shared budget, which then gets them back at once.
    pub(crate) fn written(&self, frames: usize, bytes: usize) {
        self.written_frames.fetch_add(frames, Ordering::Relaxed);
        self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
        if self.budgeted.load(Ordering::Relaxed) {
            let mut outbox = self.outbox.lock();
            self.settle(&mut outbox);
        }
    }

    /// Counts off what was written since the outbox last did; with its lock held.
    fn settle(&self, outbox: &mut Outbox) {
        if self.written_frames.load(Ordering::Relaxed) == 0
            && self.written_bytes.load(Ordering::Relaxed) == 0
        {
            return;
        }
        let frames = self.written_frames.swap(0, Ordering::Relaxed);
        let bytes = self.written_bytes.swap(0, Ordering::Relaxed);
        if frames == 0 && bytes == 0 {
            return;
        }
        outbox.count = outbox.count.saturating_sub(frames);
        let left = outbox.bytes.saturating_sub(bytes);
        if let Some(budget) = &self.budget {
            budget.resize(outbox.bytes, left);
        }
        outbox.bytes = left;
        self.note_budgeted(outbox);
    }

    /// Keeps [`ConnState::budgeted`] up to date; with the lock held.
    fn note_budgeted(&self, outbox: &Outbox) {
        let over = outbox.bytes > FREE_BUFFER_BYTES;
        if self.budgeted.load(Ordering::Relaxed) != over {
            self.budgeted.store(over, Ordering::Relaxed);
        }
    }

    /// Whether frames wait in the queue.
    pub(crate) fn has_queued(&self) -> bool {
        !self.outbox.lock().frames.is_empty()
    }

    /// The connection writes nothing more: later frames are dropped.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut outbox = self.outbox.lock();
        self.settle(&mut outbox);
        if let Some(budget) = &self.budget {
            budget.resize(outbox.bytes, 0);
        }
        *outbox = Outbox::default();
        self.note_budgeted(&outbox);
    }

    /// Bytes queued or being written.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        let mut outbox = self.outbox.lock();
        self.settle(&mut outbox);
        outbox.bytes
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
        self.state.settle(&mut outbox);
        let mut freed = (0, 0);
        if let Some(key) = &supersede {
            // A position before `taken` was taken for writing: no longer superseded.
            let queued = outbox
                .latest
                .get(key)
                .copied()
                .filter(|&at| at >= outbox.taken);
            if let Some(at) = queued {
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
        self.state.note_budgeted(&outbox);
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

thread_local! {
    /// Where this thread encodes frames, kept from frame to frame.
    static SCRATCH: Cell<BytesMut> = Cell::new(BytesMut::new());
}

/// Frames up to this size are encoded in the thread's scratch buffer and copied out at
/// their size: one allocation per frame, of what it holds. A larger one keeps the
/// buffer it was encoded in.
const SMALL_FRAME: usize = 4096;

/// `frame` encoded, length prefix included; for a response that cannot be encoded, an
/// error answer in its place; `None` for a push that cannot be.
fn encode(frame: &Frame, limits: &SendLimits) -> Option<Bytes> {
    let mut buf = SCRATCH.take();
    buf.clear();
    buf.reserve(SMALL_FRAME);
    let encoded = encode_into(frame, limits, &mut buf);
    if buf.capacity() <= 2 * SMALL_FRAME {
        SCRATCH.set(buf);
    }
    encoded
}

fn encode_into(frame: &Frame, limits: &SendLimits, buf: &mut BytesMut) -> Option<Bytes> {
    let Err(e) = frame.encode(buf, limits.max_frame_size) else {
        return Some(take_encoded(buf));
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
    substitute.encode(buf, limits.max_frame_size).ok()?;
    Some(take_encoded(buf))
}

/// What `buf` holds, as a frame to queue: copied at its size if small (`buf` is kept
/// for the next frame) or if its buffer has much room to spare (so that what a queue
/// holds is what it counts), else the buffer itself.
fn take_encoded(buf: &mut BytesMut) -> Bytes {
    if buf.len() <= SMALL_FRAME {
        return Bytes::copy_from_slice(buf);
    }
    let whole = std::mem::take(buf);
    if whole.capacity() - whole.len() > SLACK {
        Bytes::copy_from_slice(&whole)
    } else {
        whole.freeze()
    }
}

#[cfg(test)]
pub(super) mod tests;
