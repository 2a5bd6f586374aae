use super::*;
use crate::types::PartitionSet;

fn tps(partitions: &[u32]) -> PartitionSet {
    partitions
        .iter()
        .map(|p| TopicPartition::new("t", *p))
        .collect()
}

fn resumed(partitions: &[u32]) -> Event {
    Event::Resumed {
        partitions: tps(partitions),
    }
}

fn revoke(partitions: &[u32], generation: u32) -> Event {
    Event::RevokeRequested {
        partitions: tps(partitions),
        generation,
    }
}

/// Hands `event` out and returns it as the application sees it.
fn hand(handed: &mut Handed, mut event: Event) -> Event {
    handed.hand_out(&mut event);
    event
}

#[test]
fn a_resumption_built_before_an_acknowledgement_does_not_list_what_it_released() {
    let mut handed = Handed::default();
    hand(&mut handed, revoke(&[2], 4));
    // The connection task builds this while the application still holds t-2...
    let queued = resumed(&[0, 1, 2]);
    // ...and the application releases t-2 before it takes it.
    assert_eq!(
        handed.acknowledge(tps(&[2])),
        vec![(TopicPartition::new("t", 2), 4)]
    );
    assert_eq!(hand(&mut handed, queued), resumed(&[0, 1]));
    let suspended = Event::Suspended {
        partitions: tps(&[1, 2]),
    };
    assert_eq!(
        hand(&mut handed, suspended),
        Event::Suspended {
            partitions: tps(&[1])
        }
    );
}

#[test]
fn a_partition_granted_again_is_listed_again() {
    let mut handed = Handed::default();
    hand(&mut handed, revoke(&[2], 4));
    handed.acknowledge(tps(&[2]));
    hand(
        &mut handed,
        Event::Assigned {
            partitions: tps(&[2]),
            generation: 6,
        },
    );
    assert_eq!(hand(&mut handed, resumed(&[0, 2])), resumed(&[0, 2]));
    // And asked for again, it can be acknowledged again.
    hand(&mut handed, revoke(&[2], 7));
    assert_eq!(
        handed.acknowledge(tps(&[2])),
        vec![(TopicPartition::new("t", 2), 7)]
    );
}

#[test]
fn only_partitions_asked_for_are_acknowledged_and_released() {
    let mut handed = Handed::default();
    hand(&mut handed, revoke(&[1], 3));
    assert_eq!(
        handed.acknowledge(tps(&[1, 2])),
        vec![(TopicPartition::new("t", 1), 3)]
    );
    // t-2 was never asked for: still listed.
    assert_eq!(hand(&mut handed, resumed(&[1, 2])), resumed(&[2]));
    // A second acknowledgement of t-1 sends nothing.
    assert!(handed.acknowledge(tps(&[1])).is_empty());
}

#[test]
fn a_lost_partition_cannot_be_acknowledged_and_the_end_of_the_membership_forgets_all() {
    let mut handed = Handed::default();
    hand(&mut handed, revoke(&[1, 2], 3));
    handed.acknowledge(tps(&[2]));
    let lost = hand(
        &mut handed,
        Event::Lost {
            partitions: tps(&[1, 2]),
            reason: LostReason::Reassigned,
        },
    );
    // t-2 was released already: only t-1 is lost.
    assert_eq!(
        lost,
        Event::Lost {
            partitions: tps(&[1]),
            reason: LostReason::Reassigned
        }
    );
    assert!(handed.acknowledge(tps(&[1])).is_empty());
    hand(
        &mut handed,
        Event::Lost {
            partitions: tps(&[]),
            reason: LostReason::Fenced,
        },
    );
    assert!(handed.released.is_empty() && handed.asked.is_empty());
}
