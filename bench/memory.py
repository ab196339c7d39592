"""Benchmark 7: broker memory per idle group member.

A fresh broker per round: its RSS once it is up with no groups, then with 10,000 idle
members in 1,000 groups (all Stable, none heartbeating during the sample). KiB per member
is the difference over the member count; it includes what the joins left behind in the
allocator, which is what an operator sees.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import linecache
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.common import REPO_ROOT, BrokerProc, Figure, bench_main, rss_kib, with_goal
from bench.members import close_connections, populate

GOAL_KIB = "<= 2"
SESSION_TIMEOUT_MS = 600_000
SETTLE_S = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=1_000)
    p.add_argument("--tracemalloc", type=Path, default=None, metavar="OUT",
                   help="also run a broker in this process under tracemalloc, populate it "
                        "the same way, and write the allocation sites still holding memory "
                        "(bytes per member, by line) to OUT; not counted in the figures")


async def settled_rss(pid: int, seconds: float) -> float:
    """Median RSS over ``seconds`` after things went quiet (KiB)."""
    samples = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        samples.append(rss_kib(pid))
        await asyncio.sleep(0.05)
    return statistics.median(samples)


async def one_round(members: int, groups: int, settle_s: float) -> tuple[float, float]:
    with BrokerProc(extra=("--group-initial-rebalance-delay-ms", "0")) as broker:
        empty = await settled_rss(broker.pid, settle_s)
        conns, _ = await populate(broker.port, members, members // groups,
                                  session_timeout_ms=SESSION_TIMEOUT_MS, prefix="mem")
        try:
            full = await settled_rss(broker.pid, settle_s)
        finally:
            with contextlib.suppress(Exception):
                await close_connections(conns)
    return empty, full


async def measure(args: argparse.Namespace) -> list[Figure]:
    members, groups, settle_s = args.members, args.groups, SETTLE_S
    if args.smoke:
        members, groups, settle_s = 200, 20, 0.2
    empty: list[float] = []
    full: list[float] = []
    for r in range(args.warmup + args.rounds):
        e, f = await one_round(members, groups, settle_s)
        if r >= args.warmup:
            empty.append(e)
            full.append(f)
    st = {"members": members, "groups": groups, "group_size": members // groups,
          "idle": True}
    return [
        Figure("broker RSS, no groups", "MiB", [e / 1024 for e in empty], st),
        Figure(f"broker RSS, {members} members", "MiB", [f / 1024 for f in full], st),
        with_goal(Figure("memory per member", "KiB",
                         [(f - e) / members for e, f in zip(empty, full, strict=True)], st),
                  GOAL_KIB),
    ]


async def allocation_sites(members: int, groups: int, top: int = 30) -> str:
    """Which lines of broker/ and protocol/ allocated what 10,000 idle members still hold.

    The broker runs in this process (the members' client side too, filtered out by
    file), so this is a diagnosis beside the RSS figures, not one of them.
    """
    from groupwire.broker.config import BrokerSettings
    from groupwire.broker.logs import configure_logging
    from groupwire.broker.server import Broker

    configure_logging("json", "error")
    with tempfile.TemporaryDirectory(prefix="gw-bench-mem-") as tmp:
        broker = Broker(BrokerSettings(data_dir=Path(tmp), port=0, metrics_port=-1,
                                       group_initial_rebalance_delay_ms=0))
        await broker.start()
        try:
            gc.collect()
            tracemalloc.start(1)
            before = tracemalloc.take_snapshot()
            conns, _ = await populate(broker.port, members, members // groups,
                                      session_timeout_ms=SESSION_TIMEOUT_MS, prefix="mem")
            await asyncio.sleep(SETTLE_S)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            await close_connections(conns)
        finally:
            await broker.close()
    mine = [tracemalloc.Filter(True, f"*{os.sep}{pkg}{os.sep}*")
            for pkg in ("broker", "protocol")] + [tracemalloc.Filter(True, "<string>")]
    stats = after.filter_traces(mine).compare_to(before.filter_traces(mine), "lineno")
    total = sum(st.size_diff for st in stats)
    lines = [f"{members} idle members in {groups} groups: broker/ and protocol/ allocations "
             f"still held: {total / 1024:.0f} KiB = {total / members:.0f} bytes per member",
             "", "bytes/member    blocks  where"]
    root = str(REPO_ROOT) + os.sep
    for st in stats[:top]:
        frame = st.traceback[0]
        where = f"{frame.filename.removeprefix(root)}:{frame.lineno}"
        code = linecache.getline(frame.filename, frame.lineno).strip()
        lines.append(f"{st.size_diff / members:12.0f} {st.count_diff:+9d}  {where}  {code}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> list[Figure]:
    figures = asyncio.run(measure(args))
    if args.tracemalloc is not None:
        members, groups = (200, 20) if args.smoke else (args.members, args.groups)
        args.tracemalloc.write_text(asyncio.run(allocation_sites(members, groups)))
    return figures


main = bench_main("memory", add_arguments, run, default_rounds=3, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
