//! The inputs that move groups between owners at runtime (a cluster's slots): adopting
//! groups loaded from the store, handing groups back with their last state durable, and
//! abandoning every group when the right to act for them is lost.

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info};

use super::{PanicGuard, Shard};
use crate::core::RestoredState;
use crate::store::StoreError;

impl Shard {
    /// Adopts groups loaded from the store, by the rules of a restart
    /// (`Coordinator::restore`).
    pub(crate) fn adopt(&self, state: RestoredState) {
        let groups = state.groups.len();
        self.input(|core, now| core.restore(now, state));
        self.state.lock().abandoned = false;
        debug!(shard = self.index, groups, "adopted groups");
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
}
