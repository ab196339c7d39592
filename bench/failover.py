"""Benchmark 3: failover: how long after a consumer is SIGKILLed its partitions flow again.

Consumers run as separate processes in one group while a producer keeps every partition
busy. One is SIGKILLed; the figure is the time from the kill until a survivor has consumed
a record from each partition the victim held (the slowest partition decides). A
replacement then joins and the group settles before the next kill. Run with the client's
default session timeout and with 10 s: the broker's connection-loss grace should make
both about the same, since a killed process drops its connections at once.

Beside it, Redis Streams: a consumer reads without acking and stops; a survivor calls
XAUTOCLAIM with a min-idle time equal to our grace, and the figure is the time from the
stop until none of the victim's records is pending for it any more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import threading
import time
from typing import Any

from bench.common import BenchError, BrokerProc, Figure, bench_main, with_goal
from bench.consumer_proc import Group
from groupwire.broker.config import BrokerSettings

PARTITIONS = 8
CONSUMERS = 4
PRODUCE_EVERY_S = 0.01      # one record per partition this often
SETTLE_TIMEOUT_S = 90.0
GOAL_P99_S = "<= 1.5"
GRACE_MS = BrokerSettings().connection_loss_grace_ms
REDIS_CLAIM_EVERY_S = 0.01  # the survivor's XAUTOCLAIM loop: as tight as is reasonable
REDIS_VICTIM_READ_S = 0.3   # the victim reads (never acks) this long before it stops


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--session-timeouts", default="default,10000",
                   help="comma-separated consumer session timeouts in ms ('default': the"
                        " client's own)")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                   help="Redis server for the comparison (skipped when unreachable)")


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


# --- groupwire ------------------------------------------------------------------------------


async def producing(address: str, topic: str, partitions: int, every_s: float,
                    stop: asyncio.Event) -> None:
    """One record to every partition each ``every_s``: always something to consume."""
    from groupwire.client import Producer

    async with Producer(address, linger_ms=0) as producer:
        n = 0
        while not stop.is_set():
            for p in range(partitions):
                await producer.send(topic, b"%d" % n, partition=p)
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)


async def kill_one(group: Group, turn: int) -> float:
    """SIGKILL a member holding partitions; seconds until each of them is consumed again."""
    holders = [p for p in group.procs if p.owned()]
    victim = holders[turn % len(holders)]
    lost = victim.owned()
    survivors = [p for p in group.procs if p is not victim]
    marks = [len(p.events) for p in survivors]
    t_kill = time.monotonic()
    victim.kill()
    group.procs.remove(victim)
    first: dict[int, float] = {}

    def resumed() -> bool:
        for proc, mark in zip(survivors, marks, strict=True):
            for e in proc.events[mark:]:
                if e["e"] == "batch" and e["t"] > t_kill:
                    for p in e["p"]:
                        if int(p) in lost and int(p) not in first:
                            first[int(p)] = float(e["t"])
        return set(first) == lost

    await group.until(resumed, SETTLE_TIMEOUT_S, f"partitions {sorted(lost)} after a kill")
    await victim.stop()
    return max(first.values()) - t_kill


async def gw_failover(address: str, session_ms: int | None, kills: int, warmup: int,
                      tag: str) -> list[float]:
    from groupwire.client import Admin

    topic = f"failover-{tag}"
    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=PARTITIONS)
    stop = asyncio.Event()
    producer = asyncio.ensure_future(
        producing(address, topic, PARTITIONS, PRODUCE_EVERY_S, stop))
    extra = ("--session-timeout-ms", str(session_ms)) if session_ms else ()
    group = Group(address, topic, f"failover-{tag}", PARTITIONS, *extra)
    times: list[float] = []
    try:
        for _ in range(CONSUMERS):
            await group.add()
        for turn in range(warmup + kills):
            await group.until(group.settled, SETTLE_TIMEOUT_S, "the group to settle")
            times.append(await kill_one(group, turn))
            await group.add()
    except TimeoutError as exc:
        raise BenchError(str(exc)) from exc
    finally:
        stop.set()
        await group.stop()
        with contextlib.suppress(Exception):
            await producer
    return times[warmup:]


# --- Redis Streams --------------------------------------------------------------------------


def redis_reason(url: str) -> str | None:
    try:
        import redis

        redis.Redis.from_url(url).ping()
    except ImportError:
        return "redis-py is not installed (pip install 'redis[hiredis]')"
    except Exception as exc:  # any connection failure means: skip, with the reason
        return f"no Redis server at {url} ({type(exc).__name__}: {exc})"
    return None


def redis_failover(url: str, tag: str) -> float:
    """One victim/survivor round; seconds from the victim's last read to all claimed."""
    import redis

    r = redis.Redis.from_url(url)
    stream, group = f"gwbench:failover:{tag}", "g"
    r.xgroup_create(stream, group, id="$", mkstream=True)
    stop = threading.Event()

    def produce() -> None:
        writer = redis.Redis.from_url(url)
        n = 0
        while not stop.is_set():
            writer.xadd(stream, {"v": b"%d" % n})
            n += 1
            stop.wait(PRODUCE_EVERY_S / PARTITIONS)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        until = time.monotonic() + REDIS_VICTIM_READ_S
        while time.monotonic() < until:
            r.xreadgroup(group, "victim", {stream: ">"}, count=100, block=20)
        t_stop = time.monotonic()   # the victim dies here, with its reads unacknowledged
        while True:
            r.xautoclaim(stream, group, "survivor", min_idle_time=GRACE_MS, count=1000)
            pending = {c["name"]: c["pending"] for c in
                       r.xpending(stream, group)["consumers"]}
            if not pending.get(b"victim") and not pending.get("victim"):
                return time.monotonic() - t_stop
            if time.monotonic() - t_stop > SETTLE_TIMEOUT_S:
                raise BenchError("redis: the victim's records were never claimed")
            time.sleep(REDIS_CLAIM_EVERY_S)
    finally:
        stop.set()
        producer.join()
        r.delete(stream)


# --- the run --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> list[Figure]:
    kills, warmup = (2, 0) if args.smoke else (args.rounds, args.warmup)
    sessions: list[int | None] = [None if s.strip() == "default" else int(s)
                                  for s in args.session_timeouts.split(",")]
    if args.smoke:
        sessions = sessions[:1]
    skipped = redis_reason(args.redis)
    if skipped:
        print(f"bench failover: Redis Streams side skipped: {skipped}", file=sys.stderr)
    base = {"partitions": PARTITIONS, "consumers": CONSUMERS, "kills": kills,
            "produce_every_ms": PRODUCE_EVERY_S * 1000,
            "broker": "defaults, --group-initial-rebalance-delay-ms 0",
            "connection_loss_grace_ms": GRACE_MS}

    async def measure() -> dict[int | None, list[float]]:
        out: dict[int | None, list[float]] = {}
        with BrokerProc(extra=("--group-initial-rebalance-delay-ms", "0")) as broker:
            for i, session_ms in enumerate(sessions):
                out[session_ms] = await gw_failover(broker.address, session_ms, kills,
                                                    warmup, f"{time.time_ns()}-{i}")
        return out

    results = _run_loop(measure)
    figs: list[Figure] = []
    note = f"Redis Streams skipped: {skipped}" if skipped else None
    for session_ms, times in results.items():
        label = "defaults" if session_ms is None else f"session {session_ms / 1000:g} s"
        settings = {**base, "session_timeout_ms": session_ms or "client default (45000)"}
        figs.append(Figure(f"failover {label}", "s", times, settings, note=note))
        p99_fig = Figure(f"failover {label} p99", "s", [p99(times)], settings, note=note)
        figs.append(with_goal(p99_fig, GOAL_P99_S) if session_ms is None else p99_fig)
    if not skipped:
        tag = str(time.time_ns())
        for i in range(warmup):
            redis_failover(args.redis, f"{tag}-w{i}")
        claims = [redis_failover(args.redis, f"{tag}-{i}") for i in range(kills)]
        settings = {"min_idle_ms": GRACE_MS, "claim_every_ms": REDIS_CLAIM_EVERY_S * 1000,
                    "rounds": kills}
        figs.append(Figure("redis streams xautoclaim", "s", claims, settings))
        figs.append(Figure("redis streams xautoclaim p99", "s", [p99(claims)], settings))
    return figs


def _run_loop(main: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


main = bench_main("failover", add_arguments, run, default_rounds=20, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
