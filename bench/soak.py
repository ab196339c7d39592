"""Benchmark 8: the broker under hostile load: no client may exhaust it for the others.

One broker process with a low descriptor limit (soft and hard ``--nofile``) takes, in
turn and within a bounded time:

1. a topic with many partitions, and a record produced to every one of them;
2. a burst of worst-case frames: ~16 MiB Metadata requests whose ``topics`` is millions of
   empty arrays (the costliest legal frame to decode);
3. hundreds of slow-loris connections, each announcing a 16 MiB frame and trickling it.

Beside it a neighbour group of two SDK consumers polls and heartbeats with a 6 s session,
and a probe connection sends ApiVersions every 10 ms. The figures: the broker's peak RSS
(VmHWM), its longest event-loop stall (its own monitor, ``groupwire_event_loop_longest_
stall_seconds``), the longest probe round trip (as a client sees it; it also counts stalls
of this process, which builds the hostile frames), produce errors on the wide topic, and
how often the neighbour group rebalanced after it formed (goal: never).

A separate in-process broker (same ``--fsync``) then measures one more figure: the
longest event-loop stall while it deletes a topic of ``--partitions`` partitions, each
holding a record (goal <= 20 ms: the metadata write, fsyncs and directory removal run
on worker threads; issue 24 measured 568 ms for 2 000 partitions on the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import struct
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from bench.common import BenchError, BrokerProc, Figure, bench_main, die_with_parent, with_goal
from groupwire.broker.config import BrokerSettings
from groupwire.broker.logs import configure_logging
from groupwire.broker.server import Broker
from groupwire.client.admin import Admin
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import GroupwireError
from groupwire.client.listener import RebalanceListener
from groupwire.client.producer import Producer
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

GOAL_STALL_MS = "<= 100"
GOAL_DELETE_STALL_MS = "<= 20"
SETTLE_S = 0.2
"""Quiet time before and after the deletion, so its stall is the only one measured."""
GOAL_REBALANCES = "<= 0"
OVERHEAD_MIB = 200
"""What the broker may use beyond its buffer budget: interpreter, metadata, caches."""
FRAME_BYTES = 16 * 1024 * 1024 - 64
"""Just under the broker's default --max-frame-bytes: legal, and as costly as allowed."""
PROBE_EVERY_S = 0.01
NEIGHBOUR_SESSION_MS = 6000
NEIGHBOUR_PARTITIONS = 4
FORM_TIMEOUT_S = 60.0
TRICKLE_BYTES = 64 * 1024
TRICKLE_EVERY_S = 0.25
ANSWER_TIMEOUT_S = 60.0
"""The longest a hostile connection waits on the broker before giving up on it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nofile", type=int, default=1024,
                   help="the broker's descriptor limit, soft and hard (default 1024, the "
                        "common default)")
    p.add_argument("--partitions", type=int, default=2000,
                   help="partitions of the wide topic (default 2000)")
    p.add_argument("--hostile-frames", type=int, default=8,
                   help="worst-case Metadata frames in the burst (default 8)")
    p.add_argument("--slow-connections", type=int, default=300,
                   help="slow-loris connections (default 300)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="how long the slow-loris connections trickle (default 20)")
    p.add_argument("--budget-mib", type=int, default=256,
                   help="the broker's --queued-max-request-bytes, in MiB (default 256)")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"],
                   help="the broker's --fsync (default always: the most descriptors)")


def smoke(args: argparse.Namespace) -> None:
    args.partitions = min(args.partitions, 50)
    args.hostile_frames = min(args.hostile_frames, 1)
    args.slow_connections = min(args.slow_connections, 10)
    args.seconds = min(args.seconds, 1.0)


def peak_rss_mib(pid: int) -> float:
    """The process's high-water resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM for pid {pid}")


def limit_descriptors(nofile: int) -> Callable[[], None]:
    def preexec() -> None:
        die_with_parent()
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return preexec


class Rebalances(RebalanceListener):
    """Counts assignments after the group first formed."""

    def __init__(self) -> None:
        self.assigned = 0
        self.formed = asyncio.Event()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned += 1
        if assigned:
            self.formed.set()


async def neighbour(bootstrap: str, topic: str, listener: Rebalances,
                    stop: asyncio.Event) -> None:
    """One consumer of the neighbour group, polling until ``stop``."""
    async with Consumer(bootstrap, group_id="soak-neighbour", client_id="soak-neighbour",
                        session_timeout_ms=NEIGHBOUR_SESSION_MS,
                        heartbeat_interval_ms=NEIGHBOUR_SESSION_MS // 3) as consumer:
        consumer.subscribe([topic], listener=listener)
        while not stop.is_set():
            await consumer.getmany(timeout_ms=100)


async def probe(bootstrap: str, stop: asyncio.Event, worst: list[float]) -> None:
    """ApiVersions every PROBE_EVERY_S; the longest round trip goes into ``worst[0]``."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await Connection.open(host, int(port), client_id="soak-probe")
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            await conn.send(ApiVersionsRequest(), timeout=30.0,
                            response_type=ApiVersionsResponse)
            worst[0] = max(worst[0], time.perf_counter() - t0)
            await asyncio.sleep(PROBE_EVERY_S)
    finally:
        await conn.close()


def hostile_metadata_frame(correlation_id: int) -> bytes:
    """A legal frame of ``FRAME_BYTES``: Metadata whose ``topics`` is that many ``[]``."""
    head = msgpack.packb([3, 0, correlation_id, "soak-hostile"])
    body_key = msgpack.packb({"topics": []})[:-1]  # map header and key; the array follows
    count = FRAME_BYTES - 1 - len(head) - len(body_key) - 5
    # a 5-array envelope: replace the 4-array header with a 5-array one
    envelope = b"\x95" + head[1:] + body_key + b"\xdd" + struct.pack(">I", count)
    payload = envelope + b"\x90" * count
    return struct.pack(">I", len(payload)) + payload


async def hostile_burst(bootstrap: str, frames: int) -> int:
    """Send the frames over two connections; how many were answered (not just closed)."""
    host, port = bootstrap.rsplit(":", 1)
    answered = 0

    async def one_connection(ids: range) -> None:
        nonlocal answered
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):  # a broker that stops reading
                for cid in ids:
                    writer.write(hostile_metadata_frame(cid))
                    await writer.drain()
                for _ in ids:
                    size = struct.unpack(">I", await reader.readexactly(4))[0]
                    await reader.readexactly(size)
                    answered += 1
        except (OSError, asyncio.IncompleteReadError):
            pass  # the broker may close a connection that sends such frames (or time out)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    half = (frames + 1) // 2
    await asyncio.gather(one_connection(range(1, half + 1)),
                         one_connection(range(half + 1, frames + 1)))
    return answered


async def slow_loris(bootstrap: str, connections: int, seconds: float) -> int:
    """Connections announcing a 16 MiB frame and trickling it; how many the broker closed."""
    host, port = bootstrap.rsplit(":", 1)
    closed = 0
    deadline = time.monotonic() + seconds
    loop = asyncio.get_running_loop()

    async def one() -> None:
        nonlocal closed
        try:
            _, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            closed += 1
            return
        try:
            writer.write(struct.pack(">I", FRAME_BYTES))
            chunk = b"\x00" * TRICKLE_BYTES
            # drain blocks while the broker pauses this connection for memory: bounded
            async with asyncio.timeout_at(loop.time() + seconds + ANSWER_TIMEOUT_S):
                while time.monotonic() < deadline:
                    writer.write(chunk)
                    await writer.drain()
                    await asyncio.sleep(TRICKLE_EVERY_S)  # the trickle's pace, not a wait
        except TimeoutError:
            pass  # still paused at the end: the broker held it without closing it
        except OSError:
            closed += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.gather(*(one() for _ in range(connections)))
    return closed


async def wide_topic(bootstrap: str, partitions: int) -> int:
    """Create a topic of ``partitions`` and produce one record to each: the errors."""
    async with Admin(bootstrap, client_id="soak-admin") as admin:
        await admin.create_topics("soak-wide", partitions)
    errors = 0
    async with Producer(bootstrap, client_id="soak-producer") as producer:
        futures = [await producer.send("soak-wide", b"x", partition=p)
                   for p in range(partitions)]
        for fut in futures:
            try:
                await fut
            except GroupwireError:
                errors += 1
    return errors


def longest_stall_ms(b: BrokerProc) -> float:
    """The broker's own figure: its loop monitor's longest stall since it started."""
    assert b.metrics_port is not None
    url = f"http://127.0.0.1:{b.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("groupwire_event_loop_longest_stall_seconds "):
            return float(line.split()[1]) * 1000
    raise BenchError("the broker exports no groupwire_event_loop_longest_stall_seconds")


async def soak(b: BrokerProc, args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = b.address
    async with Admin(bootstrap, client_id="soak-admin") as admin:
        await admin.create_topics("soak-neighbour", NEIGHBOUR_PARTITIONS)
    stop = asyncio.Event()
    listeners = [Rebalances(), Rebalances()]
    members = [asyncio.create_task(neighbour(bootstrap, "soak-neighbour", lst, stop))
               for lst in listeners]
    try:
        async with asyncio.timeout(FORM_TIMEOUT_S):
            await asyncio.gather(*(lst.formed.wait() for lst in listeners))
    except TimeoutError:
        raise BenchError("the neighbour group did not form") from None
    formed_at = [lst.assigned for lst in listeners]
    worst = [0.0]
    prober = asyncio.create_task(probe(bootstrap, stop, worst))
    await asyncio.sleep(1.0)  # a baseline of probe round trips before the load
    baseline_ms = worst[0] * 1000
    phases: dict[str, float] = {}

    def phase_done(name: str) -> None:
        phases[name] = worst[0] * 1000
        worst[0] = 0.0

    try:
        produce_errors = await wide_topic(bootstrap, args.partitions)
        phase_done("wide topic")
        answered = await hostile_burst(bootstrap, args.hostile_frames)
        phase_done("hostile frames")
        closed = await slow_loris(bootstrap, args.slow_connections, args.seconds)
        phase_done("slow loris")
        await asyncio.sleep(NEIGHBOUR_SESSION_MS / 1000)  # an expiry would show by now
        phase_done("after")
    finally:
        stop.set()
        await asyncio.gather(prober, *members, return_exceptions=True)
    rebalances = sum(lst.assigned - n for lst, n in zip(listeners, formed_at, strict=True))
    return {"peak_rss_mib": peak_rss_mib(b.pid), "worst_probe_ms": max(phases.values()),
            "longest_stall_ms": await asyncio.to_thread(longest_stall_ms, b),
            "phases": phases,
            "baseline_probe_ms": baseline_ms, "produce_errors": produce_errors,
            "hostile_answered": answered, "slow_closed": closed,
            "neighbour_rebalances": rebalances}


async def delete_stall_ms(data_dir: Path, partitions: int, fsync: str) -> float:
    """The longest stall of an in-process broker's loop (its own monitor) while it
    deletes a topic of ``partitions`` partitions, a record in each."""
    configure_logging("json", "error")  # stdout carries only the figures
    broker = Broker(BrokerSettings(data_dir=data_dir, host="127.0.0.1", port=0,
                                   metrics_port=-1,
                                   fsync=fsync))  # type: ignore[arg-type]
    await broker.start()
    try:
        conn = await Connection.open("127.0.0.1", broker.port, client_id="soak-delete")
        try:
            created = await conn.send(CreateTopicsRequest(topics=[CreatableTopic(
                name="soak-doomed", num_partitions=partitions)]),
                timeout=ANSWER_TIMEOUT_S, response_type=CreateTopicsResponse)
            if created.topics[0].error_code != ErrorCode.NONE:
                raise BenchError(f"create failed: {created.topics[0]}")
            batch = encode_batch([BatchRecord(b"x", timestamp_ms=1)])
            produced = await conn.send(ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
                TopicProduceData(name="soak-doomed", partition_data=[
                    PartitionProduceData(index=p, records=batch)
                    for p in range(partitions)])]),
                timeout=ANSWER_TIMEOUT_S, response_type=ProduceResponse)
            if any(p.error_code for t in produced.responses for p in t.partition_responses):
                raise BenchError("produce to the doomed topic failed")
            await asyncio.sleep(SETTLE_S)
            broker.loop_monitor.max_stall_s = 0.0
            deleted = await conn.send(DeleteTopicsRequest(topic_names=["soak-doomed"]),
                                      timeout=ANSWER_TIMEOUT_S,
                                      response_type=DeleteTopicsResponse)
            if deleted.responses[0].error_code != ErrorCode.NONE:
                raise BenchError(f"delete failed: {deleted.responses[0]}")
            await asyncio.sleep(SETTLE_S)
            return broker.loop_monitor.max_stall_s * 1000
        finally:
            await conn.close()
    finally:
        await broker.close()


def run(args: argparse.Namespace) -> list[Figure]:
    if args.smoke:
        smoke(args)
    settings = {"nofile": args.nofile, "partitions": args.partitions,
                "hostile_frames": args.hostile_frames,
                "slow_connections": args.slow_connections, "seconds": args.seconds,
                "budget_mib": args.budget_mib, "fsync": args.fsync}
    rss: list[float] = []
    stall: list[float] = []
    probe_rtt: list[float] = []
    errors: list[float] = []
    rebalances: list[float] = []
    delete_stall: list[float] = []
    notes: list[str] = []
    for i in range(args.warmup + args.rounds):
        proc = BrokerProc(extra=(
            "--fsync", args.fsync, "--metrics-port", "0",
            "--queued-max-request-bytes", str(args.budget_mib * 1024 * 1024)))
        proc.preexec = limit_descriptors(args.nofile)
        with proc as b:
            result = asyncio.run(soak(b, args))
        with tempfile.TemporaryDirectory(prefix="soak-delete-") as tmp:
            deleting = asyncio.run(delete_stall_ms(Path(tmp), args.partitions, args.fsync))
        if i < args.warmup:
            continue
        delete_stall.append(deleting)
        rss.append(result["peak_rss_mib"])
        stall.append(result["longest_stall_ms"])
        probe_rtt.append(result["worst_probe_ms"])
        errors.append(result["produce_errors"])
        rebalances.append(result["neighbour_rebalances"])
        notes.append(f"round {i - args.warmup + 1}: {result['hostile_answered']} of "
                     f"{args.hostile_frames} hostile frames answered, "
                     f"{result['slow_closed']} of {args.slow_connections} slow connections "
                     f"closed by the broker, probe baseline "
                     f"{result['baseline_probe_ms']:.1f} ms; longest round trip by phase: "
                     + ", ".join(f"{k} {v:.0f} ms" for k, v in result["phases"].items()))
    note = "; ".join(notes)
    return [
        with_goal(Figure("peak RSS", "MiB", rss, settings, note=note),
                  f"<= {args.budget_mib + OVERHEAD_MIB}"),
        with_goal(Figure("longest event-loop stall (the broker's monitor)", "ms", stall,
                         settings), GOAL_STALL_MS),
        Figure("longest probe round trip", "ms", probe_rtt, settings),
        with_goal(Figure("produce errors on the wide topic", "count", errors, settings),
                  "<= 0"),
        with_goal(Figure("neighbour group rebalances", "count", rebalances, settings),
                  GOAL_REBALANCES),
        with_goal(Figure(f"longest event-loop stall deleting a {args.partitions}-partition "
                         f"topic", "ms", delete_stall, settings), GOAL_DELETE_STALL_MS),
    ]


main = bench_main("soak", add_arguments, run, default_rounds=1, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main(None))
