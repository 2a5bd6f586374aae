"""What 100 members' heartbeats cost, from Python and from Rust.

Each run has two phases, one after the other, each against a fresh `rollcall serve`
(in memory) on a free loopback port:

- rust: `hold-members` (bench/hold_members.rs) holds MEMBERS members of one group
  through the client crate;
- python: a Python process holds the same members through this package (one client,
  one asyncio task per member taking its events).

Both send the same wire traffic: the heartbeats are the client crate's in both. After
the joins and a settling pause, each phase reads, over WINDOW seconds of steady
membership, the CPU time (user + system, /proc/PID/stat) of the coordinator and of the
holder process, and counts the renewals the coordinator answered (its heartbeat
metrics). It prints one line per phase and, at the end, the medians.

    python bench/heartbeats.py --runs 3 --window 60

Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 (utime, stime), counted from 1 with the name as field 2.
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def renewals(metrics: str) -> float:
    """Member heartbeats the coordinator received (`rollcall_heartbeats_total`: each
    member of a batched Heartbeats request counts)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("rollcall_heartbeats_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def hold_python(addr: str, group: str, members: int, session: float) -> None:
    """The Python holder: joins, prints `joined`, and takes events until killed."""
    import rollcall

    async def run() -> None:
        client = await rollcall.connect_async(addr)
        joined = []
        for _ in range(members):
            joined.append(
                await client.join_async(group, {"t": members}, session_timeout=session)
            )

        async def take(member: rollcall.Member) -> None:
            async for event in member.events():
                if isinstance(event, rollcall.RevokeRequested):
                    member.ack_revocation(event.partitions)

        tasks = [asyncio.create_task(take(m)) for m in joined]
        print("joined", flush=True)
        await asyncio.gather(*tasks)

    asyncio.run(run())


def phase(kind: str, args: argparse.Namespace) -> Dict[str, float]:
    port, metrics_port = free_port(), free_port()
    addr = f"127.0.0.1:{port}"
    serve = subprocess.Popen(
        [args.rollcall, "serve", "--listen", addr, "--metrics-addr",
         f"127.0.0.1:{metrics_port}", "--in-memory"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    holder: Optional[subprocess.Popen[str]] = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape(metrics_port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the coordinator did not start")
                time.sleep(0.05)
        session_ms = str(int(args.session_timeout * 1000))
        if kind == "rust":
            command = [args.holder, addr, "bench", str(args.members), session_ms]
        else:
            command = [sys.executable, __file__, "hold", addr, "bench", str(args.members),
                       session_ms]
        holder = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  text=True)
        assert holder.stdout is not None
        line = holder.stdout.readline()
        if line.strip() != "joined":
            raise RuntimeError(f"{kind} holder failed: {line!r}")
        time.sleep(args.settle)
        c0, h0, r0, t0 = (cpu_seconds(serve.pid), cpu_seconds(holder.pid),
                          renewals(scrape(metrics_port)), time.monotonic())
        time.sleep(args.window)
        c1, h1, r1, t1 = (cpu_seconds(serve.pid), cpu_seconds(holder.pid),
                          renewals(scrape(metrics_port)), time.monotonic())
        if holder.poll() is not None:
            raise RuntimeError(f"{kind} holder exited")
        elapsed, count = t1 - t0, r1 - r0
        return {
            "renewals_per_s": count / elapsed,
            "coordinator_us_per_renewal": (c1 - c0) / count * 1e6 if count else float("nan"),
            "coordinator_core_pct": (c1 - c0) / elapsed * 100,
            "holder_core_pct": (h1 - h0) / elapsed * 100,
        }
    finally:
        for p in (holder, serve):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "hold":
        addr, group, members, session_ms = sys.argv[2:6]
        hold_python(addr, group, int(members), int(session_ms) / 1000)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--rollcall", default=str(REPO / "target/release/rollcall"))
    parser.add_argument("--holder", default=str(REPO / "target/release/examples/hold-members"))
    args = parser.parse_args()
    results: Dict[str, List[Dict[str, float]]] = {"rust": [], "python": []}
    for run in range(args.runs):
        for kind in ("rust", "python"):
            r = phase(kind, args)
            results[kind].append(r)
            print(f"run {run + 1} {kind:6} " + " ".join(f"{k}={v:.3f}" for k, v in r.items()),
                  flush=True)
    print("medians:")
    for kind, runs in results.items():
        keys = runs[0].keys()
        print(f"  {kind:6} " + " ".join(
            f"{k}={statistics.median(r[k] for r in runs):.3f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
