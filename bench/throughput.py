"""Benchmark 4: throughput against Redis Streams, both measured in the same run on the same machine.

100-byte records: produced in batches (groupwire's Producer, ``create_batch()`` filled to
its ``max_batch_bytes`` and ``send_batch()``, partitions in turn, as bulk producing is
written; XADD pipelined through redis-py with hiredis), and once more with one
``Producer.send()`` a record (figure "groupwire produce send()"), and once more in
batches with ``enable_idempotence=False`` (the producer's default is on: the ratio is
what numbering batches for the broker's deduplication costs), then consumed and
committed by one consumer in this process and by
four consumers in separate processes (groupwire's Consumer with a commit after every poll;
XREADGROUP COUNT 500 + XACK). Each phase runs to ``--records`` or ``--seconds``, whichever
comes first. The ratios (groupwire ÷ Redis) are taken per round, so a noisy machine moves
both sides of each ratio together.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.common import BenchError, BrokerProc, Figure, bench_main, with_goal
from bench.consumer_proc import ConsumerProc, stop_all

RECORD_BYTES = 100
PARTITIONS = 4
MULTI = 4
REDIS_BATCH = 1000
POLL_RECORDS = 500
# The 4-consumer group forms in one rebalance when its members join within this.
INITIAL_DELAY_MS = 1000

VALUE = bytes(range(RECORD_BYTES))


@dataclass
class Phase:
    """What one phase moved and how long it took."""

    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1_000_000, help="records per phase")
    p.add_argument("--seconds", type=float, default=30.0, help="time limit per phase")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                   help="Redis server for the comparison (skipped when unreachable)")


# --- groupwire ------------------------------------------------------------------------------


async def gw_produce(address: str, topic: str, records: int, limit_s: float, *,
                     batches: bool = False, idempotence: bool = True) -> Phase:
    """``records`` records on PARTITIONS partitions, timed until ``flush()`` returned:
    with ``batches``, ``create_batch()`` filled until ``append`` says it is full, then
    ``send_batch()``, a partition after the other; else one ``send()`` a record,
    partitions in turn. ``idempotence``: the producer's ``enable_idempotence`` (on by
    default)."""
    from groupwire.client import Admin, Producer

    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=PARTITIONS)
    async with Producer(address, enable_idempotence=idempotence) as producer:
        await producer.partitions_for(topic)
        t0 = time.monotonic()
        sent = 0
        if batches:
            partition = 0
            batch = producer.create_batch()
            while sent < records:
                if batch.append(value=VALUE) is not None:
                    sent += 1
                    continue
                await producer.send_batch(batch, topic, partition=partition)
                partition = (partition + 1) % PARTITIONS
                batch = producer.create_batch()
                if time.monotonic() - t0 > limit_s:
                    break
            if batch.record_count():
                await producer.send_batch(batch, topic, partition=partition)
        else:
            while sent < records:
                await producer.send(topic, VALUE, partition=sent % PARTITIONS)
                sent += 1
                if not sent % 1000 and time.monotonic() - t0 > limit_s:
                    break
        await producer.flush()
        return Phase(sent, time.monotonic() - t0)


async def gw_consume_here(address: str, topic: str, group: str, records: int,
                          limit_s: float) -> Phase:
    """One consumer on this process's loop: poll, then commit what the poll returned.

    Timed from its assignment, so the first fetch counts.
    """
    from groupwire.client import Consumer, RebalanceListener, TopicPartition

    assigned_at: list[float] = []

    class Started(RebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            if assigned and not assigned_at:
                assigned_at.append(time.monotonic())

    consumer = Consumer(address, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", max_poll_records=POLL_RECORDS)
    async with consumer:
        consumer.subscribe([topic], listener=Started())
        got, last = 0, 0.0
        give_up = time.monotonic() + limit_s + 30
        while got < records:
            batches = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            n = sum(len(rs) for rs in batches.values())
            if n:
                got, last = got + n, now
                await consumer.commit()
            if now > give_up or (assigned_at and now - assigned_at[0] > limit_s):
                break
        return Phase(got, last - assigned_at[0] if assigned_at else 0.0)


async def consume_in_processes(args_for: Callable[[int], list[str]], records: int,
                               limit_s: float) -> Phase:
    """MULTI consumer processes told to start together; first record to last record."""
    notify = asyncio.Event()
    procs = [await ConsumerProc.start(f"c{i}", *args_for(i), notify=notify)
             for i in range(MULTI)]
    try:
        for p in procs:
            await p.wait_for(lambda ev: any(e["e"] == "ready" for e in ev))
        for p in procs:
            p.send("go")
        give_up = time.monotonic() + limit_s + 60
        while True:
            notify.clear()
            progress = [p.progress() for p in procs]
            got = sum(int(x["n"]) for x in progress)
            starts = [t for t in (p.started() for p in procs) if t is not None]
            newest = max((float(x["last"]) for x in progress), default=0.0)
            if got >= records or (starts and newest - min(starts) > limit_s):
                break
            if time.monotonic() > give_up:
                raise BenchError(f"{MULTI} consumers got {got} of {records} records")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(notify.wait(), 1.0)
        return Phase(got, newest - min(starts))
    finally:
        await stop_all(procs)


# --- Redis Streams --------------------------------------------------------------------------


def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def redis_produce(url: str, stream: str, records: int, limit_s: float) -> Phase:
    r = redis_client(url)
    pipe = r.pipeline(transaction=False)
    t0 = time.monotonic()
    sent = 0
    while sent < records:
        for _ in range(min(REDIS_BATCH, records - sent)):
            pipe.xadd(stream, {"v": VALUE})
        sent += len(pipe)
        pipe.execute()
        if time.monotonic() - t0 > limit_s:
            break
    return Phase(sent, time.monotonic() - t0)


def redis_consume_here(url: str, stream: str, group: str, records: int,
                       limit_s: float) -> Phase:
    r = redis_client(url)
    r.xgroup_create(stream, group, id="0")
    got, last = 0, 0.0
    first = time.monotonic()
    while got < records:
        resp = r.xreadgroup(group, "c0", {stream: ">"}, count=POLL_RECORDS, block=100)
        ids = [entry_id for _, entries in resp or [] for entry_id, _ in entries]
        if ids:
            r.xack(stream, group, *ids)
            got, last = got + len(ids), time.monotonic()
        if time.monotonic() - first > limit_s:
            break
    return Phase(got, last - first)


def redis_reason(url: str) -> str | None:
    """Why the Redis side cannot run here, or None when it can."""
    try:
        redis_client(url).ping()
    except ImportError:
        return "redis-py is not installed (pip install 'redis[hiredis]')"
    except Exception as exc:  # any connection failure means: skip, with the reason
        return f"no Redis server at {url} ({type(exc).__name__}: {exc})"
    return None


# --- one round ------------------------------------------------------------------------------


async def one_round(broker: BrokerProc, redis_url: str | None, tag: str, records: int,
                    limit_s: float) -> dict[str, Phase]:
    out: dict[str, Phase] = {}
    topic = f"tput-{tag}"

    async def timed(key: str, job: Callable[[], Awaitable[Phase]]) -> None:
        out[key] = await job()

    await timed("gw produce", lambda: gw_produce(broker.address, topic, records, limit_s,
                                                 batches=True))
    produced = out["gw produce"].records
    await timed("gw produce no idempotence", lambda: gw_produce(
        broker.address, f"{topic}-plain", records, limit_s, batches=True, idempotence=False))
    await timed("gw produce send()", lambda: gw_produce(
        broker.address, f"{topic}-send", records, limit_s))
    stream = f"gwbench:{tag}"
    if redis_url:
        with contextlib.suppress(Exception):
            redis_client(redis_url).delete(stream)
        out["redis produce"] = await asyncio.to_thread(
            redis_produce, redis_url, stream, records, limit_s)
    try:
        await timed("gw consume x1", lambda: gw_consume_here(
            broker.address, topic, f"g1-{tag}", produced, limit_s))
        if redis_url:
            out["redis consume x1"] = await asyncio.to_thread(
                redis_consume_here, redis_url, stream, f"g1-{tag}",
                out["redis produce"].records, limit_s)
        await timed("gw consume x4", lambda: consume_in_processes(
            lambda i: ["--bootstrap", broker.address, "--group", f"g4-{tag}",
                       "--topic", topic, "--report", "count", "--commit",
                       "--max-poll-records", str(POLL_RECORDS)],
            produced, limit_s))
        if redis_url:
            redis_client(redis_url).xgroup_create(stream, f"g4-{tag}", id="0")
            out["redis consume x4"] = await consume_in_processes(
                lambda i: ["--redis", redis_url, "--group", f"g4-{tag}", "--topic", stream,
                           "--report", "count", "--commit",
                           "--max-poll-records", str(POLL_RECORDS)],
                out["redis produce"].records, limit_s)
    finally:
        if redis_url:
            with contextlib.suppress(Exception):
                redis_client(redis_url).delete(stream)
    return out


PHASES = ("produce", "produce send()", "consume x1", "consume x4")
GOAL_RATIO = ">= 1"
GOAL_IDEMPOTENCE = ">= 0.9"
"""The idempotent producer (the default) against the same batches without producer ids,
in the same round."""
PATHS = {"gw produce": "Producer.create_batch() + send_batch(), full 1 MiB batches",
         "gw produce send()": "one Producer.send() a record"}
"""Which SDK path each groupwire produce figure measures (said in its note)."""
GOALS = {"produce send()": None}
"""Phases whose ratio has no goal (or another one than GOAL_RATIO): the per-record send
is shown beside the batch API, which is how bulk producing is written."""


def figures(results: list[dict[str, Phase]], settings: dict[str, Any],
            skipped: str | None) -> list[Figure]:
    figs: list[Figure] = []
    for phase in PHASES:
        redis_phase = "produce" if phase == "produce send()" else phase
        for system in ("gw", "redis"):
            if system == "redis" and (skipped or redis_phase != phase):
                continue
            key = f"{system} {phase}"
            label = "groupwire" if system == "gw" else "redis streams"
            rates = [r[key].rate for r in results]
            notes = [PATHS[key]] if key in PATHS else []
            if skipped:
                notes.append(f"Redis Streams skipped: {skipped}")
            figs.append(Figure(f"{label} {phase}", "records/s", rates, settings,
                               note="; ".join(notes) or None))
            figs.append(Figure(f"{label} {phase} MB/s", "MB/s",
                               [x * RECORD_BYTES / 1e6 for x in rates], settings))
        if not skipped:
            ratios = [r[f"gw {phase}"].rate / r[f"redis {redis_phase}"].rate
                      for r in results if r[f"redis {redis_phase}"].rate > 0]
            fig = Figure(f"{phase} groupwire / redis", "ratio", ratios, settings)
            goal = GOALS.get(phase, GOAL_RATIO)
            figs.append(with_goal(fig, goal) if goal else fig)
    plain = [r["gw produce no idempotence"].rate for r in results]
    figs.append(Figure("groupwire produce, idempotence off", "records/s", plain, settings,
                       note=PATHS["gw produce"] + "; enable_idempotence=False"))
    ratios = [r["gw produce"].rate / r["gw produce no idempotence"].rate
              for r in results if r["gw produce no idempotence"].rate > 0]
    figs.append(with_goal(Figure("produce idempotence on / off", "ratio", ratios, settings),
                          GOAL_IDEMPOTENCE))
    return figs


def run(args: argparse.Namespace) -> list[Figure]:
    records, limit_s = args.records, args.seconds
    rounds, warmup = args.rounds, args.warmup
    if args.smoke:
        records, limit_s, rounds, warmup = min(records, 20_000), min(limit_s, 10.0), 1, 0
    skipped = redis_reason(args.redis)
    if skipped:
        print(f"bench throughput: Redis Streams side skipped: {skipped}", file=sys.stderr)
    settings = {"records": records, "seconds_limit": limit_s, "record_bytes": RECORD_BYTES,
                "partitions": PARTITIONS, "consumers": [1, MULTI], "poll_records": POLL_RECORDS,
                "groupwire_produce": "create_batch() filled to max_batch_bytes (1 MiB) and "
                                     "send_batch(), partitions in turn; 'produce send()': "
                                     "one send() a record, partitions in turn",
                "redis_pipeline": REDIS_BATCH, "commit": "after every poll"}

    async def main() -> list[dict[str, Phase]]:
        results: list[dict[str, Phase]] = []
        with BrokerProc(extra=("--group-initial-rebalance-delay-ms",
                               str(INITIAL_DELAY_MS))) as broker:
            for i in range(warmup + rounds):
                res = await one_round(broker, None if skipped else args.redis,
                                      f"{time.time_ns()}-{i}", records, limit_s)
                if i >= warmup:
                    results.append(res)
        return results

    return figures(_run_loop(main), settings, skipped)


def _run_loop(main: Callable[[], Awaitable[Any]]) -> Any:
    """uvloop when installed, as the broker and CLI run; asyncio's loop otherwise."""
    async def wrapped() -> Any:
        return await main()

    try:
        import uvloop

        return uvloop.run(wrapped())
    except ImportError:
        return asyncio.run(wrapped())


main = bench_main("throughput", add_arguments, run, default_rounds=3, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
