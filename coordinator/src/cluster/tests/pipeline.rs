//! The order of the etcd store's writes under way: a write to a key an earlier write
//! under way also writes is sent only after it, and fails with it (with its error); a
//! write sharing only a group goes at once but reports success only if the earlier one
//! succeeded; writes that share nothing are independent.

use std::sync::Arc;

use futures_util::FutureExt;

use super::super::pipeline::{Footprint, Pipeline};
use crate::store::StoreError;

fn write(groups: &[&str], keys: &[&str], prefixes: &[&str]) -> Footprint {
    Footprint {
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
    }
}

fn fenced() -> StoreError {
    StoreError::Fenced { slot: 3 }
}

const OK: Result<(), StoreError> = Ok(());

#[tokio::test]
async fn distinct_keys_go_at_once_and_the_same_key_waits_for_the_earlier_write() {
    let pipeline = Arc::new(Pipeline::default());
    let first = pipeline.begin(write(&["g"], &["o/g/t/0", "i/g"], &[]));
    let mut other_key = pipeline.begin(write(&["g"], &["o/g/t/1"], &[]));
    let mut same_key = pipeline.begin(write(&["g"], &["o/g/t/0"], &[]));
    let mut other_group = pipeline.begin(write(&["h"], &["o/h/t/0"], &[]));

    assert_eq!(other_key.may_send().now_or_never(), Some(OK));
    assert_eq!(other_group.may_send().now_or_never(), Some(OK));
    assert_eq!(
        same_key.may_send().now_or_never(),
        None,
        "sent before the earlier write to its key ended"
    );

    assert_eq!(first.end(OK).await, OK);
    assert_eq!(same_key.may_send().now_or_never(), Some(OK));
    assert_eq!(other_key.end(OK).await, OK);
    assert_eq!(same_key.end(OK).await, OK);
    assert_eq!(other_group.end(OK).await, OK);
    assert_eq!(pipeline.len(), 0);
}

#[tokio::test]
async fn a_write_ending_first_waits_for_the_earlier_one_of_its_group() {
    let pipeline = Arc::new(Pipeline::default());
    let first = pipeline.begin(write(&["g"], &["o/g/t/0"], &[]));
    let mut second = pipeline.begin(write(&["g"], &["o/g/t/1"], &[]));
    assert_eq!(second.may_send().now_or_never(), Some(OK));

    // The second write's transactions land first; its outcome waits for the first's.
    let mut second_end = Box::pin(second.end(OK));
    assert_eq!((&mut second_end).now_or_never(), None);
    assert_eq!(first.end(OK).await, OK);
    assert_eq!(second_end.now_or_never(), Some(OK));
}

#[tokio::test]
async fn a_fenced_write_mid_pipeline_fails_those_after_it_of_its_groups_only() {
    let pipeline = Arc::new(Pipeline::default());
    let before = pipeline.begin(write(&["g"], &["o/g/t/9"], &[]));
    assert_eq!(
        before.end(OK).await,
        OK,
        "a write ended before does not count"
    );
    let fenced_write = pipeline.begin(write(&["g"], &["o/g/t/0", "i/g"], &[]));
    let mut same_key = pipeline.begin(write(&["g"], &["i/g"], &[]));
    let mut same_group = pipeline.begin(write(&["g"], &["o/g/t/1"], &[]));
    let mut other_group = pipeline.begin(write(&["h"], &["o/h/t/0"], &[]));
    assert_eq!(same_group.may_send().now_or_never(), Some(OK));
    assert_eq!(other_group.may_send().now_or_never(), Some(OK));

    // Out of order: the later writes' own transactions end first.
    let mut same_group_end = Box::pin(same_group.end(OK));
    assert_eq!((&mut same_group_end).now_or_never(), None);
    assert_eq!(
        other_group.end(OK).await,
        OK,
        "another group's write is independent"
    );

    assert_eq!(fenced_write.end(Err(fenced())).await, Err(fenced()));
    assert_eq!(
        same_key.may_send().await,
        Err(fenced()),
        "a write after a fenced one to the same key is not sent, and is fenced too"
    );
    assert_eq!(same_key.end(Err(fenced())).await, Err(fenced()));
    assert_eq!(
        same_group_end.await,
        Err(fenced()),
        "landed, but prepared after a failed write"
    );
    assert_eq!(pipeline.len(), 0);
}

#[tokio::test]
async fn a_prefix_deletion_orders_with_the_keys_below_it() {
    let pipeline = Arc::new(Pipeline::default());
    let put = pipeline.begin(write(&["g"], &["o/g/t/0"], &[]));
    let mut delete_all = pipeline.begin(write(&["g"], &["g/g"], &["o/g/"]));
    let mut put_again = pipeline.begin(write(&["g"], &["o/g/t/3"], &[]));
    assert_eq!(delete_all.may_send().now_or_never(), None);
    assert_eq!(put.end(OK).await, OK);
    assert_eq!(delete_all.may_send().now_or_never(), Some(OK));
    assert_eq!(put_again.may_send().now_or_never(), None);
    assert_eq!(delete_all.end(OK).await, OK);
    assert_eq!(put_again.may_send().now_or_never(), Some(OK));
    assert_eq!(put_again.end(OK).await, OK);
}

#[tokio::test]
async fn a_dropped_write_counts_as_failed_and_quiet_waits_for_the_group() {
    let pipeline = Arc::new(Pipeline::default());
    let dropped = pipeline.begin(write(&["g"], &["o/g/t/0"], &[]));
    let mut after = pipeline.begin(write(&["g"], &["o/g/t/0"], &[]));
    let mut quiet = Box::pin(pipeline.quiet(|group| group == "g"));
    assert_eq!((&mut quiet).now_or_never(), None);
    drop(dropped);
    assert!(after.may_send().await.is_err());
    assert!(after.end(OK).await.is_err());
    assert_eq!(quiet.now_or_never(), Some(()));
    assert_eq!(pipeline.len(), 0);
}
