"""Kafka record batches: ms per check, stamp, decode and conversion of one big batch.

One lz4 batch of about 1 MiB compressed, of 100-byte values (random bytes, so about
10 000 records, as librdkafka's defaults build them: ``batch.size`` 1 MB,
``batch.num.messages`` 10 000), no keys, no headers, timestamps a millisecond apart.
Measured: the broker's check of a produced batch (``validate_batch``: header, CRC-32C,
decompression, and a walk of every record's fields, or with ``check_fields=False`` of
each record's length only), stamping its base offset and leader epoch, decoding its
records, converting it to msgpack batches (a msgpack consumer reading it) and those
back (a Kafka consumer reading a msgpack producer's batch). A figure is the mean of
``--reps`` runs; ``records/s`` figures divide the record count by the check's time, for
the goal of 500 000 records/s through the Kafka listener (a whole produce path costs
more than its check).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

from bench.common import Figure, bench_main
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.kafka import records

TARGET_BYTES = 1 << 20
VALUE_BYTES = 100


def build_batch(target: int, seed: int = 7) -> tuple[bytes, int]:
    """An lz4 batch of about ``target`` bytes, and its record count."""
    rng = random.Random(seed)
    per_record = VALUE_BYTES + 8   # a little framing; random values barely compress
    count = max(1, target // per_record)
    batch = b""
    for _ in range(3):   # adjust the count once or twice to land near the target
        recs = [BatchRecord(value=rng.randbytes(VALUE_BYTES),
                            timestamp_ms=1_700_000_000_000 + i) for i in range(count)]
        batch = records.encode_batch(recs, compression=records.COMPRESSION_LZ4)
        count = max(1, int(count * target / len(batch)))
    return batch, records.read_header(batch).record_count


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=5,
                   help="runs of each operation per round; a round's figure is their mean "
                        "(default 5)")


def mean_ms(op: Callable[[], object], reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        op()
    return (time.perf_counter() - t0) / reps * 1000


def run(args: argparse.Namespace) -> list[Figure]:
    target = 64 << 10 if args.smoke else TARGET_BYTES
    reps = 1 if args.smoke else args.reps
    batch, count = build_batch(target)
    as_msgpack = records.to_msgpack(batch)
    ops: list[tuple[str, Callable[[], object]]] = [
        ("validate_batch (every field)", lambda: records.validate_batch(batch)),
        ("validate_batch (lengths only)",
         lambda: records.validate_batch(batch, check_fields=False)),
        ("stamp_batch", lambda: records.stamp_batch(batch, 123_456_789, 7)),
        ("decode_records", lambda: records.decode_records(batch)),
        ("to_msgpack", lambda: records.to_msgpack(batch)),
        ("from_msgpack (of to_msgpack's output)", lambda: records.from_msgpack(as_msgpack)),
    ]
    values: dict[str, list[float]] = {name: [] for name, _ in ops}
    for r in range(args.warmup + args.rounds):
        for name, op in ops:   # interleaved: every operation sees the same load
            ms = mean_ms(op, reps)
            if r >= args.warmup:
                values[name].append(ms)
    settings = {"batch_bytes": len(batch), "records": count, "value_bytes": VALUE_BYTES,
                "compression": "lz4", "reps": reps}
    figures = [Figure(name, "ms", values[name], settings) for name, _ in ops]
    for name in ("validate_batch (every field)", "validate_batch (lengths only)"):
        rates = [count / (ms / 1000) for ms in values[name]]
        figures.append(Figure(f"{name}: records/s", "records/s", rates, settings))
    return figures


main = bench_main("kafka_records", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
