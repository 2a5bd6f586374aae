"""Python worker processes: the example worker, killed with SIGKILL."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import List

import rollcall
from rollcall import TopicPartition

from conftest import Children, Coordinator, wait_for

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "worker.py"


class Worker:
    """The example worker in a process of its own; its output is kept."""

    def __init__(self, children: Children, addr: str, *args: str) -> None:
        self.lines: List[str] = []
        self.process = children.add(
            subprocess.Popen(
                [sys.executable, str(EXAMPLE), "--addr", addr, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )

        def drain() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line.rstrip())

        threading.Thread(target=drain, daemon=True).start()

    def said(self, word: str) -> bool:
        return any(word in line for line in self.lines)


def test_partitions_of_a_killed_python_worker_move_after_its_lease(
    coordinator: Coordinator, children: Children
) -> None:
    # Session 5 s (heartbeats every second at most), lease 1.5 s: a dead process's
    # partitions must move after the lease, long before the session timeout.
    worker = Worker(
        children, coordinator.addr,
        "--group", "crash", "--topic", "t", "--partitions", "4",
        "--session-timeout-ms", "5000", "--lease-timeout-ms", "1500",
        "--commit-interval-ms", "100",
    )
    wait_for("the worker's assignment", lambda: worker.said("assigned"), 30.0)

    client = rollcall.connect(coordinator.addr)
    m = client.join("crash", {"t": 4}, session_timeout=5.0, lease_timeout=1.5)
    first = m.next_event(timeout=10.0)
    assert isinstance(first, rollcall.Assigned), first
    assert len(first.partitions) == 2
    wait_for("the worker's release", lambda: worker.said("released"))
    # Let the worker process and commit some records on what it kept.
    time.sleep(0.3)

    os.kill(worker.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    worker.process.wait(10)
    moved = m.next_event(timeout=10.0)
    elapsed = time.monotonic() - killed
    assert isinstance(moved, rollcall.Assigned), moved
    everything = frozenset(TopicPartition("t", p) for p in range(4))
    assert moved.partitions == everything - first.partitions
    # After the lease (1.5 s from the last frame the coordinator received: a commit,
    # 100 ms at most before the kill), well before the 5 s session timeout.
    assert 1.2 <= elapsed <= 3.5, elapsed
    # The survivor resumes from what the dead worker committed.
    committed = m.committed("t")
    assert all(committed[p].offset > 0 for p in moved.partitions), committed


def test_three_python_workers_share_a_group_and_leave_gracefully(
    coordinator: Coordinator, children: Children
) -> None:
    workers = []
    for i in range(3):
        workers.append(
            Worker(
                children, coordinator.addr,
                "--group", "trio", "--topic", "orders", "--partitions", "12",
                "--session-timeout-ms", "3000",
            )
        )
        wait_for(f"worker {i} assigned", lambda: workers[-1].said("assigned"), 30.0)
    client = rollcall.connect(coordinator.addr)
    wait_for(
        "each worker to own 4",
        lambda: all(any("owned=4" in line for line in w.lines[-3:]) for w in workers),
        15.0,
    )
    # Ctrl-C leaves gracefully: the leaver commits, releases, and the others take over.
    workers[0].process.send_signal(signal.SIGINT)
    assert workers[0].process.wait(10) == 0
    assert workers[0].said("left")
    wait_for(
        "the survivors to own 6 each",
        lambda: all(any("owned=6" in line for line in w.lines[-3:]) for w in workers[1:]),
        15.0,
    )
    offsets = client.fetch_offsets("trio", "orders")
    assert len(offsets) == 12
