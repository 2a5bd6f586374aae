//! The group committer over a store that allows several writes under way: it begins up
//! to that many batches without waiting, and answers them in submission order however
//! their writes end.

use std::collections::VecDeque;

use parking_lot::{Condvar, Mutex};

use super::*;
use crate::store::group_commit::CommitResult;

/// A store whose writes end only when the test says so.
#[derive(Debug, Default)]
struct HeldStore {
    held: Mutex<VecDeque<Held>>,
    begun: Condvar,
}

struct Held {
    token: FencingToken,
    records: Vec<Record>,
    done: WriteDone,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl HeldStore {
    /// Waits until `n` writes are held, and takes them, oldest first.
    fn take(&self, n: usize) -> Vec<Held> {
        let mut held = self.held.lock();
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.len() < n {
            assert!(
                !self.begun.wait_until(&mut held, deadline).timed_out(),
                "{} writes begun, expected {n}",
                held.len()
            );
        }
        held.drain(..n).collect()
    }

    fn held(&self) -> usize {
        self.held.lock().len()
    }
}

impl Store for HeldStore {
    fn load(&self) -> Result<RestoredState, StoreError> {
        Ok(RestoredState::default())
    }

    fn write(&self, _records: &[Record]) -> Result<(), StoreError> {
        unreachable!("the committer begins writes with write_then")
    }

    fn expired_groups(&self, _retention: Duration) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    fn writes_in_flight(&self) -> usize {
        3
    }

    fn write_then(self: Arc<Self>, token: FencingToken, records: Vec<Record>, done: WriteDone) {
        self.held.lock().push_back(Held {
            token,
            records,
            done,
        });
        self.begun.notify_all();
    }
}

fn pending(answer: &mut tokio::sync::oneshot::Receiver<CommitResult>) -> bool {
    matches!(
        answer.try_recv(),
        Err(tokio::sync::oneshot::error::TryRecvError::Empty)
    )
}

#[test]
fn writes_under_way_end_in_any_order_and_are_answered_in_order() {
    let store = Arc::new(HeldStore::default());
    let committer = GroupCommitter::new(store.clone()).unwrap();

    let mut first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    let [one] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    // The first write is under way: the next two begin without waiting for it.
    let mut second = committer.submit(vec![offset("g", "t", 1, 0, "")]);
    let [two] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    let mut third = committer.submit_fenced(FencingToken(7), vec![offset("h", "t", 0, 0, "")]);
    let [three] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    assert_eq!(three.token, FencingToken(7));
    assert_eq!((one.records.len(), two.records.len()), (1, 1));
    // Three under way: the fourth waits in the queue.
    let mut fourth = committer.submit(vec![offset("g", "t", 2, 0, "")]);
    let mut barrier = committer.submit(Vec::new());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.held(), 0);

    // The third and second end first: nobody is answered before the first ends.
    (three.done)(Ok(()));
    (two.done)(Err(StoreError::Fenced { slot: 3 }));
    std::thread::sleep(Duration::from_millis(50));
    assert!(pending(&mut first) && pending(&mut second) && pending(&mut third));
    (one.done)(Ok(()));
    assert_eq!(first.blocking_recv().unwrap(), Ok(()));
    // Each batch keeps its own result (the shard refuses what follows a failure).
    assert_eq!(
        second.blocking_recv().unwrap(),
        Err(StoreError::Fenced { slot: 3 })
    );
    assert_eq!(third.blocking_recv().unwrap(), Ok(()));

    // The fourth and the barrier gathered in one batch meanwhile.
    let [four] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    assert_eq!(four.records.len(), 1);
    assert!(pending(&mut fourth) && pending(&mut barrier));
    (four.done)(Ok(()));
    assert_eq!(fourth.blocking_recv().unwrap(), Ok(()));
    assert_eq!(barrier.blocking_recv().unwrap(), Ok(()));
    let stats = committer.stats();
    assert_eq!(
        (stats.batches, stats.failed_batches, stats.records),
        (4, 1, 3)
    );
    assert_eq!(stats.queued(), 0);
}

#[test]
fn a_write_whose_answer_is_lost_fails_and_the_committer_goes_on() {
    let store = Arc::new(HeldStore::default());
    let committer = GroupCommitter::new(store.clone()).unwrap();
    let first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    let [one] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    drop(one);
    assert!(matches!(
        first.blocking_recv().unwrap(),
        Err(StoreError::Io(_))
    ));
    let second = committer.submit(vec![offset("g", "t", 0, 1, "")]);
    let [two] = <[Held; 1]>::try_from(store.take(1)).unwrap();
    (two.done)(Ok(()));
    assert_eq!(second.blocking_recv().unwrap(), Ok(()));
    // Dropping the committer waits for nothing more.
    drop(committer);
}
