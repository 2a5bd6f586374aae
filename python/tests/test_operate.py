"""Operator controls from Python: a member declares where it runs and what it weighs,
reports loads, and drains itself, against a real coordinator."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Dict

import pytest

import rollcall
from rollcall import TopicPartition

from conftest import Coordinator, rollcall_bin, wait_for

EVENT_TIMEOUT = 10.0


def describe(coordinator: Coordinator, group: str) -> Dict[str, Any]:
    out = subprocess.run(
        [rollcall_bin(), "describe", group, "--addr", coordinator.addr, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    described: Dict[str, Any] = json.loads(out.stdout)
    return described


def settle(member: rollcall.Member) -> None:
    """Takes the events due now, acknowledging every revocation at once."""
    while True:
        event = member.next_event(timeout=0.05)
        if event is None:
            return
        if isinstance(event, rollcall.RevokeRequested):
            member.ack_revocation(event.partitions)


def owned(member: rollcall.Member) -> int:
    settle(member)
    return len(member.assignment().partitions)


def test_placement_loads_and_a_self_drain(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    plain = client.join("ops", {"t": 8}, session_timeout=2.0)
    big = client.join(
        "ops",
        {"t": 8},
        session_timeout=2.0,
        label="big-host",
        rack="eu-1a",
        capacity=3,
        topic_racks={"t": ["eu-1a"] * 7 + [None]},
    )
    # Capacities 1 : 3 over 8 partitions.
    wait_for("2 and 6", lambda: (owned(plain), owned(big)) == (2, 6))

    loads = {p: 2.0 for p in big.assignment().partitions}
    big.report_loads(loads)
    first = next(iter(loads))
    big.report_load((first.topic, first.partition), 4.0)
    with pytest.raises(rollcall.InvalidRequestError):
        big.report_load(first, float("nan"))

    def big_described() -> Dict[str, Any]:
        members = describe(coordinator, "ops")["members"]
        found: Dict[str, Any] = next(m for m in members if m["member_id"] == big.member_id)
        return found

    wait_for("the load described", lambda: big_described()["load"] == 14.0)
    assert (big_described()["label"], big_described()["rack"]) == ("big-host", "eu-1a")
    assert big_described()["capacity"] == 3

    big.drain(timeout=EVENT_TIMEOUT)
    wait_for("big drained", lambda: (owned(plain), owned(big)) == (8, 0))
    assert big.member_id is not None and not big.finished
    assert big_described()["drained"] is True
    big.undrain(timeout=EVENT_TIMEOUT)
    wait_for("big back", lambda: (owned(plain), owned(big)) == (2, 6))
    big.leave()
    plain.leave()


def test_join_takes_its_keywords_once_and_checks_them(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        client.join("g", {"t": 1}, colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="join_async\\(\\) got an unexpected keyword argument 'timeout'"):
        client.join_async("g", {"t": 1}, timeout=1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="capacity"):
        client.join("g", {"t": 1}, capacity="big")  # type: ignore[arg-type]
    with pytest.raises(rollcall.ConfigError, match="capacity"):
        client.join("g", {"t": 1}, capacity=0)
    with pytest.raises(rollcall.ConfigError, match="2 preferred racks for 1 partitions"):
        client.join("g", {"t": 1}, topic_racks={"t": ["a", "b"]})
    with pytest.raises(rollcall.ConfigError, match="not subscribed"):
        client.join("g", {"t": 1}, topic_racks={"u": ["a"]})
    with pytest.raises(TypeError, match="topic_racks"):
        client.join("g", {"t": 1}, topic_racks={"t": "a"})
    # The keywords join had before still work, None meaning the default.
    m = client.join("g", {"t": 1}, session_timeout=2.0, client_id=None, detector=None)
    assert m.member_id
    m.leave()


def test_drain_async(coordinator: Coordinator) -> None:
    import asyncio

    async def main() -> None:
        client = await rollcall.Client.connect_async(coordinator.addr)
        a = await client.join_async("ops-async", {"t": 2}, session_timeout=2.0, label="x")
        event = await a.next_event_async()
        assert isinstance(event, rollcall.Assigned)
        await a.drain_async()
        event = await a.next_event_async()
        assert isinstance(event, rollcall.RevokeRequested)
        assert event.partitions == frozenset(TopicPartition("t", p) for p in range(2))
        a.ack_revocation(event.partitions)
        await a.undrain_async()
        event = await a.next_event_async()
        assert isinstance(event, rollcall.Assigned)
        await a.leave_async()

    asyncio.run(main())


def test_an_operator_drains_by_label(coordinator: Coordinator) -> None:
    client = rollcall.connect(coordinator.addr)
    a = client.join("ops-label", {"t": 4}, session_timeout=2.0, label="host-a")
    b = client.join("ops-label", {"t": 4}, session_timeout=2.0, label="host-b")
    wait_for("2 and 2", lambda: (owned(a), owned(b)) == (2, 2))
    assert client.drain("ops-label", label="host-a") == [a.member_id]
    wait_for("a drained", lambda: (owned(a), owned(b)) == (0, 4))
    assert client.undrain("ops-label", label="host-a") == [a.member_id]
    wait_for("a back", lambda: (owned(a), owned(b)) == (2, 2))
    assert b.member_id is not None
    assert client.drain("ops-label", b.member_id) == [b.member_id]
    wait_for("b drained", lambda: (owned(a), owned(b)) == (4, 0))
    with pytest.raises(rollcall.UnknownMemberError):
        client.undrain("ops-label", "nobody")
    with pytest.raises(rollcall.InvalidRequestError, match="either a member id or a label"):
        client.drain("ops-label", "x", label="y")
    a.leave()
    b.leave()
