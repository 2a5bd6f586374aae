//! Group commit: many callers' records made durable by one write.
//!
//! A [`GroupCommitter`] owns a dedicated OS thread (writes block on fsync, so they do not
//! belong on the async runtime). Callers [`submit`](GroupCommitter::submit) records and
//! await the answer; the thread takes everything queued since its last write, writes it
//! with one [`Store::write`] call (one transaction, one fsync) and then answers every
//! caller of that batch. While one batch is being written the next one accumulates, so
//! the number of fsyncs per second stays bounded however many callers there are.
//!
//! Batches are written in submission order, and a caller is answered only after its
//! batch and every earlier one were written. A submission with no records is therefore
//! a barrier: its answer means everything submitted before it is durable (or failed).
//!
//! Every submission carries its owner's fencing token
//! ([`submit_fenced`](GroupCommitter::submit_fenced); [`FencingToken::SOLE`] through
//! `submit`), and a batch holds submissions of one token only, written with
//! [`Store::write_fenced`]: a submission with another token than the batch's starts the
//! next batch.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{FencingToken, Store, StoreError};
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
    /// Time spent in [`Store::write`], nanoseconds.
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
    sender: Option<mpsc::Sender<Submission>>,
    thread: Option<JoinHandle<()>>,
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
        let writer = Writer {
            store: Arc::clone(&store),
            receiver,
            counters: Arc::clone(&counters),
            max_records: max_records.max(1),
        };
        let thread = std::thread::Builder::new()
            .name("rollcall-store".to_owned())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::Io(format!("cannot start the store writer thread: {e}")))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
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
        if let Err(mpsc::SendError(submission)) = sender.send(submission) {
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
        // Closing the channel makes the writer exit once it has drained the queue.
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

/// The writer thread's state.
struct Writer {
    store: Arc<dyn Store>,
    receiver: mpsc::Receiver<Submission>,
    counters: Arc<Counters>,
    max_records: usize,
}

impl Writer {
    fn run(self) {
        let mut records: Vec<Record> = Vec::new();
        let mut waiters: Vec<oneshot::Sender<CommitResult>> = Vec::new();
        // A submission that did not fit in the previous batch.
        let mut carried: Option<Submission> = None;
        loop {
            let first = match carried.take() {
                Some(submission) => submission,
                None => match self.receiver.recv() {
                    Ok(submission) => submission,
                    Err(mpsc::RecvError) => break,
                },
            };
            let token = first.token;
            add(&mut records, &mut waiters, first);
            while records.len() < self.max_records {
                match self.receiver.try_recv() {
                    Ok(submission) => {
                        if submission.token != token
                            || records.len() + submission.records.len() > self.max_records
                        {
                            carried = Some(submission);
                            break;
                        }
                        add(&mut records, &mut waiters, submission);
                    }
                    Err(mpsc::TryRecvError::Empty | mpsc::TryRecvError::Disconnected) => break,
                }
            }

            let result = if records.is_empty() {
                Ok(())
            } else {
                self.write(token, &records)
            };
            records.clear();
            self.counters
                .completed
                .fetch_add(waiters.len() as u64, Ordering::Relaxed);
            for waiter in waiters.drain(..) {
                // A caller that stopped waiting is not an error.
                let _ = waiter.send(result.clone());
            }
        }
    }

    fn write(&self, token: FencingToken, records: &[Record]) -> CommitResult {
        let started = Instant::now();
        let result =
            panic::catch_unwind(AssertUnwindSafe(|| self.store.write_fenced(token, records)))
                .unwrap_or_else(|_| Err(StoreError::Io("the store write panicked".to_owned())));
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let c = &self.counters;
        c.write_nanos.fetch_add(nanos, Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
        match &result {
            Ok(()) => {
                c.records.fetch_add(records.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                c.failed_batches.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, records = records.len(), "store write failed");
            }
        }
        result
    }
}

fn add(
    records: &mut Vec<Record>,
    waiters: &mut Vec<oneshot::Sender<CommitResult>>,
    mut submission: Submission,
) {
    records.append(&mut submission.records);
    waiters.push(submission.done);
}
