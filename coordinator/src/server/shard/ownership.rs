//! The inputs that move groups between owners at runtime (a cluster's slots): adopting
//! groups loaded from the store, handing groups back with their last state durable, and
//! abandoning every group when the right to act for them is lost.

use rollcall_protocol::{ErrorCode, Response};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::info;

use super::stage::Outgoing;
use super::{PanicGuard, Shard};
use crate::core::RestoredState;
use crate::store::StoreError;

impl Shard {
    /// Adopts groups loaded from the store, by the rules of a restart
    /// (`Coordinator::restore`).
    pub(crate) fn adopt(&self, state: RestoredState) {
        let groups = state.groups.len();
        self.input(|core, now| core.restore(now, state));
        info!(shard = self.index, groups, "adopted groups");
    }

    /// Hands back every group `release` accepts (`Coordinator::release`). The answer
    /// comes once the batch carrying their last records, and everything staged about
    /// them before, has been made durable and sent: only then may another owner load
    /// them.
    ///
    /// The caller has already stopped routing the groups' requests here, so nothing
    /// about them reaches the core after this.
    pub(crate) fn hand_back(
        &self,
        release: impl Fn(&str) -> bool,
    ) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        let mut st = self.state.lock();
        if self.ctx.failed.load(std::sync::atomic::Ordering::Acquire) {
            // The sender stage has stopped (a failing stage sets this before it tells
            // the waiters under this lock): nothing more will be made durable.
            let _ = done.send(Err(StoreError::Closed));
            return answer;
        }
        let _guard = PanicGuard(&self.ctx);
        let released = st.core.release(Instant::now().into_std(), release);
        st.open.sent.push(done);
        self.after_input(&mut st);
        self.stage.notify_one();
        info!(
            shard = self.index,
            groups = released.len(),
            "handing groups back"
        );
        answer
    }

    /// Drops every group without writing: the coordinator lost the right to act for
    /// them (`Coordinator::abandon`). What is staged and waits for durability is never
    /// sent: its answers become `not_coordinator` (the client finds the owner and asks
    /// again), its pushes are dropped, and the records behind them are discarded with
    /// the groups. Batches already on their way to the store finish as they would.
    pub(crate) fn abandon_all(&self) -> usize {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
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
}
