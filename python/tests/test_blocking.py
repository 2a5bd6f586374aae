"""The blocking API against a real coordinator."""

from __future__ import annotations

import math
import time

import pytest

import rollcall
from rollcall import TopicPartition

from conftest import Coordinator

EVENT_TIMEOUT = 10.0


def next_of(member: rollcall.Member, kind: type) -> rollcall.AnyEvent:
    """The next event, which must be of `kind` and come within EVENT_TIMEOUT."""
    event = member.next_event(timeout=EVENT_TIMEOUT)
    assert isinstance(event, kind), f"expected {kind.__name__}, got {event!r}"
    assert event is not None
    return event


def test_join_assign_revoke_acknowledge_and_resume_from_commits(coordinator: Coordinator) -> None:
    first = rollcall.connect(coordinator.addr)
    a = first.join("billing", {"orders": 6}, session_timeout=2.0)
    assert a.member_id
    assert a.group == "billing"
    assigned = next_of(a, rollcall.Assigned)
    assert isinstance(assigned, rollcall.Assigned)
    everything = frozenset(TopicPartition("orders", p) for p in range(6))
    assert assigned.partitions == everything
    assert assigned.generation >= 1
    assert a.assignment().partitions == everything

    second = rollcall.connect([coordinator.addr])
    b = second.join("billing", [("orders", 6)], session_timeout=2.0)
    revoke = next_of(a, rollcall.RevokeRequested)
    assert isinstance(revoke, rollcall.RevokeRequested)
    assert len(revoke.partitions) == 3
    # Cooperative: nothing moves before the owner acknowledges.
    assert b.next_event(timeout=0.3) is None
    a.commit({p: 100 + p.partition for p in revoke.partitions})
    a.ack_revocation(revoke.partitions)
    granted = next_of(b, rollcall.Assigned)
    assert isinstance(granted, rollcall.Assigned)
    assert granted.partitions == revoke.partitions
    committed = b.committed(["orders"])
    for p in granted.partitions:
        assert committed[p].offset == 100 + p.partition
    assert a.assignment().partitions == everything - revoke.partitions

    # A blocking leave hands the revocations of its partitions to `on_event`.
    seen = []

    def on_event(event: rollcall.AnyEvent) -> None:
        seen.append(event)
        if isinstance(event, rollcall.RevokeRequested):
            b.commit({p: 7 for p in event.partitions})
            b.ack_revocation(event.partitions)

    b.leave(5.0, on_event=on_event)
    assert [type(e) for e in seen] == [rollcall.RevokeRequested]
    taken = next_of(a, rollcall.Assigned)
    assert isinstance(taken, rollcall.Assigned)
    assert taken.partitions == granted.partitions
    assert b.finished or b.next_event(timeout=1.0) is None
    offsets = first.fetch_offsets("billing")
    assert {offsets[p].offset for p in granted.partitions} == {7}


def test_commit_and_fetch(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    m = client.join("ledger", {"entries": 2, "audit": 1}, session_timeout=2.0)
    next_of(m, rollcall.Assigned)
    m.commit(
        [
            rollcall.Offset(("entries", 0), 5, "five"),
            rollcall.Offset(TopicPartition("audit", 0), 9),
        ]
    )
    m.commit({("entries", 1): 3})
    got = m.committed()
    assert got[TopicPartition("entries", 0)].offset == 5
    assert got[TopicPartition("entries", 0)].metadata == "five"
    assert got[TopicPartition("entries", 1)].offset == 3
    assert got[TopicPartition("audit", 0)].offset == 9
    only = m.committed("audit")
    assert set(only) == {TopicPartition("audit", 0)}
    # Commits are fenced by ownership, with the protocol's error name.
    with pytest.raises(rollcall.NotOwnerError) as caught:
        m.commit({("entries", 7): 1})
    assert caught.value.code == "not_owner"
    assert caught.value.partitions == [TopicPartition("entries", 7)]
    assert isinstance(caught.value, rollcall.RollcallError)
    deadline = m.lease_deadline()
    assert deadline is not None and deadline > time.monotonic()
    assert not m.is_suspended


def test_a_worker_holding_the_gil_stays_a_member(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    # Heartbeats every 200 ms at most; the session expires after 1 s of silence.
    m = client.join("busy", {"t": 2}, session_timeout=1.0)
    assigned = next_of(m, rollcall.Assigned)
    member_id = m.member_id
    # Three seconds of pure Python: the GIL is never released (no other Python thread
    # asks for it), three session timeouts and fifteen heartbeat intervals long.
    end = time.monotonic() + 3.0
    spins = 0
    while time.monotonic() < end:
        spins += 1
    assert spins > 0
    # No suspension, no loss, the same membership, and the coordinator takes commits.
    assert m.next_event(timeout=0.3) is None
    assert not m.is_suspended
    assert m.member_id == member_id
    assert m.assignment().partitions == assigned.partitions  # type: ignore[union-attr]
    m.commit({("t", 0): 1})
    deadline = m.lease_deadline()
    assert deadline is not None and deadline > time.monotonic()


def test_blocking_iterator(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    m = client.join("iter", {"t": 1}, session_timeout=2.0)
    for event in m.events():
        assert isinstance(event, rollcall.Assigned)
        assert event.partitions == {TopicPartition("t", 0)}
        match event:
            case rollcall.Assigned(partitions, generation):
                assert generation >= 1 and len(partitions) == 1
        break
    m.leave(2.0)
    # The iterator ends with the membership.
    assert list(m.events()) == []
    assert m.finished


def test_bad_arguments_raise_clear_exceptions(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    cases = [
        dict(session_timeout=-1.0),
        dict(session_timeout=math.nan),
        dict(session_timeout=0.0),
        dict(session_timeout=2.0, lease_timeout=3.0),
        dict(session_timeout=2.0, heartbeat_interval=2.0),
        dict(instance_id=""),
    ]
    for kwargs in cases:
        with pytest.raises(rollcall.ConfigError) as caught:
            client.join("g", {"t": 1}, **kwargs)  # type: ignore[arg-type]
        assert isinstance(caught.value, ValueError)
        assert str(caught.value), kwargs
    with pytest.raises(rollcall.ConfigError, match="session_timeout"):
        client.join("g", {"t": 1}, session_timeout=-1.0)
    with pytest.raises(rollcall.ConfigError, match="no topic"):
        client.join("g", {})
    with pytest.raises(rollcall.ConfigError, match="zero partitions"):
        client.join("g", {"t": 0})
    with pytest.raises(rollcall.ConfigError, match="empty"):
        client.join("", {"t": 1})
    with pytest.raises(rollcall.ConfigError, match="topics"):
        client.join("g", 5)  # type: ignore[arg-type]
    with pytest.raises(rollcall.ConfigError, match="address"):
        rollcall.connect([])
    with pytest.raises(rollcall.ConfigError, match="username and password"):
        rollcall.connect(coordinator.addr, username="u")
    with pytest.raises(rollcall.ConnectError):
        rollcall.connect("127.0.0.1:1", connect_timeout=2.0)
    m = client.join("g", {"t": 1}, session_timeout=2.0)
    with pytest.raises(TypeError, match="TopicPartition"):
        m.ack_revocation(["t-0"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        m.commit(5)  # type: ignore[arg-type]
    with pytest.raises(rollcall.ConfigError, match="timeout"):
        m.next_event(timeout=-1)


def test_protocol_errors_are_named_after_their_codes(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    m = client.join("shared", {"t": 4}, session_timeout=2.0)
    next_of(m, rollcall.Assigned)
    with pytest.raises(rollcall.InconsistentSubscriptionError) as caught:
        client.join("shared", {"t": 5}, session_timeout=2.0, timeout=10.0)
    assert caught.value.code == "inconsistent_subscription"
    with pytest.raises(rollcall.InvalidSessionTimeoutError):
        client.join("other", {"t": 1}, session_timeout=0.05, timeout=10.0)
