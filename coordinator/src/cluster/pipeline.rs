//! The etcd store's writes under way: which earlier write each one must wait for.
//!
//! The group committer may have several writes of [`super::EtcdStore`] under way at
//! once (`Store::writes_in_flight`), each prepared in submission order. etcd does not
//! promise to apply concurrent requests of one client in the order they were sent, so
//! this keeps two rules, decided when a write is prepared (in order) against every
//! write still under way:
//!
//! - **Keys: send after.** A write sends its transactions only once every earlier write
//!   under way that writes one of its keys (or a key under a prefix it deletes, or the
//!   other way round) has ended. So a later write is never overwritten by an earlier one
//!   applied after it, whatever order etcd applies requests in. If one of them failed,
//!   the write is not sent at all: it fails too, with the same error (a fenced write
//!   stays fenced).
//! - **Groups: fail with.** A write that touches a group an earlier write under way also
//!   touches was prepared from what that one will leave (the group's `i/` key, as the
//!   store knows it), so it reports success only if that one succeeded too, even when
//!   its own transactions landed. Its landing is then like a write whose
//!   acknowledgement was lost (see `store.rs`).
//!
//! Writes to distinct keys of distinct groups (most offset commits: each member commits
//! its own partitions, one commit outstanding) go to etcd together, so a commit waits
//! for about one round trip instead of the one under way and then its own.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::store::StoreError;

/// What one write touches.
#[derive(Debug, Default, Clone)]
pub(crate) struct Footprint {
    /// The groups it touches.
    pub(crate) groups: HashSet<String>,
    /// The keys it puts or deletes.
    pub(crate) keys: HashSet<String>,
    /// The prefixes below which it deletes every key.
    pub(crate) prefixes: Vec<String>,
}

impl Footprint {
    /// Whether the two write a common key.
    fn overlaps(&self, other: &Self) -> bool {
        let (small, large) = if self.keys.len() <= other.keys.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.keys.iter().any(|key| large.keys.contains(key))
            || self.under_prefix_of(other)
            || other.under_prefix_of(self)
    }

    /// Whether one of `other`'s prefixes covers one of this write's keys or prefixes.
    fn under_prefix_of(&self, other: &Self) -> bool {
        other.prefixes.iter().any(|prefix| {
            self.keys.iter().any(|key| key.starts_with(prefix.as_str()))
                || self
                    .prefixes
                    .iter()
                    .any(|p| p.starts_with(prefix.as_str()) || prefix.starts_with(p.as_str()))
        })
    }

    fn shares_group(&self, other: &Self) -> bool {
        self.groups.iter().any(|group| other.groups.contains(group))
    }
}

/// A write under way.
#[derive(Debug)]
struct UnderWay {
    footprint: Footprint,
    /// `Some(result)` once it has ended.
    outcome: watch::Sender<Option<Outcome>>,
}

/// The writes under way, by the order they were prepared in.
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    under_way: BTreeMap<u64, Arc<UnderWay>>,
}

impl Pipeline {
    /// Registers the next write (call in the order writes are prepared) and says what it
    /// must wait for.
    pub(crate) fn begin(self: &Arc<Self>, footprint: Footprint) -> Ticket {
        let mut state = self.state.lock();
        let mut send_after = Vec::new();
        let mut fail_with = Vec::new();
        for earlier in state.under_way.values() {
            if earlier.footprint.overlaps(&footprint) {
                send_after.push(earlier.outcome.subscribe());
            } else if earlier.footprint.shares_group(&footprint) {
                fail_with.push(earlier.outcome.subscribe());
            }
        }
        let id = state.next;
        state.next += 1;
        let (outcome, _) = watch::channel(None);
        state
            .under_way
            .insert(id, Arc::new(UnderWay { footprint, outcome }));
        Ticket {
            pipeline: Arc::clone(self),
            id,
            send_after,
            fail_with,
            ended: false,
        }
    }

    /// Waits until every write now under way that touches a group `touches` accepts
    /// has ended.
    pub(crate) async fn quiet(&self, touches: impl Fn(&str) -> bool) {
        let earlier: Vec<_> = {
            let state = self.state.lock();
            state
                .under_way
                .values()
                .filter(|w| w.footprint.groups.iter().any(|g| touches(g)))
                .map(|w| w.outcome.subscribe())
                .collect()
        };
        for mut write in earlier {
            let _ = write.wait_for(Option::is_some).await;
        }
    }

    /// Writes under way.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().under_way.len()
    }

    fn end(&self, id: u64, outcome: Outcome) {
        if let Some(write) = self.state.lock().under_way.remove(&id) {
            write.outcome.send_replace(Some(outcome));
        }
    }
}

/// One registered write. Dropped without [`Self::end`] (its task was cancelled), it
/// counts as failed.
#[derive(Debug)]
pub(crate) struct Ticket {
    pipeline: Arc<Pipeline>,
    id: u64,
    send_after: Vec<watch::Receiver<Option<Outcome>>>,
    fail_with: Vec<watch::Receiver<Option<Outcome>>>,
    ended: bool,
}

impl Ticket {
    /// Waits until the earlier writes to this one's keys have ended: `Ok` if all
    /// succeeded (this one may be sent), the first one's error if one failed (it must
    /// not be sent, and fails with that error: a fenced write stays fenced).
    pub(crate) async fn may_send(&mut self) -> Outcome {
        all_succeeded(&mut self.send_after).await
    }

    /// Ends the write whose own transactions gave `own`: it succeeded if they did and
    /// every earlier write it was prepared after (same keys or same groups) succeeded
    /// too, otherwise it fails with the first error. Waits for those, so the outcome
    /// is final.
    pub(crate) async fn end(mut self, own: Outcome) -> Outcome {
        let earlier = all_succeeded(&mut self.send_after).await;
        let groups = all_succeeded(&mut self.fail_with).await;
        let outcome = earlier.and(groups).and(own);
        self.ended = true;
        self.pipeline.end(self.id, outcome.clone());
        outcome
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.ended {
            self.pipeline.end(self.id, Err(cancelled()));
        }
    }
}

/// A write's result.
pub(crate) type Outcome = Result<(), StoreError>;

fn cancelled() -> StoreError {
    StoreError::Io("an earlier write of the same groups was cancelled".to_owned())
}

async fn all_succeeded(writes: &mut [watch::Receiver<Option<Outcome>>]) -> Outcome {
    let mut all = Ok(());
    for write in writes {
        // A write whose sender is gone ended without saying: count it failed.
        let outcome = match write.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or_else(|| Err(cancelled())),
            Err(_) => Err(cancelled()),
        };
        all = all.and(outcome);
    }
    all
}
