"""Fixtures: a real `rollcall serve` on a free loopback port, in memory, per test."""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import threading
import time
from typing import Deque, Iterator, List

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


def rollcall_bin() -> str:
    """The `rollcall` binary: $ROLLCALL_BIN, or the workspace's debug build (built if
    missing)."""
    configured = os.environ.get("ROLLCALL_BIN")
    if configured:
        return configured
    path = REPO / "target" / "debug" / "rollcall"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "--bin", "rollcall"], cwd=REPO, check=True, timeout=1800
        )
    return str(path)


class Coordinator:
    """A `rollcall serve` process; its log is kept for failure messages."""

    def __init__(self, *extra: str) -> None:
        self.log: Deque[str] = collections.deque(maxlen=2000)
        self.process = subprocess.Popen(
            [
                rollcall_bin(),
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-addr",
                "off",
                "--in-memory",
                "--shards",
                "1",
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"},
        )
        found = threading.Event()
        self.addr = ""

        def drain() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line.rstrip())
                if not found.is_set():
                    m = re.search(r"listen=(\S+)", line)
                    if m:
                        self.addr = m.group(1)
                        found.set()

        self.thread = threading.Thread(target=drain, daemon=True)
        self.thread.start()
        if not found.wait(START_TIMEOUT):
            self.stop()
            raise RuntimeError("rollcall serve did not start: " + " | ".join(self.log))

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    c = Coordinator()
    try:
        yield c
    finally:
        c.stop()


class Children:
    """Processes a test starts, killed at its end whatever happens."""

    def __init__(self) -> None:
        self.processes: List[subprocess.Popen[str]] = []

    def add(self, p: "subprocess.Popen[str]") -> "subprocess.Popen[str]":
        self.processes.append(p)
        return p


@pytest.fixture
def children() -> Iterator[Children]:
    c = Children()
    try:
        yield c
    finally:
        for p in c.processes:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def wait_for(what: str, condition: "object", timeout: float = 10.0) -> None:
    """Polls `condition()` every 20 ms until it holds, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
