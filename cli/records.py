"""``groupwire produce`` and ``groupwire consume``: records in from stdin, out to stdout.

``produce`` sends ``--value`` or one record per stdin line; ``consume`` prints records as
they arrive, reading every partition without a group, or as a member of ``--group``
committing as it goes.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import io
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from groupwire.cli.arguments import (
    add_connection_flags,
    non_negative_int,
    positive_int,
    security_from_args,
)
from groupwire.cli.errors import CliError
from groupwire.cli.output import emit_json, note, table
from groupwire.cli.running import CLIENT_ID, Stop, run_sdk
from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.errors import CorruptRecordError, UnknownTopicOrPartitionError
from groupwire.client.producer import Producer
from groupwire.client.types import Record, RecordMetadata, TopicPartition

POLL_MS = 200
READ_BYTES = 65536


def register(subparsers: Any) -> None:
    """Add ``produce`` and ``consume`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser("produce", help="send records: --value, or one per stdin line")
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument("--value", help="a single record value (default: read lines from stdin)")
    p.add_argument("--key", help="key for every record (default: none, spread by batch)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line into KEY SEP VALUE (overrides --key)")
    p.add_argument("--partition", type=non_negative_int,
                   help="partition to write to (default: by key, else sticky per batch)")
    p.add_argument("--acks", choices=["1", "-1", "all"], default="all",
                   help="wait for the leader (1) or every in-sync replica (all, -1: the "
                        "default); a single broker answers both once stored")
    add_connection_flags(p)
    p.set_defaults(func=produce)

    p = subparsers.add_parser("consume", help="print records of a topic (in a group with --group)")
    p.add_argument("--topic", required=True, help="topic to read")
    p.add_argument("--group", help="consume as a member of this group, committing offsets "
                   "(default: no group, every partition, nothing committed)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when nothing is committed "
                   "(default: only new records)")
    p.add_argument("--max-messages", type=positive_int, help="stop after this many records")
    p.add_argument("--idle-timeout-ms", type=positive_int,
                   help="stop when nothing arrives for this long (default: run until Ctrl-C)")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    add_connection_flags(p)
    p.set_defaults(func=consume)


# --- produce ------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> int:
    """Send records until stdin ends or a signal stops it; a summary of what landed."""
    security = security_from_args(args)

    async def main(stop: Stop) -> int:
        acks: int | str = "all" if args.acks == "all" else int(args.acks)
        async with Producer(args.bootstrap, client_id=CLIENT_ID, acks=acks,
                            request_timeout_ms=args.timeout_ms,
                            security=security) as producer:
            partitions = await producer.partitions_for(args.topic)  # an unknown topic: now
            if args.partition is not None and args.partition not in partitions:
                raise CliError(f"--partition {args.partition}: topic {args.topic!r} has "
                               f"partitions 0-{len(partitions) - 1}")
            futures = []
            async for line in _lines(args, stop):
                key, value = _split(args, line)
                futures.append(await producer.send(
                    args.topic, value.encode(), key=None if key is None else key.encode(),
                    partition=args.partition))
            metas = [await f for f in futures]  # what was sent before a stop lands too
        _show_produced(args, metas)
        return 0

    return run_sdk(main, graceful=True)


async def _lines(args: argparse.Namespace, stop: Stop) -> AsyncIterator[str]:
    """``--value``, or stdin's lines until its end or a stop (Ctrl-C need not wait for a
    line: the blocking reads happen in a daemon thread that is left behind)."""
    if args.value is not None:
        yield args.value
        return
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # an in-memory stdin
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read() -> None:
        try:
            for line in _read_lines(fd):
                loop.call_soon_threadsafe(queue.put_nowait, line)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, name="groupwire-stdin", daemon=True).start()
    while (line := await stop.until(queue.get())) is not None:
        yield line


def _read_lines(fd: int) -> Iterator[str]:
    # os.read, not sys.stdin: a daemon thread blocked in it holds no lock that the
    # interpreter needs at exit
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while chunk := os.read(fd, READ_BYTES):
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        yield from (line.rstrip("\r") for line in lines)
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending.rstrip("\r")


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
    """Print records as they arrive; in a group with --group (committing as it goes).

    Ends after ``--max-messages``, ``--idle-timeout-ms`` of quiet, or SIGINT/SIGTERM; each
    way it leaves the group (committing what it printed) and says how many it printed.
    """
    security = security_from_args(args)

    async def main(stop: Stop) -> int:
        async with Admin(args.bootstrap, client_id=CLIENT_ID,
                         request_timeout_ms=args.timeout_ms, security=security) as admin:
            try:  # a topic the user may not DESCRIBE says so, not "unknown"
                count = (await admin.describe_topics([args.topic]))[0].partitions
            except UnknownTopicOrPartitionError:
                count = 0
        if not count:
            raise CliError(f"unknown topic {args.topic!r} (create it with "
                           "`groupwire topics create`)")
        consumer = Consumer(
            args.bootstrap, group_id=args.group, client_id=CLIENT_ID,
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            request_timeout_ms=args.timeout_ms, security=security)
        shown = 0
        try:
            async with consumer:
                if args.group is None:
                    consumer.assign([TopicPartition(args.topic, p) for p in range(count)])
                    if args.from_beginning:
                        await consumer.seek_to_beginning()
                else:
                    consumer.subscribe([args.topic])
                    note(f"joining group {args.group!r} (the first assignment can take the "
                         "broker's initial rebalance delay, a few seconds)")
                if not args.from_beginning:
                    note(f"waiting for new records on {args.topic!r} (records already there "
                         "are read with --from-beginning, or from the group's committed "
                         "offsets; Ctrl-C stops)")
                async for r in _records(args, consumer, stop):
                    shown += 1
                    _print_record(args, r)
        except CorruptRecordError as exc:  # every record before it was printed
            sys.stdout.flush()
            raise CliError(f"cannot read {exc.topic_partition} at offset {exc.offset} "
                           f"({exc.message}): the records before it were printed") from exc
        finally:
            print(f"consumed {shown} record(s) from {args.topic}", file=sys.stderr)
        return 0

    return run_sdk(main, graceful=True)


async def _records(args: argparse.Namespace, consumer: Consumer,
                   stop: Stop) -> AsyncIterator[Record]:
    """Until ``--max-messages``, ``--idle-timeout-ms`` of nothing, or a stop. Never fetches
    past ``--max-messages``: the group commits its position, which must be what was shown."""
    shown = 0
    idle_ms = 0
    while not stop.requested and (args.max_messages is None or shown < args.max_messages):
        left = None if args.max_messages is None else args.max_messages - shown
        batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=left)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            idle_ms += POLL_MS
            if args.idle_timeout_ms is not None and idle_ms >= args.idle_timeout_ms:
                return
            continue
        idle_ms = 0
        for r in sorted(records, key=lambda r: (r.partition, r.offset))[:left]:
            shown += 1
            yield r
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
