//! The oracle finds what it is there to find, and nothing in a clean history.

use std::time::{Duration, Instant};

use rollcall_client::{Event, LostReason, PartitionSet, TopicPartition};

use super::*;

fn set(ps: &[u32]) -> PartitionSet {
    ps.iter().map(|p| TopicPartition::new(TOPIC, *p)).collect()
}

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

fn event(t0: Instant, ms: u64, member: usize, event: Event) -> Record {
    Record::Event {
        at: at(t0, ms),
        member,
        event,
    }
}

fn assigned(t0: Instant, ms: u64, member: usize, ps: &[u32]) -> Record {
    event(
        t0,
        ms,
        member,
        Event::Assigned {
            partitions: set(ps),
            generation: 1,
        },
    )
}

fn commit(t0: Instant, sent: u64, done: u64, member: usize, offset: i64, ok: bool) -> Record {
    Record::Commit {
        member,
        partitions: set(&[0]),
        offset,
        sent: at(t0, sent),
        done: at(t0, done),
        accepted: ok,
    }
}

fn groups() -> Vec<String> {
    vec!["g".to_owned(), "g".to_owned()]
}

#[test]
fn a_hand_over_after_the_release_or_a_suspension_is_clean() {
    let t0 = Instant::now();
    let records = vec![
        assigned(t0, 0, 0, &[0, 1]),
        commit(t0, 10, 20, 0, 1, true),
        Record::Released {
            at: at(t0, 100),
            member: 0,
            partitions: set(&[1]),
        },
        assigned(t0, 150, 1, &[1]),
        event(
            t0,
            200,
            0,
            Event::Suspended {
                partitions: set(&[0]),
            },
        ),
        event(
            t0,
            300,
            0,
            Event::Resumed {
                partitions: set(&[0]),
            },
        ),
        commit(t0, 310, 320, 0, 2, true),
    ];
    let v = check(&records, &groups(), at(t0, 50), at(t0, 1000));
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.accepted, 2);
    assert_eq!(v.moves.len(), 1);
    assert!(v.lost.is_empty());
}

#[test]
fn two_members_holding_one_partition_at_once_is_found() {
    let t0 = Instant::now();
    let records = vec![
        assigned(t0, 0, 0, &[0]),
        assigned(t0, 100, 1, &[0]),
        event(
            t0,
            200,
            0,
            Event::Lost {
                partitions: set(&[0]),
                reason: LostReason::LeaseExpired,
            },
        ),
    ];
    let v = check(&records, &groups(), at(t0, 0), at(t0, 1000));
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert_eq!(v.lost.len(), 1);
}

#[test]
fn a_commit_accepted_from_a_member_while_another_held_the_partition_is_found() {
    let t0 = Instant::now();
    let records = vec![
        assigned(t0, 0, 0, &[0]),
        event(
            t0,
            50,
            0,
            Event::Suspended {
                partitions: set(&[0]),
            },
        ),
        assigned(t0, 100, 1, &[0]),
        // Refused: fine. Accepted: the coordinator took it from a fenced member.
        commit(t0, 200, 210, 0, 5, false),
        commit(t0, 300, 310, 0, 6, true),
    ];
    let v = check(&records, &groups(), at(t0, 0), at(t0, 1000));
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("commit 6"), "{:?}", v.violations);
}

#[test]
fn an_accepted_commit_missing_from_the_store_is_found() {
    let t0 = Instant::now();
    let records = vec![
        assigned(t0, 0, 0, &[0]),
        commit(t0, 10, 20, 0, 7, true),
        commit(t0, 30, 40, 0, 9, false),
    ];
    let v = check(&records, &groups(), at(t0, 0), at(t0, 100));
    let key = ("g".to_owned(), TopicPartition::new(TOPIC, 0));
    let stored = |o: i64| [(key.clone(), o)].into_iter().collect();
    assert!(missing_commits(&v, &stored(7)).is_empty());
    assert!(missing_commits(&v, &stored(9)).is_empty());
    assert_eq!(missing_commits(&v, &stored(6)).len(), 1);
    assert_eq!(missing_commits(&v, &stored(10)).len(), 1);
    assert_eq!(missing_commits(&v, &BTreeMap::new()).len(), 1);
}

#[test]
fn a_lost_acknowledged_commit_is_found_while_later_commits_are_still_coming() {
    let t0 = Instant::now();
    let records = vec![
        assigned(t0, 0, 0, &[0]),
        commit(t0, 10, 20, 0, 7, true),
        commit(t0, 30, 40, 0, 9, false),
    ];
    let v = check(&records, &groups(), at(t0, 0), at(t0, 100));
    let key = ("g".to_owned(), TopicPartition::new(TOPIC, 0));
    let stored = |o: i64| [(key.clone(), o)].into_iter().collect();
    assert!(lost_commits(&v, &stored(7)).is_empty());
    // Commits sent after the records were read may already be there.
    assert!(lost_commits(&v, &stored(12)).is_empty());
    assert_eq!(lost_commits(&v, &stored(6)).len(), 1);
    assert_eq!(lost_commits(&v, &BTreeMap::new()).len(), 1);
}
