//! The immediate-or-staged choice, the open batch and the sender stage.
//!
//! A request whose answer reveals nothing that waits for durability is answered at
//! once; one that wrote records (the core says so: [`Effects::wrote`]), or concerns a
//! group that is *pending* ([`ShardState::pending`], the one definition), joins the
//! open batch. The sender stage takes the open batch whenever fewer than
//! [`stage_depth`] batches are on their way to the store, waits until its records are
//! durable, and sends its answers and pushes in order. A failed durable write is
//! fail-stop ([`Shard::run_stage`]); in a cluster the shard abandons its groups
//! instead ([`Shard::finish`]).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rollcall_protocol::{ErrorCode, Frame, Request, Response};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{error, warn};

use super::super::directory::Lookup;
use super::super::events::log_event;
use super::joiner::send_push;
use super::{Joiner, PanicGuard, Reply, Shard, ShardContext, ShardState};
use crate::core::{ConnId, Effects, Output};
use crate::store::group_commit::CommitResult;
use crate::store::{GroupCommitter, StoreError};

/// What became of a request handed to [`Shard::request`].
#[derive(Debug)]
pub(crate) enum Handled {
    /// Answered at once (the frame is queued on the requesting connection, quietly):
    /// nothing it reveals was waiting to be made durable.
    Answered,
    /// In the open batch: the sender stage answers once it is durable.
    Staged,
    /// The shard cannot take requests (the server is failing); the reply is returned.
    Unavailable(Reply),
}

/// One output of a batch, in the order the core produced it.
#[derive(Debug)]
pub(super) enum Outgoing {
    Response {
        reply: Reply,
        response: Response,
        /// The request produced records: its answer stands only if they are durable.
        wrote: bool,
    },
    Push {
        conn: ConnId,
        frame: Frame,
        /// The joiner of the connection's split Heartbeats request whose part this
        /// shard had handled when the push was made: sent through it.
        after: Option<Arc<Joiner>>,
    },
}

/// What the requests and timers since the last batch produced that waits for
/// durability.
#[derive(Debug, Default)]
pub(super) struct OpenBatch {
    pub(super) outgoing: Vec<Outgoing>,
    /// The members whose Join this batch answers (group, member id): once the answers
    /// have left, the core is told, and their sessions count from then.
    joined: Vec<(String, String)>,
    /// Groups with outputs in this batch (besides those of its records).
    groups: HashSet<String>,
    /// Told once this batch has been sent (or failed): the hand-back of groups waits
    /// on it for their last records to be durable.
    pub(super) sent: Vec<oneshot::Sender<Result<(), StoreError>>>,
}

/// A batch the sender stage submitted and has not sent yet.
#[derive(Debug)]
pub(super) struct InFlight {
    seq: u64,
    pub(super) durable: Option<oneshot::Receiver<CommitResult>>,
    batch: OpenBatch,
}

/// What [`Shard::take_open`] found.
#[derive(Debug)]
pub(super) enum Taken {
    Batch(InFlight),
    Nothing,
    /// Nothing, and the shard is closing.
    Closed,
}

/// Batches a shard's sender stage keeps submitted at once: one more than the store
/// may have under way ([`GroupCommitter::writes_in_flight`]), so the next batch waits
/// in the committer's queue while those are written and begins as soon as one ends
/// (two for redb, which writes one at a time).
fn stage_depth(committer: &GroupCommitter) -> usize {
    committer.writes_in_flight() + 1
}

/// Whether, and until when, what concerns a group must wait ([`ShardState::pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Nothing about the group waits: what concerns it may be sent at once.
    No,
    /// Until the next batch the stage takes is sent: the core has unflushed state for
    /// the group (its records go in that batch), or the open batch holds it.
    NextBatch,
    /// Only until a batch the stage already took is sent. What is staged about the
    /// group now goes in a later batch, so staging it must hold the group pending
    /// until that one is sent ([`ShardState::hold`]).
    TakenBatch,
}

impl ShardState {
    /// Whether what concerns `group` must wait for what is pending about it. A group is
    /// *pending* from the moment the core has unflushed state for it, or something about
    /// it is staged, until the batch carrying that has been sent.
    fn pending(&mut self, group: &str) -> Pending {
        if self.core.is_unflushed(group)
            || (!self.open.groups.is_empty() && self.open.groups.contains(group))
        {
            Pending::NextBatch
        } else if !self.in_flight.is_empty() && self.in_flight.contains_key(group) {
            Pending::TakenBatch
        } else {
            Pending::No
        }
    }

    /// Something about `group`, found `pending`, is staged in the open batch: keeps the
    /// group pending until that batch is sent, where nothing else would.
    fn hold(&mut self, group: &str, pending: Pending) {
        if pending == Pending::TakenBatch {
            self.open.groups.insert(group.to_owned());
        }
    }

    /// The joiner a push to `conn` must go through: that of the last split Heartbeats
    /// request of `conn` this shard handled a part of, while it is open.
    fn joiner_for(&mut self, conn: ConnId) -> Option<Arc<Joiner>> {
        if self.joiners.is_empty() {
            return None;
        }
        let joiner = self.joiners.get(&conn)?;
        if joiner.is_open() {
            return Some(joiner.clone());
        }
        self.joiners.remove(&conn);
        None
    }

    /// Takes what the core produced besides responses: pushes to send at once (or
    /// stage, if their group is pending or `stage_all`) and events to log. A push to
    /// a connection with a split Heartbeats request open follows that request's
    /// response.
    pub(super) fn drain_outputs(&mut self, index: usize, ctx: &ShardContext, stage_all: bool) {
        while let Some(output) = self.core.poll_output() {
            match output {
                Output::Push { conn, push } => {
                    let pending = match push.group() {
                        Some(group) => {
                            let pending = self.pending(group);
                            self.hold(group, pending);
                            pending
                        }
                        None => Pending::No,
                    };
                    let stage = stage_all || pending != Pending::No;
                    let frame = Frame::push(push);
                    let after = self.joiner_for(conn);
                    if stage {
                        self.open
                            .outgoing
                            .push(Outgoing::Push { conn, frame, after });
                    } else {
                        send_push(&ctx.registry, conn, frame, after.as_deref());
                    }
                }
                Output::Event(event) => log_event(index, &ctx.metrics, event),
            }
        }
    }
}

impl Shard {
    /// Handles a request from `conn` (called on that connection's task): answered
    /// through `reply` at once if nothing it reveals is pending, otherwise staged and
    /// answered by the sender stage once durable.
    #[cfg(test)]
    pub(crate) fn request(&self, conn: ConnId, request: Request, reply: Reply) -> Handled {
        self.request_as(conn, request, reply, crate::core::Authority::Operator)
    }

    /// As [`Self::request`], with the authority the connection's identity has over an
    /// operator's request (see `Coordinator::handle_request_as`).
    pub(crate) fn request_as(
        &self,
        conn: ConnId,
        request: Request,
        reply: Reply,
        authority: crate::core::Authority,
    ) -> Handled {
        if self.ctx.failed.load(Ordering::Acquire) {
            return Handled::Unavailable(reply);
        }
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        if let Some(refusal) = self.not_here(st.abandoned, &request) {
            // The group's slot was handed back or abandoned after the connection
            // looked it up: checked again under the lock, which the hand-back takes.
            drop(st);
            reply.deliver(refusal, &self.ctx.metrics, true);
            return Handled::Answered;
        }
        let now = Instant::now();
        // The groups this request concerns, and whether any is pending (those pending
        // only through a batch already taken are held if the answer is staged).
        let mut pending = false;
        let mut taken = Vec::new();
        for group in request_groups(&request) {
            match st.pending(group) {
                Pending::No => {}
                Pending::NextBatch => pending = true,
                Pending::TakenBatch => {
                    pending = true;
                    taken.push(group.to_owned());
                }
            }
        }
        if let Reply::Part { joiner, .. } = &reply {
            // From now on this shard's pushes to the connection follow the response.
            st.joiners.insert(conn, joiner.clone());
        }
        let Effects {
            response,
            wrote,
            joined,
        } = st
            .core
            .handle_request_as(now.into_std(), conn, request, authority);
        // The answer first, then the pushes it caused.
        let handled = if pending || wrote {
            st.open.outgoing.push(Outgoing::Response {
                reply,
                response,
                wrote,
            });
            for group in taken {
                st.hold(&group, Pending::TakenBatch);
            }
            st.drain_outputs(self.index, &self.ctx, true);
            st.open.joined.extend(joined);
            self.open_len
                .store(st.open.outgoing.len(), Ordering::Release);
            self.stage.notify_one();
            Handled::Staged
        } else {
            reply.deliver(response, &self.ctx.metrics, true);
            st.drain_outputs(self.index, &self.ctx, false);
            if let Some(joined) = joined {
                st.core.answers_released(now.into_std(), &[joined]);
            }
            if st.core.has_records() {
                self.stage.notify_one();
            }
            Handled::Answered
        };
        self.check_timer(&mut st);
        handled
    }
    /// In cluster mode, the answer to a request naming a group this coordinator does not
    /// act for (any more).
    fn not_here(&self, abandoned: bool, request: &Request) -> Option<Response> {
        if abandoned {
            return Some(Response::error(
                request.api_key() as u16,
                ErrorCode::NotCoordinator,
                "this coordinator stopped acting for its groups; find the group's coordinator",
            ));
        }
        if self.ctx.directory.is_single() {
            return None;
        }
        request_groups(request).find_map(|group| {
            let code = match self.ctx.directory.lookup(group) {
                Lookup::Here => return None,
                Lookup::Loading => ErrorCode::CoordinatorLoading,
                Lookup::Elsewhere(_) | Lookup::Unknown => ErrorCode::NotCoordinator,
            };
            Some(Response::error(
                request.api_key() as u16,
                code,
                format!("group {group} is not served by this coordinator now"),
            ))
        })
    }

    /// Takes what an input produced besides its answer: pushes are sent or staged, and
    /// the stage and the timer task are woken if they have something new.
    pub(super) fn after_input(&self, st: &mut ShardState) {
        st.drain_outputs(self.index, &self.ctx, false);
        if st.core.has_records() || !st.open.outgoing.is_empty() {
            self.open_len
                .store(st.open.outgoing.len(), Ordering::Release);
            self.stage.notify_one();
        }
        self.check_timer(st);
    }

    /// Asks the sender stage to finish: it sends what it has and ends.
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.stage.notify_one();
    }

    /// The sender stage: takes the open batch whenever fewer than [`stage_depth`]
    /// batches are submitted, makes its records durable, and sends its outputs in
    /// order. Ends after
    /// [`Shard::close`] once nothing is left, or at a failed durable write (false).
    ///
    /// A failed durable write is fatal (fail-stop, as databases do after a failed
    /// fsync): the store's state can no longer be trusted to match the core's, and a
    /// store like redb refuses every later write anyway. The batch's requests that wrote
    /// are answered `storage_failure`, its pushes (which announce state that is not
    /// durable) are dropped, and the server stops. A restart restores every group from
    /// what is durable, and members resume without a rebalance. In a cluster the shard
    /// abandons its groups instead and the stage goes on ([`Shard::finish`]).
    pub(crate) async fn run_stage(self: Arc<Self>) -> bool {
        // Batches submitted and not yet sent, oldest first. The committer answers them
        // in order; one more than it writes at once waits in its queue, so the next
        // transaction starts as soon as one ends.
        let depth = stage_depth(&self.ctx.committer);
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
        loop {
            let wake = self.stage.notified();
            if in_flight.len() < depth {
                match self.take_open() {
                    Taken::Batch(batch) => {
                        in_flight.push_back(batch);
                        continue;
                    }
                    Taken::Closed if in_flight.is_empty() => return true,
                    Taken::Nothing | Taken::Closed => {}
                }
            }
            let room = in_flight.len() < depth;
            let front = in_flight.front_mut();
            let waiting = front.is_some();
            let oldest = async move {
                match front.map(|b| b.durable.as_mut()) {
                    Some(Some(answer)) => answer.await.unwrap_or(Err(StoreError::Closed)),
                    Some(None) => Ok(()),
                    None => std::future::pending().await,
                }
            };
            let durable = tokio::select! {
                biased;
                durable = oldest, if waiting => durable,
                () = wake, if room => continue,
            };
            let Some(batch) = in_flight.pop_front() else {
                continue;
            };
            if !self.finish(batch, durable) {
                return false;
            }
        }
    }

    /// Takes the open batch (and the core's records) and submits its records, if
    /// there is anything to take.
    pub(super) fn take_open(&self) -> Taken {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        let records = st.core.take_records();
        if records.is_empty() && st.open.outgoing.is_empty() && st.open.sent.is_empty() {
            return if st.closing {
                Taken::Closed
            } else {
                Taken::Nothing
            };
        }
        st.taken += 1;
        let seq = st.taken;
        let batch = std::mem::take(&mut st.open);
        for group in records
            .iter()
            .map(crate::core::Record::group)
            .chain(batch.groups.iter().map(String::as_str))
        {
            match st.in_flight.get_mut(group) {
                Some(s) => *s = seq,
                None => {
                    st.in_flight.insert(group.to_owned(), seq);
                }
            }
        }
        self.open_len.store(0, Ordering::Release);
        drop(st);
        self.room.notify_waiters();
        let durable = (!records.is_empty()).then(|| self.ctx.committer.submit(records));
        Taken::Batch(InFlight {
            seq,
            durable,
            batch,
        })
    }

    /// Sends a batch whose records are durable. A failed batch (or one taken before a
    /// batch failed) is refused: outside a cluster the server stops (false); in a
    /// cluster the shard abandons its groups and the slot manager loads them again from
    /// the store.
    pub(super) fn finish(&self, batch: InFlight, durable: Result<(), StoreError>) -> bool {
        let durable = match durable {
            Ok(()) if batch.seq <= self.poisoned_through.load(Ordering::Acquire) => Err(
                StoreError::Io("an earlier batch of the shard could not be made durable".into()),
            ),
            other => other,
        };
        if let Err(e) = &durable {
            if self.ctx.on_store_failure.is_some() {
                warn!(shard = self.index, error = %e, "records could not be made durable; refusing the batch and abandoning the shard's groups");
            } else {
                error!(shard = self.index, error = %e, "records could not be made durable; answering storage_failure and stopping");
                self.ctx.fail();
            }
        }
        let InFlight {
            seq,
            batch:
                OpenBatch {
                    outgoing,
                    joined,
                    sent,
                    ..
                },
            ..
        } = batch;
        self.send(outgoing, &durable);
        for waiter in sent {
            let _ = waiter.send(durable.clone());
        }
        if let Err(e) = durable {
            if let Some(manager) = &self.ctx.on_store_failure {
                // What the core holds past the store can no longer be revealed: every
                // batch taken so far is refused, the groups are dropped, and the slot
                // manager abandons every slot and loads them again from the store.
                {
                    let mut st = self.state.lock();
                    self.poisoned_through.fetch_max(st.taken, Ordering::AcqRel);
                    st.in_flight.retain(|_, s| *s > seq);
                }
                self.abandon_all();
                manager.notify_one();
                return true;
            }
            // The stage ends here: whoever waits for a later batch is told now.
            let waiting = std::mem::take(&mut self.state.lock().open.sent);
            for waiter in waiting {
                let _ = waiter.send(Err(e.clone()));
            }
            return false;
        }
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        st.in_flight.retain(|_, s| *s > seq);
        if !joined.is_empty() {
            st.core.answers_released(Instant::now().into_std(), &joined);
            self.after_input(&mut st);
        }
        true
    }

    /// Drops every group without writing: the coordinator lost the right to act for
    /// them (`Coordinator::abandon`). What is staged and waits for durability is never
    /// sent: its answers become `not_coordinator` (the client finds the owner and asks
    /// again), its pushes are dropped, and the records behind them are discarded with
    /// the groups. Batches already on their way to the store finish as they would.
    /// Until groups are adopted again, every request is refused `not_coordinator`.
    pub(crate) fn abandon_all(&self) -> usize {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        st.abandoned = true;
        let dropped = st.core.abandon(Instant::now().into_std(), |_| true).len();
        let open = std::mem::take(&mut st.open);
        self.open_len.store(0, std::sync::atomic::Ordering::Release);
        for item in open.outgoing {
            if let Outgoing::Response {
                reply, response, ..
            } = item
            {
                let refused = Response::error(
                    response.api_key(),
                    ErrorCode::NotCoordinator,
                    "this coordinator stopped acting for the group; find its coordinator",
                );
                reply.deliver(refused, &self.ctx.metrics, false);
            }
        }
        for waiter in open.sent {
            let _ = waiter.send(Err(StoreError::Closed));
        }
        self.after_input(&mut st);
        drop(st);
        self.room.notify_waiters();
        dropped
    }

    fn send(&self, outgoing: Vec<Outgoing>, durable: &Result<(), StoreError>) {
        for item in outgoing {
            match item {
                Outgoing::Response {
                    reply,
                    response,
                    wrote,
                } => {
                    // An answer staged without writing was staged because it may
                    // reveal what this batch makes durable: refused with it.
                    let response = match durable {
                        Err(e) if wrote => Response::error(
                            response.api_key(),
                            ErrorCode::StorageFailure,
                            format!("the change could not be made durable: {e}"),
                        ),
                        Err(e) => Response::error(
                            response.api_key(),
                            ErrorCode::StorageFailure,
                            format!("what this answer rests on could not be made durable: {e}"),
                        ),
                        Ok(()) => response,
                    };
                    // A full queue closes the connection; the connection logs it.
                    reply.deliver(response, &self.ctx.metrics, false);
                }
                Outgoing::Push { conn, frame, after } => {
                    if durable.is_ok() {
                        send_push(&self.ctx.registry, conn, frame, after.as_deref());
                    }
                }
            }
        }
    }
}

/// The groups a request concerns.
fn request_groups(request: &Request) -> impl Iterator<Item = &str> {
    let beats = match request {
        Request::Heartbeats(h) => h.beats.as_slice(),
        _ => &[],
    };
    request
        .group()
        .into_iter()
        .chain(beats.iter().map(|b| &*b.group))
}
