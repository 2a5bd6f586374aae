//! Group commit: many callers' records made durable by one write.
//!
//! A [`GroupCommitter`] owns a dedicated OS thread (writes block on fsync, so they do not
//! belong on the async runtime). Callers [`submit`](GroupCommitter::submit) records and
//! await the answer; the thread takes everything queued since its last write, writes it
//! with one [`Store::write_then`] call (one transaction, one fsync) and then answers every
//! caller of that batch. While one batch is being written the next one accumulates, so
//! the number of fsyncs per second stays bounded however many callers there are.
//!
//! A store may allow several writes under way at once ([`Store::writes_in_flight`]: etcd,
//! where a write is a network round trip; redb allows one): the thread then begins the
//! next batch whenever fewer than that many are under way, and the store keeps them in
//! order (see [`Store::write_then`]).
//!
//! Batches are begun in submission order, and a caller is answered only after its
//! batch and every earlier one have ended, whatever order their writes end in. A
//! submission with no records is therefore a barrier: its answer means everything
//! submitted before it is durable (or failed).
//!
//! Every submission carries its owner's fencing token
//! ([`submit_fenced`](GroupCommitter::submit_fenced); [`FencingToken::SOLE`] through
//! `submit`), and a batch holds submissions of one token only, written with
//! [`Store::write_fenced`]: a submission with another token than the batch's starts the
//! next batch.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{FencingToken, Store, StoreError, WriteDone};
use crate::core::Record;

/// Default bound on the records of one batch.
pub const DEFAULT_MAX_BATCH_RECORDS: usize = 64 * 1024;

/// The answer to one submission.
pub type CommitResult = Result<(), StoreError>;

struct Submission {
    token: FencingToken,
    records: Vec<Record>,
    done: oneshot::Sender<CommitResult>,
}

/// Counts of what a [`GroupCommitter`] did, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitterStats {
    /// Submissions accepted by [`GroupCommitter::submit`].
    pub submissions: u64,
    /// Submissions answered (successfully or not).
    pub completed: u64,
    /// [`Store::write`] calls, failed ones included.
    pub batches: u64,
    /// [`Store::write`] calls that failed.
    pub failed_batches: u64,
    /// Records made durable by successful writes.
    pub records: u64,
    /// Time from the start of each write to its end, nanoseconds (writes under way
    /// together each count).
    pub write_nanos: u64,
}

impl CommitterStats {
    /// Submissions waiting for, or in, a write.
    pub fn queued(&self) -> u64 {
        self.submissions.saturating_sub(self.completed)
    }
}

#[derive(Debug, Default)]
struct Counters {
    submissions: AtomicU64,
    completed: AtomicU64,
    batches: AtomicU64,
    failed_batches: AtomicU64,
    records: AtomicU64,
    write_nanos: AtomicU64,
}

/// Makes records durable in batches on a dedicated writer thread.
///
/// Dropping it stops accepting submissions, lets the thread write everything already
/// submitted, and waits for the thread to finish.
pub struct GroupCommitter {
    sender: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
    depth: usize,
    counters: Arc<Counters>,
    store: Arc<dyn Store>,
}

impl fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommitter")
            .field("store", &self.store)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl GroupCommitter {
    /// Starts the writer thread over `store`, with batches of at most
    /// [`DEFAULT_MAX_BATCH_RECORDS`] records.
    pub fn new(store: Arc<dyn Store>) -> Result<Self, StoreError> {
        Self::with_max_batch_records(store, DEFAULT_MAX_BATCH_RECORDS)
    }

    /// Starts the writer thread over `store`, with batches of at most `max_records`
    /// records. A single submission larger than that is still written whole, alone.
    pub fn with_max_batch_records(
        store: Arc<dyn Store>,
        max_records: usize,
    ) -> Result<Self, StoreError> {
        let (sender, receiver) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let depth = store.writes_in_flight().max(1);
        let writer = Writer {
            store: Arc::clone(&store),
            receiver,
            ends: sender.clone(),
            counters: Arc::clone(&counters),
            max_records: max_records.max(1),
            depth,
        };
        let thread = std::thread::Builder::new()
            .name("rollcall-store".to_owned())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::Io(format!("cannot start the store writer thread: {e}")))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            depth,
            counters,
            store,
        })
    }

    /// Queues `records` for the next batch. The receiver is answered once they are
    /// durable, or with the error that made their batch fail. An empty `records` is
    /// answered once everything submitted before it is written.
    ///
    /// Never blocks, so it may be called from async code.
    pub fn submit(&self, records: Vec<Record>) -> oneshot::Receiver<CommitResult> {
        self.submit_fenced(FencingToken::SOLE, records)
    }

    /// [`Self::submit`] on behalf of the owner holding `token`: the records are written
    /// with it ([`Store::write_fenced`]), in a batch of that token's submissions only.
    pub fn submit_fenced(
        &self,
        token: FencingToken,
        records: Vec<Record>,
    ) -> oneshot::Receiver<CommitResult> {
        let (done, answer) = oneshot::channel();
        let submission = Submission {
            token,
            records,
            done,
        };
        let Some(sender) = &self.sender else {
            let _ = submission.done.send(Err(StoreError::Closed));
            return answer;
        };
        self.counters.submissions.fetch_add(1, Ordering::Relaxed);
        if let Err(mpsc::SendError(Message::Submit(submission))) =
            sender.send(Message::Submit(submission))
        {
            // The writer thread is gone; nothing can be made durable any more.
            self.counters.completed.fetch_add(1, Ordering::Relaxed);
            let _ = submission.done.send(Err(StoreError::Closed));
        }
        answer
    }

    /// [`Self::submit`] and wait for the answer.
    pub async fn commit(&self, records: Vec<Record>) -> CommitResult {
        self.submit(records)
            .await
            .unwrap_or(Err(StoreError::Closed))
    }

    /// The store written to, e.g. for [`Store::load`] at start or
    /// [`Store::expired_groups`].
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// How many batches' writes may be under way at once ([`Store::writes_in_flight`]).
    pub fn writes_in_flight(&self) -> usize {
        self.depth
    }

    /// What the writer did so far.
    pub fn stats(&self) -> CommitterStats {
        let c = &self.counters;
        CommitterStats {
            submissions: c.submissions.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            failed_batches: c.failed_batches.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
            write_nanos: c.write_nanos.load(Ordering::Relaxed),
        }
    }
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        // The writer exits once it has written everything submitted before this.
        if let Some(sender) = self.sender.take() {
            let _ = sender.send(Message::Close);
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

/// What the writer thread hears: submissions, and the ends of its writes.
enum Message {
    Submit(Submission),
    Done {
        id: u64,
        result: CommitResult,
    },
    /// Sent by the committer's `Drop` after its last submission.
    Close,
}

/// A batch whose write was begun and whose callers were not answered yet.
struct Begun {
    id: u64,
    waiters: Vec<oneshot::Sender<CommitResult>>,
    records: usize,
    started: Instant,
    result: Option<CommitResult>,
}

/// The writer thread's state.
struct Writer {
    store: Arc<dyn Store>,
    receiver: mpsc::Receiver<Message>,
    /// For the ends of writes; the thread exits on [`Message::Close`], not when every
    /// sender is gone.
    ends: mpsc::Sender<Message>,
    counters: Arc<Counters>,
    max_records: usize,
    depth: usize,
}

impl Writer {
    /// Takes the queued submissions into a batch and begins its write whenever fewer
    /// than [`Store::writes_in_flight`] writes are under way (one, for redb: the next
    /// batch gathers while one is written), and answers each batch's callers once it
    /// and every batch before it have ended, in order.
    fn run(self) {
        let depth = self.depth;
        let mut queue: VecDeque<Submission> = VecDeque::new();
        let mut begun: VecDeque<Begun> = VecDeque::new();
        let mut next_id = 0u64;
        let mut closing = false;
        loop {
            if queue.is_empty() || begun.len() >= depth {
                if closing && queue.is_empty() && begun.is_empty() {
                    break;
                }
                match self.receiver.recv() {
                    Ok(message) => self.take(message, &mut queue, &mut begun, &mut closing),
                    Err(mpsc::RecvError) => break,
                }
            }
            // Everything that arrived meanwhile joins the next batch.
            while let Ok(message) = self.receiver.try_recv() {
                self.take(message, &mut queue, &mut begun, &mut closing);
            }
            self.answer_ended(&mut begun);
            if !queue.is_empty() && begun.len() < depth {
                let (token, records, waiters) = self.next_batch(&mut queue);
                let id = next_id;
                next_id += 1;
                begun.push_back(Begun {
                    id,
                    waiters,
                    records: records.len(),
                    started: Instant::now(),
                    result: None,
                });
                self.begin(id, token, records);
            }
        }
        // Only if a write's end was lost: nothing more can be made durable.
        for batch in begun {
            self.answer(batch.waiters, &Err(StoreError::Closed));
        }
    }

    fn take(
        &self,
        message: Message,
        queue: &mut VecDeque<Submission>,
        begun: &mut VecDeque<Begun>,
        closing: &mut bool,
    ) {
        match message {
            Message::Submit(submission) => queue.push_back(submission),
            Message::Close => *closing = true,
            Message::Done { id, result } => {
                if let Some(batch) = begun.iter_mut().find(|b| b.id == id) {
                    self.ended(batch, &result);
                    batch.result = Some(result);
                }
            }
        }
    }

    /// The oldest queued submissions of one token, within the record bound (a single
    /// larger submission alone).
    fn next_batch(
        &self,
        queue: &mut VecDeque<Submission>,
    ) -> (
        FencingToken,
        Vec<Record>,
        Vec<oneshot::Sender<CommitResult>>,
    ) {
        let mut records = Vec::new();
        let mut waiters = Vec::new();
        let token = queue.front().map_or(FencingToken::SOLE, |s| s.token);
        while let Some(next) = queue.front() {
            if !waiters.is_empty()
                && (next.token != token
                    || records.len() >= self.max_records
                    || records.len() + next.records.len() > self.max_records)
            {
                break;
            }
            let Some(mut submission) = queue.pop_front() else {
                break;
            };
            records.append(&mut submission.records);
            waiters.push(submission.done);
        }
        (token, records, waiters)
    }

    /// Begins one batch's write; its end comes back as [`Message::Done`].
    fn begin(&self, id: u64, token: FencingToken, records: Vec<Record>) {
        let end = End {
            id,
            ends: Some(self.ends.clone()),
        };
        if records.is_empty() {
            return end.send(Ok(()));
        }
        let store = Arc::clone(&self.store);
        let done: WriteDone = Box::new(move |result| end.send(result));
        let begun = panic::catch_unwind(AssertUnwindSafe(|| {
            store.write_then(token, records, done);
        }));
        if begun.is_err() {
            // `done` was dropped unwinding: its `End` reported the write failed.
            tracing::error!("the store write panicked");
        }
    }

    /// Counts a batch's end.
    fn ended(&self, batch: &Begun, result: &CommitResult) {
        let nanos = u64::try_from(batch.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let c = &self.counters;
        if batch.records == 0 {
            return;
        }
        c.write_nanos.fetch_add(nanos, Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                c.records.fetch_add(batch.records as u64, Ordering::Relaxed);
            }
            Err(e) => {
                c.failed_batches.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, records = batch.records, "store write failed");
            }
        }
    }

    /// Answers the callers of the oldest batches that have ended, up to the first that
    /// has not: a caller hears only after every earlier batch has ended.
    fn answer_ended(&self, begun: &mut VecDeque<Begun>) {
        while begun.front().is_some_and(|b| b.result.is_some()) {
            let Some(batch) = begun.pop_front() else {
                break;
            };
            let result = batch.result.unwrap_or(Err(StoreError::Closed));
            self.answer(batch.waiters, &result);
        }
    }

    fn answer(&self, waiters: Vec<oneshot::Sender<CommitResult>>, result: &CommitResult) {
        self.counters
            .completed
            .fetch_add(waiters.len() as u64, Ordering::Relaxed);
        for waiter in waiters {
            // A caller that stopped waiting is not an error.
            let _ = waiter.send(result.clone());
        }
    }
}

/// Reports the end of one write to the writer thread; dropped unsent (the store lost
/// the callback, or panicked), it reports a failure.
struct End {
    id: u64,
    ends: Option<mpsc::Sender<Message>>,
}

impl End {
    fn send(mut self, result: CommitResult) {
        if let Some(ends) = self.ends.take() {
            let _ = ends.send(Message::Done {
                id: self.id,
                result,
            });
        }
    }
}

impl Drop for End {
    fn drop(&mut self) {
        if let Some(ends) = self.ends.take() {
            let _ = ends.send(Message::Done {
                id: self.id,
                result: Err(StoreError::Io(
                    "the store write ended without an answer".to_owned(),
                )),
            });
        }
    }
}
