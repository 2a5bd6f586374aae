"""A worker that takes part in a group and processes synthetic records.

The Python twin of the client crate's example worker (client/examples/worker.rs). Each
owned partition has an offset counter that advances every few milliseconds, as if
records were being processed. Offsets are committed periodically and on revocation;
assignment changes are logged. While the member is suspended (its lease ran out or its
connection dropped) processing and periodic commits pause, and they pick up again when
it resumes. Ctrl-C (or SIGTERM) leaves the group gracefully.

With a coordinator started by `cargo run --release --bin rollcall -- serve`:

    python python/examples/worker.py --group billing --topic orders --partitions 12
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from typing import Dict, Optional, Set

import rollcall
from rollcall import TopicPartition

log = logging.getLogger("worker")


class Work:
    """What the worker holds and whether it may act on it."""

    def __init__(self) -> None:
        # The next offset to process on each owned partition.
        self.positions: Dict[TopicPartition, int] = {}
        # Between Suspended and Resumed (or Lost): hold everything, act on nothing.
        self.suspended = False


def listing(partitions: Set[TopicPartition] | frozenset[TopicPartition]) -> str:
    return ",".join(str(p) for p in sorted(partitions))


def commit(
    member: rollcall.Member, work: Work, only: Optional[frozenset[TopicPartition]] = None
) -> None:
    """Commits the positions of `only` (or of every owned partition)."""
    offsets = {p: o for p, o in work.positions.items() if only is None or p in only}
    if not offsets:
        return
    # A write outside the coordinator would be bounded by the lease the same way.
    deadline = member.lease_deadline()
    if deadline is not None and deadline <= time.monotonic():
        log.warning("lease expired; not committing")
        return
    try:
        member.commit(offsets)
        log.debug("committed %d offsets", len(offsets))
    except rollcall.RollcallError as e:
        log.warning("commit failed: %s", e)


def handle(member: rollcall.Member, topic: str, work: Work, event: rollcall.AnyEvent) -> bool:
    """Acts on one event; False when the member cannot continue."""
    if isinstance(event, rollcall.Assigned):
        # Resume from the committed offsets (0 where nothing was committed).
        try:
            committed = member.committed([topic])
        except rollcall.RollcallError as e:
            log.warning("cannot fetch committed offsets: %s", e)
            committed = {}
        for p in event.partitions:
            c = committed.get(p)
            work.positions[p] = c.offset if c is not None else 0
        log.info(
            "assigned generation=%d partitions=%s owned=%d",
            event.generation, listing(event.partitions), len(work.positions),
        )
    elif isinstance(event, rollcall.RevokeRequested):
        # Commit what was processed, then release.
        commit(member, work, event.partitions)
        for p in event.partitions:
            work.positions.pop(p, None)
        try:
            member.ack_revocation(event.partitions)
        except rollcall.RollcallError as e:
            # Nothing reaches the coordinator any more: the session will expire.
            log.error("cannot release %s: %s", listing(event.partitions), e)
            return False
        log.info(
            "released generation=%d partitions=%s owned=%d",
            event.generation, listing(event.partitions), len(work.positions),
        )
    elif isinstance(event, rollcall.Lost):
        # Someone else may own them already: stop without committing.
        for p in event.partitions:
            work.positions.pop(p, None)
        log.warning(
            "lost reason=%s partitions=%s owned=%d",
            event.reason, listing(event.partitions), len(work.positions),
        )
        # Every loss but a reassignment ends the membership, and any suspension with it.
        if event.ends_membership:
            work.suspended = False
    elif isinstance(event, rollcall.Suspended):
        # Maybe no longer the owner: pause everything, keep the positions.
        work.suspended = True
        log.warning("suspended; pausing partitions=%s", listing(event.partitions))
    elif isinstance(event, rollcall.Resumed):
        work.suspended = False
        log.info("resumed partitions=%s", listing(event.partitions))
    elif isinstance(event, rollcall.Fatal):
        log.error("%s", event.error)
        return False
    return True


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="A rollcall worker processing synthetic records")
    parser.add_argument(
        "--addr", default="127.0.0.1:7070",
        help="the coordinator's address, or several, comma-separated",
    )
    parser.add_argument("--group", required=True, help="the group to join")
    parser.add_argument("--topic", required=True, help="the topic to consume")
    parser.add_argument("--partitions", type=int, required=True, help="the topic's partition count")
    parser.add_argument("--instance-id", help="a static instance id")
    parser.add_argument("--session-timeout-ms", type=int, help="the session timeout")
    parser.add_argument(
        "--lease-timeout-ms", type=int,
        help="the lease timeout (default: three heartbeat intervals and 250 ms)",
    )
    parser.add_argument("--record-interval-ms", type=int, default=5)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--leave-timeout-ms", type=int, default=5000)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s"
    )

    client = rollcall.connect(args.addr.split(","))
    session = args.session_timeout_ms / 1000 if args.session_timeout_ms else None
    lease = args.lease_timeout_ms / 1000 if args.lease_timeout_ms else None
    member = client.join(
        args.group,
        {args.topic: args.partitions},
        instance_id=args.instance_id,
        client_id="rollcall-example-worker",
        session_timeout=session,
        lease_timeout=lease,
    )
    log.info("joined group=%s member_id=%s", args.group, member.member_id)

    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    work = Work()
    record_every = max(args.record_interval_ms, 1) / 1000
    commit_every = max(args.commit_interval_ms, 1) / 1000
    next_record = time.monotonic() + record_every
    next_commit = time.monotonic() + commit_every
    while not stop:
        wait = max(0.0, min(next_record, next_commit) - time.monotonic())
        event = member.next_event(timeout=wait)
        if event is not None:
            if not handle(member, args.topic, work, event):
                return 1
            continue
        if member.finished:
            break
        now = time.monotonic()
        if now >= next_record:
            # Processing one record on each partition is progress; so is waiting while
            # suspended: the member is doing what it should.
            if not work.suspended:
                for p in work.positions:
                    work.positions[p] += 1
            member.mark_progress()
            next_record = now + record_every
        if now >= next_commit:
            if not work.suspended:
                commit(member, work)
            next_commit = now + commit_every

    log.info("leaving")
    try:
        member.leave(
            args.leave_timeout_ms / 1000,
            on_event=lambda event: handle(member, args.topic, work, event),
        )
        log.info("left")
    except rollcall.RollcallError as e:
        log.warning("%s", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
