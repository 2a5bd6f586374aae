use super::*;
use rollcall_protocol::{Push, ShutdownPush};

pub(crate) fn push() -> Frame {
    Frame::push(Push::Shutdown(ShutdownPush {
        message: "x".into(),
    }))
}

pub(crate) fn limits(frames: usize, bytes: usize) -> Arc<SendLimits> {
    Arc::new(SendLimits {
        frames,
        bytes,
        max_frame_size: 1024,
        too_large: Counter::noop(),
        budget: Arc::new(BufferBudget::new(usize::MAX)),
    })
}

#[test]
fn a_backlog_past_the_shared_budget_kills_the_connection_that_grows_it() {
    let budget = Arc::new(BufferBudget::new(4096));
    let shared = Arc::new(SendLimits {
        frames: usize::MAX,
        bytes: usize::MAX,
        max_frame_size: 1 << 20,
        too_large: Counter::noop(),
        budget: budget.clone(),
    });
    let (a, a_state) = ConnHandle::new(shared.clone());
    let (b, b_state) = ConnHandle::new(shared);
    let big = || {
        Frame::push(Push::Shutdown(ShutdownPush {
            message: "x".repeat(8 * 1024),
        }))
    };
    // Within its free allowance a connection queues without counting.
    for _ in 0..7 {
        assert!(matches!(a.send(big(), true), Sent::Queued));
    }
    assert_eq!(budget.used(), 0);
    let mut sent = 0;
    while matches!(a.send(big(), true), Sent::Queued) {
        sent += 1;
        assert!(sent < 100, "the budget never stopped it");
    }
    assert!(a_state.over_budget.load(Ordering::Relaxed));
    assert!(budget.used() <= 4096);
    // The other connection, within its allowance, is untouched.
    assert!(matches!(b.send(big(), true), Sent::Queued));
    assert!(!b_state.is_killed());
    // Closing the first gives its bytes back.
    a_state.close();
    assert_eq!(budget.used(), 0);
    drop(b);
    drop(b_state);
}

pub(crate) fn drain(state: &ConnState) -> Vec<Bytes> {
    let mut out = Vec::new();
    loop {
        let mut batch: [Option<Bytes>; 2] = Default::default();
        let (taken, more) = state.take_some(&mut batch);
        out.extend(batch.into_iter().take(taken).flatten());
        if !more {
            return out;
        }
    }
}

fn assignment(member: &str, generation: u32) -> Frame {
    Frame::push(Push::Assignment(rollcall_protocol::AssignmentPush {
        group: "g".into(),
        member_id: member.into(),
        generation,
        partitions: Vec::new(),
    }))
}

fn generation_of(bytes: &Bytes) -> Option<(String, u32)> {
    match Frame::decode(&bytes[4..]).unwrap().body {
        Body::Push(Push::Assignment(a)) => Some((a.member_id, a.generation)),
        _ => None,
    }
}

#[test]
fn a_newer_assignment_supersedes_the_queued_one_for_the_same_member() {
    let (handle, state) = ConnHandle::new(limits(3, 1 << 20));
    // Three frames fill the queue; superseded ones do not count against it.
    for generation in 1..=10 {
        assert_eq!(
            handle.send(assignment("a", generation), false),
            Sent::Queued
        );
        assert_eq!(
            handle.send(assignment("b", generation), false),
            Sent::Queued
        );
    }
    assert_eq!(handle.send(push(), false), Sent::Queued);
    assert!(!state.kill.is_cancelled());
    let queued = drain(&state);
    let seen: Vec<_> = queued.iter().map(generation_of).collect();
    // Only the newest of each member's, in the order the newest were queued, and
    // the shutdown push after them.
    assert_eq!(
        seen,
        vec![Some(("a".into(), 10)), Some(("b".into(), 10)), None]
    );
    // Once taken for writing, a frame is no longer superseded: the next one queues.
    assert_eq!(handle.send(assignment("a", 11), false), Sent::Overflow);
    let total: usize = queued.iter().map(Bytes::len).sum();
    state.written(3, total);
    assert_eq!(state.queued_bytes(), 0);
}

fn big_push(len: usize) -> Frame {
    Frame::push(Push::Shutdown(ShutdownPush {
        message: "x".repeat(len),
    }))
}

#[test]
fn queued_bytes_are_bounded_and_returned_when_written() {
    let (handle, state) = ConnHandle::new(limits(100, 1000));
    // A frame of any size that fits a frame is accepted into an empty queue.
    assert_eq!(handle.send(big_push(1000), false), Sent::Queued);
    let first = state.queued_bytes();
    assert!(first > 1000);
    let taken = drain(&state);
    assert_eq!(taken[0].len(), first);
    // Still counted while being written; given back once written.
    assert_eq!(state.queued_bytes(), first);
    state.written(1, first);
    for _ in 0..4 {
        assert_eq!(handle.send(big_push(200), false), Sent::Queued);
    }
    assert!(!state.kill.is_cancelled());
    assert_eq!(handle.send(big_push(200), false), Sent::Overflow);
    assert!(state.kill.is_cancelled());
    assert!(state.overflowed.load(Ordering::Relaxed));
    assert!(state.queued_bytes() <= 1000);
}

#[test]
fn too_large_answers_are_replaced_by_an_error_and_pushes_dropped() {
    let (handle, state) = ConnHandle::new(limits(100, 1 << 20));
    assert_eq!(handle.send(big_push(2000), false), Sent::TooLarge);
    assert!(drain(&state).is_empty());
    let answer = Frame::response(
        9,
        Response::error(7, ErrorCode::UnknownGroup, "y".repeat(2000)),
    );
    assert_eq!(handle.send(answer, false), Sent::Queued);
    let bytes = drain(&state).remove(0);
    let frame = Frame::decode(&bytes[4..]).unwrap();
    assert_eq!(frame.correlation_id, 9);
    let rollcall_protocol::Body::Response(Response::Error(e)) = frame.body else {
        panic!("{frame:?}");
    };
    assert_eq!(e.code, ErrorCode::FrameTooLarge);
    assert_eq!(e.api_key, 7);
    assert!(e
        .message
        .contains("more than the coordinator's maximum of 1024"));
}
