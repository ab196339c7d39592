"""Kafka codec: µs per decode and per encode, groupwire's generated code beside kio's.

The messages a Kafka listener handles most, at the versions today's clients send:
Produce v8 with one partition carrying 1 MiB of records (decoded from a memoryview, as
a large frame arrives), a Fetch v11 request and a Fetch v11 response with 10 partitions
(1 KiB of records each), Heartbeat v3 request and response, OffsetCommit v7 with 10
partitions, and a Metadata v8 response with 100 topics of 3 partitions. Decoding reads
a payload (header and body) into a dict; encoding writes one from a dict.

kio (``pip install kio``, not a dependency: a compiled reader and a Python writer, the
fastest Kafka codec for Python found) reads and writes the same bodies, header left
out; it is skipped with a note when absent. The sides alternate within each round, so
both see the same machine.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.common import Figure, bench_main
from groupwire.protocol.kafka import codec

CLIENT_ID = "bench-client"
TARGET_S = 0.05
"""Each measurement runs its operation for about this long (calibrated once)."""


@dataclass(frozen=True)
class Case:
    label: str
    api_key: int
    version: int
    response: bool
    body: dict[str, Any]
    view: bool = False
    """Decode from a memoryview (a large frame's payload is one)."""


def _records(n: int) -> bytes:
    return bytes(range(256)) * (n // 256)


def cases(smoke: bool) -> list[Case]:
    big = _records(64 * 1024 if smoke else 1024 * 1024)
    partitions = range(10)
    produce = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
        {"name": "bench-topic", "partition_data": [{"index": 0, "records": big}]}]}
    fetch = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52_428_800,
             "isolation_level": 1, "session_id": 0, "session_epoch": -1, "topics": [
                 {"topic": "bench-topic", "partitions": [
                     {"partition": p, "current_leader_epoch": 3, "fetch_offset": 1000 + p,
                      "log_start_offset": -1, "partition_max_bytes": 1_048_576}
                     for p in partitions]}], "forgotten_topics_data": [], "rack_id": ""}
    fetched = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "bench-topic", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 5000,
             "last_stable_offset": 5000, "log_start_offset": 0, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": _records(1024)} for p in partitions]}]}
    heartbeat = {"group_id": "bench-group", "generation_id": 7,
                 "member_id": "bench-client-0b6e2c1d-8a3f-4c2e-9d51-6f0e7a1b2c3d",
                 "group_instance_id": None}
    commit = {"group_id": "bench-group", "generation_id_or_member_epoch": 7,
              "member_id": heartbeat["member_id"], "group_instance_id": None, "topics": [
                  {"name": "bench-topic", "partitions": [
                      {"partition_index": p, "committed_offset": 123_456 + p,
                       "committed_leader_epoch": 3, "committed_metadata": ""}
                      for p in partitions]}]}
    metadata = {"throttle_time_ms": 0, "brokers": [
        {"node_id": n, "host": f"broker-{n}.example", "port": 9092, "rack": None}
        for n in range(3)], "cluster_id": "bench-cluster", "controller_id": 0, "topics": [
        {"error_code": 0, "name": f"topic-{t:03d}", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": p, "leader_id": p, "leader_epoch": 4,
             "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2], "offline_replicas": []}
            for p in range(3)], "topic_authorized_operations": -2147483648}
        for t in range(100)], "cluster_authorized_operations": -2147483648}
    return [
        Case(f"Produce v8 request (1 partition, {len(big) // 1024} KiB records)", 0, 8,
             False, produce, view=True),
        Case("Fetch v11 request (10 partitions)", 1, 11, False, fetch),
        Case("Fetch v11 response (10 partitions, 1 KiB records each)", 1, 11, True, fetched),
        Case("Heartbeat v3 request", 12, 3, False, heartbeat),
        Case("Heartbeat v3 response", 12, 3, True, {"throttle_time_ms": 0, "error_code": 0}),
        Case("OffsetCommit v7 request (10 partitions)", 8, 7, False, commit),
        Case("Metadata v8 response (100 topics x 3 partitions)", 3, 8, True, metadata),
    ]


# --- the two sides ------------------------------------------------------------------------

Op = Callable[[], object]


def ours(case: Case) -> tuple[Op, Op, bytes]:
    """(decode, encode, payload) with groupwire's codec."""
    if case.response:
        header = codec.RequestHeader(case.api_key, case.version, 1, CLIENT_ID)
        payload = codec.encode_response(header, case.body)
        api_key, version, body = case.api_key, case.version, case.body

        def decode() -> object:
            return codec.decode_response(api_key, version, payload)

        def encode() -> object:
            return codec.encode_response(header, body)

        return decode, encode, payload
    payload = codec.encode_request(case.api_key, case.version, 1, CLIENT_ID, case.body)
    given: bytes | memoryview = memoryview(payload) if case.view else payload
    args = (case.api_key, case.version, 1, CLIENT_ID, case.body)

    def decode_request() -> object:
        return codec.decode_request(given)

    def encode_request() -> object:
        return codec.encode_request(*args)

    return decode_request, encode_request, payload


def _kio_class(case: Case) -> Any:
    name = codec.API_NAMES[case.api_key]
    package = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    direction = "response" if case.response else "request"
    module = importlib.import_module(f"kio.schema.{package}.v{case.version}.{direction}")
    return getattr(module, name + direction.capitalize())


def theirs(case: Case, payload: bytes) -> tuple[Op, Op]:
    """(decode, encode) with kio, on the same body (kio reads and writes no header)."""
    from kio.serial import entity_reader, entity_writer

    cls = _kio_class(case)
    body = payload[4:] if case.response else payload[10 + len(CLIENT_ID):]
    reader, writer = entity_reader(cls), entity_writer(cls)
    entity, size = reader(body, 0)
    if size != len(body):
        raise RuntimeError(f"kio read {size} of {len(body)} bytes of {case.label}")
    check = io.BytesIO()
    writer(check, entity)
    if check.getvalue() != body:
        raise RuntimeError(f"kio writes {case.label} differently")

    def decode() -> object:
        return reader(body, 0)

    def encode() -> object:
        out = io.BytesIO()
        writer(out, entity)
        return out.getvalue()

    return decode, encode


# --- measuring ----------------------------------------------------------------------------


def calibrate(op: Op, target_s: float) -> int:
    """How many calls take about ``target_s``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            op()
        elapsed = time.perf_counter() - t0
        if elapsed >= target_s / 4 or n >= 1 << 20:
            return max(1, int(n * target_s / max(elapsed, 1e-9)))
        n *= 4


def per_call_us(op: Op, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        op()
    return (time.perf_counter() - t0) / n * 1e6


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=TARGET_S,
                   help=f"time per measurement (default {TARGET_S})")


def run(args: argparse.Namespace) -> list[Figure]:
    target = 0.002 if args.smoke else args.seconds
    have_kio = importlib.util.find_spec("kio") is not None
    codec.compile_all()
    plan: list[tuple[str, str, dict[str, Any], Op | None]] = []
    for case in cases(args.smoke):
        decode, encode, payload = ours(case)
        kio_ops: tuple[Op, Op] | tuple[None, None] = (
            theirs(case, payload) if have_kio else (None, None))
        settings = {"api_key": case.api_key, "version": case.version,
                    "payload_bytes": len(payload)}
        plan += [(f"{case.label}: decode", "groupwire", settings, decode),
                 (f"{case.label}: decode", "kio", settings, kio_ops[0]),
                 (f"{case.label}: encode", "groupwire", settings, encode),
                 (f"{case.label}: encode", "kio", settings, kio_ops[1])]
    calls = {i: calibrate(op, target) for i, (_, _, _, op) in enumerate(plan) if op}
    values: dict[int, list[float]] = {i: [] for i in calls}
    for r in range(args.warmup + args.rounds):
        for i, n in calls.items():  # interleaved: both sides see the same machine
            op = plan[i][3]
            assert op is not None
            us = per_call_us(op, n)
            if r >= args.warmup:
                values[i].append(us)
    figures = []
    for i, (name, side, settings, op) in enumerate(plan):
        note = None
        if op is None:
            note = "kio is not installed (pip install kio into .venv to compare)"
        fig_settings = {**settings, "codec": side, "calls_per_round": calls.get(i, 0)}
        figures.append(Figure(f"{name} ({side})", "us", values.get(i, []), fig_settings,
                              note=note))
    return figures


main = bench_main("kafka_codec", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
