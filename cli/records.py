"""``groupwire produce`` and ``groupwire consume``: records in from stdin, out to stdout.

``produce`` sends ``--value`` or one record per stdin line; ``consume`` prints records as
they arrive, reading every partition without a group, or as a member of ``--group``
committing as it goes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from groupwire.cli.arguments import add_connection_flags
from groupwire.cli.output import emit_json, table
from groupwire.cli.running import CLIENT_ID, run_sdk
from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.producer import Producer
from groupwire.client.types import Record, RecordMetadata, TopicPartition

POLL_MS = 200


def register(subparsers: Any) -> None:
    """Add ``produce`` and ``consume`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser("produce", help="send records: --value, or one per stdin line")
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument("--value", help="a single record value (default: read lines from stdin)")
    p.add_argument("--key", help="key for every record (default: none, spread by batch)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line into KEY SEP VALUE (overrides --key)")
    p.add_argument("--partition", type=int,
                   help="partition to write to (default: by key, else sticky per batch)")
    add_connection_flags(p)
    p.set_defaults(func=produce)

    p = subparsers.add_parser("consume", help="print records of a topic (in a group with --group)")
    p.add_argument("--topic", required=True, help="topic to read")
    p.add_argument("--group", help="consume as a member of this group, committing offsets "
                   "(default: no group, every partition, nothing committed)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when nothing is committed "
                   "(default: only new records)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--idle-timeout-ms", type=int,
                   help="stop when nothing arrives for this long (default: run until Ctrl-C)")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    add_connection_flags(p)
    p.set_defaults(func=consume)


# --- produce ------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with Producer(args.bootstrap, client_id=CLIENT_ID,
                            request_timeout_ms=args.timeout_ms) as producer:
            futures = []
            async for line in _lines(args):
                key, value = _split(args, line)
                futures.append(await producer.send(
                    args.topic, value.encode(), key=None if key is None else key.encode(),
                    partition=args.partition))
            metas = [await f for f in futures]
        _show_produced(args, metas)
        return 0

    return run_sdk(main)


async def _lines(args: argparse.Namespace) -> AsyncIterator[str]:
    if args.value is not None:
        yield args.value
        return
    while line := await asyncio.to_thread(sys.stdin.readline):  # interactive: no stall
        yield line.rstrip("\r\n")


def _split(args: argparse.Namespace, line: str) -> tuple[str | None, str]:
    """A line's key and value: ``--key`` for all, or the line cut at ``--key-separator``."""
    if args.key_separator is None:
        return args.key, line
    key, sep, value = line.partition(args.key_separator)
    if not sep:
        raise ValueError(f"no key separator {args.key_separator!r} in {line!r}")
    return key, value


def _show_produced(args: argparse.Namespace, metas: list[RecordMetadata]) -> None:
    if args.json:
        emit_json([{"topic": m.topic, "partition": m.partition, "offset": m.offset}
                   for m in metas])
        return
    offsets: dict[int, list[int]] = {}
    for m in metas:
        offsets.setdefault(m.partition, []).append(m.offset)
    table(f"produced {len(metas)} record(s) to {args.topic}",
          ["partition", "records", "offsets"],
          [(p, len(o), f"{min(o)}-{max(o)}") for p, o in sorted(offsets.items())])


# --- consume ------------------------------------------------------------------------------


def consume(args: argparse.Namespace) -> int:
    """Print records as they arrive; in a group with --group (committing as it goes)."""

    async def main() -> int:
        consumer = Consumer(
            args.bootstrap, group_id=args.group, client_id=CLIENT_ID,
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            request_timeout_ms=args.timeout_ms)
        async with consumer:
            if args.group is None:
                await _assign_every_partition(args, consumer)
            else:
                consumer.subscribe([args.topic])
            await _print_records(args, consumer)
        return 0

    return run_sdk(main)


async def _assign_every_partition(args: argparse.Namespace, consumer: Consumer) -> None:
    async with Admin(args.bootstrap, client_id=CLIENT_ID,
                     request_timeout_ms=args.timeout_ms) as admin:
        count = (await admin.list_topics()).get(args.topic)
    if not count:
        raise ValueError(f"unknown topic {args.topic!r}")
    consumer.assign([TopicPartition(args.topic, p) for p in range(count)])
    if args.from_beginning:
        await consumer.seek_to_beginning()


async def _print_records(args: argparse.Namespace, consumer: Consumer) -> None:
    """Until ``--max-messages`` were shown or nothing came for ``--idle-timeout-ms``."""
    shown = 0
    idle_ms = 0
    while args.max_messages is None or shown < args.max_messages:
        batches = await consumer.getmany(timeout_ms=POLL_MS)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            idle_ms += POLL_MS
            if args.idle_timeout_ms is not None and idle_ms >= args.idle_timeout_ms:
                return
            continue
        idle_ms = 0
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            if args.max_messages is not None and shown >= args.max_messages:
                break
            shown += 1
            _print_record(args, r)
        sys.stdout.flush()


def _print_record(args: argparse.Namespace, r: Record) -> None:
    value = (r.value or b"").decode(errors="replace")
    if args.json:
        emit_json({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                   "timestamp_ms": r.timestamp_ms,
                   "key": None if r.key is None else r.key.decode(errors="replace"),
                   "value": value})
    elif args.print_key:
        print(f"{(r.key or b'').decode(errors='replace')}\t{value}")
    else:
        print(value)
