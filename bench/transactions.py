"""Transactions: what committing every 100 or 1,000 records costs a producer, both doors.

One broker with its defaults (``python -m groupwire broker``: fsync interval), and in
every round, one after the other, so that ratios are taken within a round:

- librdkafka (confluent-kafka) through the Kafka door: N records of 100 bytes, record
  ``i`` on partition ``i % 4`` of a fresh 4-partition topic, lz4 (as the kafka_clients
  benchmark produces), the client's defaults otherwise. First with acks=all and
  ``enable.idempotence=true`` (librdkafka's default is false; set here so the baseline
  numbers its batches as a transactional producer must), timed from the first
  ``produce()`` until ``flush()`` returned; then with a ``transactional.id``, one
  ``begin_transaction()``, 100 (then 1,000) ``produce()`` calls and one
  ``commit_transaction()`` after the other, timed from the first ``produce()`` until
  the last commit returned (``init_transactions()`` before the clock starts).
- groupwire's SDK over msgpack, the same three phases: ``Producer(acks="all")``
  (idempotent by default), one ``send()`` a record and ``flush()``; then
  ``Producer(transactional_id=...)``, ``begin_transaction()``, 100 (1,000) ``send()``
  calls, ``commit_transaction()`` (which sends what is queued and waits for it), then
  each record's future awaited (all are done by then: it raises a record's error). The
  same ``send()`` path in all three, so the ratios compare committing and nothing else.
  Skipped, with the reason, when the SDK's Producer has no transactions.

Figures: records/s of each phase; txn/acks=all ratios per round (the issue asks that
they be recorded: no goal); commits/s of each transactional phase; CPU time per record
of the broker process (:class:`~bench.common.ProcSampler`) and of this process (the
client: Python, and librdkafka's threads) over the timed span. After each phase the
topic's end offsets are read (ListOffsets): their sum must be the records sent plus one
commit marker per partition a transaction wrote to, or the phase fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    BenchError,
    BrokerProc,
    Figure,
    ProcSampler,
    bench_main,
    cpu_seconds,
    print_table,
)

RECORD_BYTES = 100
VALUE = bytes(range(RECORD_BYTES))
PARTITIONS = 4
TXN_SIZES = (100, 1000)
"""Records per transaction, the transactional phases."""
SMOKE_RECORDS = 5_000
ADMIN_TIMEOUT_S = 20.0
CHECK_EVERY = 1000
"""Records between two looks at the clock in a phase without transactions."""
PRIMER = 1
"""Records a phase without transactions sends and waits for before its clock starts, as
a transactional producer's ``init_transactions()`` / ``start()`` happens before it: so
no phase's time includes connecting and getting a producer id."""

RDK, SDK = "librdkafka", "groupwire sdk"
SYSTEMS = {"rdkafka": RDK, "sdk": SDK}
PLAIN = "acks=all"


def txn_phase(size: int) -> str:
    return f"txn {size}/commit"


PHASES = (PLAIN, *(txn_phase(n) for n in TXN_SIZES))


class PhaseFailed(Exception):
    """One phase did not finish; the others still run."""


@dataclass
class Phase:
    """What one timed phase sent, in how long, at what CPU cost."""

    records: int
    seconds: float
    commits: int
    broker_cpu_s: float
    client_cpu_s: float
    capped: bool = False
    """Stopped at the time limit before all records were sent."""
    primed: int = 0
    """Records sent before the clock started (see :data:`PRIMER`)."""

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def commit_rate(self) -> float:
        return self.commits / self.seconds if self.seconds > 0 else 0.0


class Meter:
    """Wall time and CPU time (the broker's and this process's) over a timed span."""

    def __init__(self, broker_pid: int) -> None:
        self._sampler = ProcSampler(broker_pid)
        self._t0 = 0.0
        self._own0 = 0.0
        self._running = False

    def start(self) -> None:
        self._sampler.start()
        self._running = True
        self._own0 = cpu_seconds(os.getpid())
        self._t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def stop(self, records: int, commits: int, capped: bool, primed: int = 0) -> Phase:
        seconds = time.monotonic() - self._t0
        own = cpu_seconds(os.getpid()) - self._own0
        usage = self._sampler.stop()
        self._running = False
        broker = usage.cpu_percent * usage.seconds / 100.0
        return Phase(records, seconds, commits, broker, own, capped, primed)

    def close(self) -> None:
        """Stop sampling if a phase failed while timed."""
        if self._running:
            self._sampler.stop()
            self._running = False


def transactions(records: int, size: int) -> list[int]:
    """The sizes of the transactions that send ``records`` ``size`` at a time."""
    full, rest = divmod(records, size)
    return [size] * full + ([rest] if rest else [])


def expected_end(phase: Phase, size: int | None) -> int:
    """The sum of a fresh topic's end offsets once ``phase`` sent its records to the
    partitions in turn, ``size`` a transaction: the records (the primer's too), plus one
    commit marker for each partition each transaction wrote to."""
    sizes = transactions(phase.records, size) if size is not None else []
    return phase.primed + phase.records + sum(min(n, PARTITIONS) for n in sizes)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=200_000,
                   help=f"records per phase ({SMOKE_RECORDS:,} with --smoke)")
    p.add_argument("--seconds", type=float, default=180.0,
                   help="a phase stops at its first commit (every 1,000 records without "
                        "transactions) past this, and counts what it sent; said in the note")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma list of rdkafka (the Kafka door), sdk (msgpack)")
    p.add_argument("--compression", default="lz4",
                   help="librdkafka's compression.type (the SDK has none)")


# --- librdkafka -----------------------------------------------------------------------------


def rdkafka_phase(bootstrap: str, topic: str, records: int, size: int | None, limit_s: float,
                  broker_pid: int, compression: str) -> Phase:
    """``records`` through one librdkafka producer: idempotent with acks=all when ``size``
    is None, else transactions of ``size`` records."""
    from confluent_kafka import KafkaException, Producer

    from bench.kafka_clients import _ClientLog, create_topic

    failed: list[str] = []
    log = _ClientLog()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    try:
        create_topic(bootstrap, topic, PARTITIONS)
    except Exception as exc:  # kafka_clients' PhaseFailed: the same thing here
        raise PhaseFailed(str(exc)) from exc
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "compression.type": compression,
                              "acks": "all", "enable.idempotence": True,
                              "on_delivery": on_delivery, "delivery.report.only.error": True,
                              **log.config()}
    if size is not None:
        config["transactional.id"] = f"{topic}-producer"
    producer = Producer(config)
    meter = Meter(broker_pid)
    sent = commits = 0
    capped = False
    try:
        if size is not None:
            producer.init_transactions(ADMIN_TIMEOUT_S)
        else:
            for i in range(PRIMER):
                producer.produce(topic, VALUE, partition=i % PARTITIONS)
            if producer.flush(ADMIN_TIMEOUT_S) or failed:
                raise PhaseFailed(f"the primer was not acknowledged: "
                                  f"{failed[0] if failed else log.tail()}")
        produce, poll = producer.produce, producer.poll

        def send(i: int) -> None:
            while True:
                try:
                    produce(topic, VALUE, partition=i % PARTITIONS)
                    return
                except BufferError:  # the client's queue is full: it drains as we poll
                    poll(0.005)
                    if meter.elapsed() > limit_s + 60:
                        raise PhaseFailed(f"produce stuck after {i} records: "
                                          f"{log.tail()}") from None

        meter.start()
        if size is None:
            for i in range(records):
                send(i)
                sent += 1
                if not sent % CHECK_EVERY:
                    poll(0)
                    if failed:
                        break
                    if meter.elapsed() > limit_s:
                        capped = sent < records
                        break
            left = producer.flush(max(ADMIN_TIMEOUT_S, limit_s - meter.elapsed() + 60))
            if left:
                raise PhaseFailed(f"{left} records unacknowledged: {log.tail()}")
        else:
            for n in transactions(records, size):
                producer.begin_transaction()
                for i in range(sent, sent + n):
                    send(i)
                producer.commit_transaction(ADMIN_TIMEOUT_S + 60)
                sent += n
                commits += 1
                if meter.elapsed() > limit_s:
                    capped = sent < records
                    break
        phase = meter.stop(sent, commits, capped, 0 if size is not None else PRIMER)
    except KafkaException as exc:
        raise PhaseFailed(f"{exc} ({log.tail()})") from exc
    finally:
        meter.close()
        with contextlib.suppress(Exception):
            producer.close()
    if failed:
        raise PhaseFailed(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return phase


def librdkafka_reason() -> str | None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install confluent-kafka)"
    return None


def _librdkafka_version() -> str:
    with contextlib.suppress(ImportError):
        import confluent_kafka

        return f"{confluent_kafka.libversion()[0]} (confluent-kafka {confluent_kafka.version()})"
    return "absent"


# --- the SDK --------------------------------------------------------------------------------


def sdk_reason() -> str | None:
    """Why the SDK's transactional phases cannot run (None: they can)."""
    from groupwire.client import Producer

    missing = [m for m in ("begin_transaction", "commit_transaction")
               if not hasattr(Producer, m)]
    if missing:
        return f"the SDK's Producer has no {' / '.join(missing)} yet"
    return None


async def sdk_phase(address: str, topic: str, records: int, size: int | None, limit_s: float,
                    broker_pid: int) -> Phase:
    """``records`` through one SDK producer, one ``send()`` a record: ``acks="all"``
    (idempotent by default) when ``size`` is None, else transactions of ``size``."""
    from groupwire.client import Admin, Producer
    from groupwire.client.errors import GroupwireError

    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=PARTITIONS)
    producer = (Producer(address, acks="all") if size is None
                else Producer(address, transactional_id=f"{topic}-producer"))
    meter = Meter(broker_pid)
    sent = commits = 0
    capped = False
    try:
        async with producer:
            await producer.partitions_for(topic)
            send = producer.send
            if size is None:
                primer = [await send(topic, VALUE, partition=i % PARTITIONS)
                          for i in range(PRIMER)]
                await producer.flush()
                for f in primer:
                    await f
            meter.start()
            if size is None:
                futures = []
                for i in range(records):
                    futures.append(await send(topic, VALUE, partition=i % PARTITIONS))
                    sent += 1
                    if not sent % CHECK_EVERY and meter.elapsed() > limit_s:
                        capped = sent < records
                        break
                await producer.flush()
                for f in futures:  # all settled: each raises its record's error, if any
                    await f
            else:
                for n in transactions(records, size):
                    await producer.begin_transaction()
                    futures = [await send(topic, VALUE, partition=i % PARTITIONS)
                               for i in range(sent, sent + n)]
                    await producer.commit_transaction()
                    for f in futures:
                        await f
                    sent += n
                    commits += 1
                    if meter.elapsed() > limit_s:
                        capped = sent < records
                        break
            return meter.stop(sent, commits, capped, 0 if size is not None else PRIMER)
    except (GroupwireError, ConnectionError, TimeoutError) as exc:
        raise PhaseFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        meter.close()


async def end_offsets(address: str, topic: str) -> int:
    """The sum of the topic's end offsets (ListOffsets, latest)."""
    from groupwire.client import Admin, TopicPartition
    from groupwire.client.admin import LATEST

    async with Admin(address) as admin:
        ends = await admin.list_offsets({TopicPartition(topic, p): LATEST
                                         for p in range(PARTITIONS)})
    return sum(ends.values())


async def delete_topic(address: str, topic: str) -> None:
    """Best effort: keep the data directory from growing through a long run."""
    from groupwire.client import Admin

    with contextlib.suppress(Exception):
        async with Admin(address) as admin:
            await admin.delete_topics(topic)


# --- rounds ---------------------------------------------------------------------------------


@dataclass
class Results:
    """Per (system, phase): one Phase per measured round; the first failure of each."""

    phases: dict[tuple[str, str], list[Phase | None]] = field(default_factory=dict)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, system: str, phase: str, value: Phase | None) -> None:
        self.phases.setdefault((system, phase), []).append(value)


async def one_round(res: Results, systems: list[str], broker: BrokerProc, records: int,
                    limit_s: float, compression: str, tag: str) -> None:
    """Every phase of every system once; a phase that failed before is not run again
    (a None marks its place, so ratios pair phases of the same round)."""
    for system in systems:
        for phase, size in zip(PHASES, (None, *TXN_SIZES), strict=True):
            key = (system, phase)
            if key in res.failures:
                res.add(system, phase, None)
                continue
            topic = f"txn-{'rdk' if system == RDK else 'sdk'}-{size or 'plain'}-{tag}"
            try:
                if system == RDK:
                    got = await asyncio.to_thread(rdkafka_phase, broker.address, topic,
                                                  records, size, limit_s, broker.pid,
                                                  compression)
                else:
                    got = await sdk_phase(broker.address, topic, records, size, limit_s,
                                          broker.pid)
                want = expected_end(got, size)
                have = await end_offsets(broker.address, topic)
                if have != want:
                    raise PhaseFailed(f"the topic's end offsets add up to {have}, not "
                                      f"{want} ({got.records} records, {got.commits} "
                                      f"commits)")
            except (PhaseFailed, BenchError) as exc:
                res.failures[key] = str(exc)
                res.add(system, phase, None)
                print(f"bench transactions: {system} {phase} failed: {exc}",
                      file=sys.stderr, flush=True)
                continue
            finally:
                await delete_topic(broker.address, topic)
            res.add(system, phase, got)
            commits = f", {got.commit_rate:,.0f} commits/s" if got.commits else ""
            print(f"bench transactions: {system} {phase}: {got.rate:,.0f} records/s"
                  f"{commits} (broker {1e6 * got.broker_cpu_s / max(got.records, 1):.2f} "
                  f"µs/record, client {1e6 * got.client_cpu_s / max(got.records, 1):.2f})",
                  file=sys.stderr, flush=True)


# --- figures --------------------------------------------------------------------------------


def figures(res: Results, settings: dict[str, Any], skipped: dict[str, str],
            systems: list[str]) -> list[Figure]:
    figs: list[Figure] = []
    for system in systems:
        figs += _system_figures(res, system, settings, skipped.get(system))
    return figs


def _system_figures(res: Results, system: str, settings: dict[str, Any],
                    skipped: str | None) -> list[Figure]:
    def measured(phase: str) -> list[Phase]:
        return [p for p in res.phases.get((system, phase), []) if p is not None]

    def notes(*phases: str) -> list[str]:
        out = [skipped] if skipped else []
        for phase in phases:
            if (system, phase) in res.failures:
                out.append(f"{phase} failed: {res.failures[(system, phase)]}")
            capped = sum(p.capped for p in measured(phase))
            if capped:
                out.append(f"{phase}: {capped} of {len(measured(phase))} rounds stopped at "
                           f"the time limit")
        return out

    figs: list[Figure] = []

    def fig(name: str, unit: str, values: list[float], why: list[str]) -> None:
        if not values and not why:
            why = ["not measured: what it is computed from failed"]
        figs.append(Figure(name, unit, values, settings, note="; ".join(why) or None))

    for phase in PHASES:
        fig(f"{system} {phase}", "records/s", [p.rate for p in measured(phase)],
            notes(phase))
    plain_runs = res.phases.get((system, PLAIN), [])
    for size in TXN_SIZES:
        phase = txn_phase(size)
        pairs = zip(res.phases.get((system, phase), []), plain_runs, strict=False)
        ratios = [t.rate / p.rate for t, p in pairs
                  if t is not None and p is not None and p.rate > 0]
        fig(f"{system} {phase} / {PLAIN}", "ratio", ratios, notes(phase, PLAIN))
    for size in TXN_SIZES:
        phase = txn_phase(size)
        fig(f"{system} {phase} commits", "commits/s",
            [p.commit_rate for p in measured(phase)], notes(phase))
    for side in ("broker", "client"):
        for phase in PHASES:
            fig(f"{system} {phase} {side} cpu", "µs/record",
                [1e6 * (p.broker_cpu_s if side == "broker" else p.client_cpu_s) / p.records
                 for p in measured(phase) if p.records],
                notes(phase))
    return figs


def run(args: argparse.Namespace) -> list[Figure]:
    records, limit_s, rounds, warmup = args.records, args.seconds, args.rounds, args.warmup
    if args.smoke:
        records, limit_s, rounds, warmup = min(records, SMOKE_RECORDS), min(limit_s, 20.0), 1, 0
    if records < 1:
        raise BenchError("--records must be at least 1")
    wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SYSTEMS]
    if unknown:
        raise BenchError(f"unknown system(s) {', '.join(unknown)}; known: "
                         f"{', '.join(SYSTEMS)}")
    systems = [SYSTEMS[s] for s in SYSTEMS if s in wanted]
    skipped: dict[str, str] = {}
    if RDK in systems and (why := librdkafka_reason()) is not None:
        skipped[RDK] = f"librdkafka skipped: {why}"
    if SDK in systems and (why := sdk_reason()) is not None:
        skipped[SDK] = f"groupwire sdk skipped: {why}"
    for why in skipped.values():
        print(f"bench transactions: {why}", file=sys.stderr)
    settings = {
        "records": records, "record_bytes": RECORD_BYTES, "partitions": PARTITIONS,
        "records_per_commit": list(TXN_SIZES), "seconds_limit": limit_s,
        "partitioning": f"record i on partition i % {PARTITIONS}, a fresh topic a phase",
        "librdkafka": _librdkafka_version(),
        "librdkafka_producer": f"acks=all, enable.idempotence=true, compression.type="
                               f"{args.compression}, defaults otherwise; transactional.id "
                               f"for the txn phases",
        "sdk": "Producer(acks='all') (idempotent by default) / Producer(transactional_id=...)"
               ", defaults otherwise (linger 5 ms, no compression); one send() a record, "
               "futures awaited after flush() / commit_transaction()",
        "broker": "defaults (python -m groupwire broker: fsync interval)",
    }
    res = Results()
    running = [s for s in systems if s not in skipped]

    async def main() -> None:
        with BrokerProc() as broker:
            for i in range(warmup + rounds):
                scratch = Results() if i < warmup else res
                scratch.failures = res.failures  # a failure in warm-up counts too
                await one_round(scratch, running, broker, records, limit_s,
                                args.compression, f"{time.time_ns()}-{i}")

    _run_loop(main)
    figs = figures(res, settings, skipped, systems)
    if res.failures:
        # the figures that were measured still reach the runner, then the run fails
        for f in figs:
            print(json.dumps(f.to_json("transactions")), flush=True)
        print_table("transactions", figs, sys.stderr)
        raise BenchError("; ".join(f"{s} {p}: {why}" for (s, p), why in res.failures.items()))
    return figs


def _run_loop(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """uvloop when installed, as the broker and the CLI run; asyncio's loop otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


main = bench_main("transactions", add_arguments, run, default_rounds=3, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
