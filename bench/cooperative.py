"""Benchmark 5: cooperative vs eager: how long partitions stop while a member joins a busy group.

Eight consumer processes share 48 partitions that a producer keeps busy; a ninth joins.
For every partition, the gap is the longest time between two consumptions of it from the
last one before the join to the first one after the last assignment of the rebalance.
Partitions are split into those that kept their owner and those that moved. With range
(eager) every member revokes everything, so every partition pauses; with
cooperative-sticky only the moving ones should. "Normal spacing" is the longest such gap
in the seconds before the join, when nothing happened: the goal is that partitions that
stay put see no gap beyond it under cooperative-sticky.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.common import BenchError, BrokerProc, Figure, bench_main, with_goal
from bench.consumer_proc import Group
from bench.failover import producing

STRATEGIES = ("range", "cooperative-sticky")
PRODUCE_EVERY_S = 0.02
STEADY_WINDOW_S = 3.0
SETTLE_TIMEOUT_S = 90.0
GOAL_EXCESS_MS = "<= 0"


@dataclass
class Rebalance:
    """Gaps (ms) of one join, by whether the partition moved, and the steady spacing."""

    stayed: list[float]
    moved: list[float]
    steady: float
    took: float   # ms from the join to the last assignment it caused


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=8, help="members before the join")
    p.add_argument("--partitions", type=int, default=48)


def longest_gap(times: list[float], lo: float, hi: float) -> float:
    """Longest interval between consecutive times covering [lo, hi]: from the last time
    at or before ``lo`` to the first at or after ``hi``."""
    start = max((i for i, t in enumerate(times) if t <= lo), default=0)
    end = next((i for i, t in enumerate(times) if t >= hi), len(times) - 1)
    span = times[start:end + 1]
    return max((b - a for a, b in itertools.pairwise(span)), default=0.0)


async def one_join(group: Group, joiner: Any, steady_s: float) -> Rebalance:
    """Let ``joiner`` join the settled group, wait until settled again, measure, leave."""
    before = {p: proc for p, proc in group.owners().items()}
    mark = {id(proc): len(proc.events) for proc in group.procs}
    t_go = time.monotonic()
    joiner.send("go")
    await group.until(lambda: bool(joiner.owned()) and group.settled(), SETTLE_TIMEOUT_S,
                      "the group to settle after the join")
    after = group.owners()
    t_assigned = max(float(e["t"]) for proc in group.procs
                     for e in proc.events[mark.get(id(proc), 0):] if e["e"] == "assigned")
    consumed = group.consumed_at()
    stayed: list[float] = []
    moved: list[float] = []
    for p in range(group.partitions):
        gap = longest_gap(consumed.get(p, []), t_go, t_assigned) * 1000
        (stayed if before.get(p) is after.get(p) else moved).append(gap)
    steady = max(longest_gap([t for t in consumed.get(p, []) if t <= t_go],
                             t_go - steady_s, t_go) * 1000
                 for p in range(group.partitions))
    joiner.send("leave")
    await group.until(lambda: not joiner.owned() and group.settled(), SETTLE_TIMEOUT_S,
                      "the group to settle after the leave")
    return Rebalance(stayed, moved, steady, (t_assigned - t_go) * 1000)


async def measure(address: str, strategy: str, members: int, partitions: int,
                  joins: int, warmup: int, steady_s: float) -> list[Rebalance]:
    from groupwire.client import Admin

    tag = f"{strategy}-{time.time_ns()}"
    topic = f"coop-{tag}"
    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=partitions)
    stop = asyncio.Event()
    producer = asyncio.ensure_future(
        producing(address, topic, partitions, PRODUCE_EVERY_S, stop))
    group = Group(address, topic, f"coop-{tag}", partitions, "--strategy", strategy)
    out: list[Rebalance] = []
    try:
        for _ in range(members):
            await group.add()
        joiner = await group.add(go=False)
        await group.until(group.settled, SETTLE_TIMEOUT_S, "the group to form")
        for i in range(warmup + joins):
            # a steady stretch before each join, so "normal spacing" has data
            await asyncio.sleep(steady_s)
            result = await one_join(group, joiner, steady_s)
            if i >= warmup:
                out.append(result)
    except TimeoutError as exc:
        raise BenchError(str(exc)) from exc
    finally:
        stop.set()
        await group.stop()
        await producer
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    members, partitions = args.members, args.partitions
    joins, warmup, steady_s = args.rounds, args.warmup, STEADY_WINDOW_S
    if args.smoke:
        members, partitions, joins, warmup, steady_s = 2, 6, 1, 0, 1.0

    async def main() -> dict[str, list[Rebalance]]:
        with BrokerProc(extra=("--group-initial-rebalance-delay-ms", "0")) as broker:
            return {s: await measure(broker.address, s, members, partitions, joins, warmup,
                                     steady_s) for s in STRATEGIES}

    try:
        import uvloop

        results = uvloop.run(main())
    except ImportError:
        results = asyncio.run(main())
    figs: list[Figure] = []
    for strategy, joined in results.items():
        label = "eager (range)" if strategy == "range" else "cooperative-sticky"
        settings = {"strategy": strategy, "members": members, "joiner": 1,
                    "partitions": partitions, "produce_every_ms": PRODUCE_EVERY_S * 1000,
                    "steady_window_s": steady_s, "joins": joins}
        stayed = [max(r.stayed, default=0.0) for r in joined]
        moved = [max(r.moved, default=0.0) for r in joined]
        steady = [r.steady for r in joined]
        figs.append(Figure(f"{label} max gap, partitions that stayed", "ms", stayed, settings,
                           note=f"{sum(len(r.stayed) for r in joined) // len(joined)}"
                                " partitions per join"))
        figs.append(Figure(f"{label} max gap, partitions that moved", "ms", moved, settings,
                           note=f"{sum(len(r.moved) for r in joined) // len(joined)}"
                                " partitions per join"))
        figs.append(Figure(f"{label} join to last assignment", "ms",
                           [r.took for r in joined], settings))
        figs.append(Figure(f"{label} normal spacing (steady max gap)", "ms", steady, settings))
        excess = Figure(f"{label} stayed: gap beyond normal spacing", "ms",
                        [max(0.0, s - n) for s, n in zip(stayed, steady, strict=True)],
                        settings)
        figs.append(with_goal(excess, GOAL_EXCESS_MS) if strategy != "range" else excess)
    return figs


main = bench_main("cooperative", add_arguments, run, default_rounds=3, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
