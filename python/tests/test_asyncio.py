"""The asyncio API against a real coordinator."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest

import rollcall
from rollcall import TopicPartition

from conftest import Coordinator

STEP = 10.0


async def scenario(addr: str) -> None:
    client = await rollcall.connect_async(addr)
    a = await client.join_async("async", {"t": 4}, session_timeout=2.0)
    events = a.events()
    assigned = await asyncio.wait_for(events.__anext__(), STEP)
    assert isinstance(assigned, rollcall.Assigned)
    assert len(assigned.partitions) == 4

    await a.commit_async({TopicPartition("t", 0): 11})
    committed = await a.committed_async(["t"])
    assert committed[TopicPartition("t", 0)].offset == 11
    fetched = await client.fetch_offsets_async("async")
    assert fetched[TopicPartition("t", 0)].offset == 11

    # While a wait is pending, the event loop keeps running other tasks.
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    other = await rollcall.connect_async([addr])
    b = await other.join_async("async", [("t", 4)], session_timeout=2.0)
    revoke = await asyncio.wait_for(events.__anext__(), STEP)
    assert isinstance(revoke, rollcall.RevokeRequested)
    assert len(revoke.partitions) == 2
    # Cooperative: nothing moves before the owner acknowledges.
    assert b.assignment().partitions == frozenset()
    await a.commit_async({p: 50 for p in revoke.partitions})
    a.ack_revocation(revoke.partitions)
    got: List[rollcall.AnyEvent] = []

    async def consume_b() -> None:
        async for event in b.events():
            got.append(event)
            if isinstance(event, rollcall.RevokeRequested):
                await b.commit_async({p: 60 for p in event.partitions})
                b.ack_revocation(event.partitions)

    consuming = asyncio.create_task(consume_b())
    start = time.monotonic()
    while not got and time.monotonic() - start < STEP:
        await asyncio.sleep(0.01)
    assert got and isinstance(got[0], rollcall.Assigned)
    assert got[0].partitions == revoke.partitions
    assert ticks > 0
    ticking.cancel()

    # Leaving while the consumer takes the events: it commits and releases, and the
    # iteration ends with the membership.
    await asyncio.wait_for(b.leave_async(5.0), STEP)
    await asyncio.wait_for(consuming, STEP)
    assert [type(e) for e in got] == [rollcall.Assigned, rollcall.RevokeRequested]
    assert b.finished
    back = await asyncio.wait_for(events.__anext__(), STEP)
    assert isinstance(back, rollcall.Assigned)
    assert back.partitions == revoke.partitions
    offsets = await a.committed_async("t")
    assert {offsets[p].offset for p in revoke.partitions} == {60}


def test_asyncio_join_events_commit_revoke_and_leave(coordinator: Coordinator) -> None:
    asyncio.run(asyncio.wait_for(scenario(coordinator.addr), 60.0))


def test_asyncio_errors(coordinator: Coordinator) -> None:
    async def run() -> None:
        with pytest.raises(rollcall.ConnectError):
            await rollcall.connect_async("127.0.0.1:1", connect_timeout=2.0)
        client = await rollcall.connect_async(coordinator.addr)
        with pytest.raises(rollcall.ConfigError):
            await client.join_async("g", {"t": 1}, lease_margin=-2.0)
        m = await client.join_async("g", {"t": 1}, session_timeout=2.0)
        with pytest.raises(rollcall.NotOwnerError):
            await m.commit_async({("t", 3): 1})
        # A cancelled wait leaves the member usable: the event is not lost.
        first = await asyncio.wait_for(m.next_event_async(), STEP)
        assert isinstance(first, rollcall.Assigned)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(m.next_event_async(), 0.2)
        await asyncio.wait_for(m.leave_async(2.0), STEP)

    asyncio.run(asyncio.wait_for(run(), 60.0))


def test_an_asyncio_worker_blocking_its_loop_stays_a_member(coordinator: Coordinator) -> None:
    async def run() -> None:
        client = await rollcall.connect_async(coordinator.addr)
        m = await client.join_async("stuck-loop", {"t": 2}, session_timeout=1.0)
        events = m.events()
        first = await asyncio.wait_for(events.__anext__(), STEP)
        assert isinstance(first, rollcall.Assigned)
        # A coroutine that computes for three session timeouts without awaiting: the
        # event loop and the GIL are held throughout.
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            pass
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(events.__anext__(), 0.3)
        assert not m.is_suspended
        await m.commit_async({("t", 1): 4})

    asyncio.run(asyncio.wait_for(run(), 60.0))
