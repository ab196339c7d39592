"""``groupwire produce`` and ``groupwire consume``: records in from stdin, out to stdout.

``produce`` sends ``--value`` or one record per stdin line; ``consume`` prints records as
they arrive, reading every partition without a group, or as a member of ``--group``
committing as it goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import os
import sys
import threading
from collections import deque
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
from groupwire.client.errors import (
    CorruptRecordError,
    GroupwireError,
    UnknownTopicOrPartitionError,
)
from groupwire.client.producer import Producer
from groupwire.client.security import SecurityConfig
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
                   help="stop when nothing arrives for this long, counted from the first "
                   "assignment; a --group member given no partitions within this or "
                   "--timeout-ms, whichever is longer, fails (default: run until Ctrl-C)")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    add_connection_flags(p)
    p.set_defaults(func=consume)


# --- produce ------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> int:
    """Send records until stdin ends or a signal stops it; a summary of what landed.

    Memory stays bounded whatever the input: stdin is read a few chunks ahead of the
    producer, and at most :data:`MAX_UNACKED` records wait for their acknowledgement
    before more is read. A first SIGINT/SIGTERM stops reading and flushes what was sent
    (saying how much); a second aborts at once.
    """
    security = security_from_args(args)
    key = None if args.key is None else args.key.encode()
    sep = None if args.key_separator is None else args.key_separator.encode()

    async def main(stop: Stop) -> int:
        acks: int | str = "all" if args.acks == "all" else int(args.acks)
        producer = Producer(args.bootstrap, client_id=CLIENT_ID, acks=acks,
                            request_timeout_ms=args.timeout_ms, security=security)
        landed = _Landed(args.topic, stream_json=args.json)
        try:
            await producer.start()
            partitions = await producer.partitions_for(args.topic)  # an unknown topic: now
            if args.partition is not None and args.partition not in partitions:
                raise CliError(f"--partition {args.partition}: topic {args.topic!r} has "
                               f"partitions 0-{len(partitions) - 1}")

            async def send_all() -> None:
                # the per-record loop is the command's cost: names bound once
                send, topic, partition = producer.send, args.topic, args.partition
                pending, limit = landed.pending, MAX_UNACKED
                add = pending.append
                async for chunk in _chunks(args):
                    for line in chunk:
                        if sep is None:
                            add(await send(topic, line, key, partition))
                        else:
                            k, value = _split(sep, line)
                            add(await send(topic, value, k, partition))
                        if len(pending) >= limit:
                            await landed.room(limit)
                    landed.settle()
                    if landed.error is not None:
                        return  # a record failed: read no further
                    await asyncio.sleep(0)  # a chunk at a time: the sender and signals run
                await landed.room(1)  # stdin ended: every record acknowledged

            if not stop.requested:
                await stop.until(send_all())
            if stop.requested:  # a first signal: what was sent still lands
                landed.settle()
                if landed.pending:
                    print(f"flushing {len(landed.pending)} records; Ctrl-C again to abort",
                          file=sys.stderr, flush=True)
                await landed.room(1)
        except asyncio.CancelledError:
            if stop.signum is not None:  # a second signal: give up on the rest at once
                landed.settle()
                print(f"groupwire produce: aborted: {len(landed.pending)} record(s) sent "
                      "but not acknowledged (they may or may not have been stored)",
                      file=sys.stderr, flush=True)
                landed.forget()
                landed.end_json()
                raise
            await producer.close()
            raise
        except BaseException:
            await producer.close()
            landed.forget()
            landed.end_json()
            raise
        await producer.close()
        landed.settle()
        landed.show(args)
        if landed.error is not None:
            raise CliError(f"{landed.failed} record(s) were not produced: "
                           f"{str(landed.error) or type(landed.error).__name__}")
        return 0

    return run_sdk(main, graceful=True)


READ_BYTES = 65536
"""How much of stdin one read takes (a chunk of lines)."""

READ_AHEAD_CHUNKS = 4
"""Chunks read from stdin and not yet handed to the producer, at most."""

MAX_UNACKED = 65536
"""Records handed to the producer and not yet acknowledged, at most: with the read-ahead,
what bounds produce's memory (the producer's own ``max_buffer_bytes`` bounds it for large
records)."""

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A longer line cannot be one record (the broker's default frame limit): refused rather
than buffered without end."""


async def _chunks(args: argparse.Namespace) -> AsyncIterator[list[bytes]]:
    """``--value``, or stdin's lines (without their line end) a chunk at a time."""
    if args.value is not None:
        yield [args.value.encode()]
        return
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # an in-memory stdin
        lines = (line.rstrip("\r\n").encode() for line in sys.stdin)
        while batch := list(itertools.islice(lines, 1024)):
            yield batch
        return
    reader = _StdinReader(fd, asyncio.get_running_loop(), READ_AHEAD_CHUNKS)
    while (chunk := await reader.get()) is not None:
        yield chunk


class _StdinReader:
    """Chunks of stdin's lines, read by a daemon thread at most ``ahead`` chunks before
    they are taken: the backpressure that keeps a fast pipe from filling memory.

    A thread, so that a file, a pipe and a terminal are read alike and a stop need not
    wait for a line (the thread, blocked in ``os.read``, is left behind at exit).
    """

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, ahead: int) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[list[bytes] | BaseException | None] = asyncio.Queue()
        self._room = threading.Semaphore(ahead)
        threading.Thread(target=self._read, args=(fd,), name="groupwire-stdin",
                         daemon=True).start()

    def _read(self, fd: int) -> None:
        item: BaseException | None = None
        try:
            for chunk in _read_chunks(fd):
                self._room.acquire()
                self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        except BaseException as exc:  # handed to the reading task, which raises it
            item = exc
        finally:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody reads
                self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def get(self) -> list[bytes] | None:
        """The next chunk; None at the end of stdin."""
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, BaseException):
            raise item
        return item


def _read_chunks(fd: int) -> Iterator[list[bytes]]:
    # os.read, not sys.stdin: a daemon thread blocked in it holds no lock that the
    # interpreter needs at exit. Bytes are sent as read (no decoding round trip).
    partial: list[bytes] = []
    partial_size = 0
    while chunk := os.read(fd, READ_BYTES):
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # no line end yet: a long line grows
            partial.append(chunk)
            partial_size += len(chunk)
            if partial_size > MAX_LINE_BYTES:
                raise CliError(f"a line of stdin is longer than {MAX_LINE_BYTES} bytes: "
                               "too large for one record")
            continue
        if partial:
            lines[0] = b"".join((*partial, lines[0]))
            partial.clear()
        tail = lines.pop()
        partial_size = len(tail)
        if tail:
            partial.append(tail)
        if b"\r" in chunk:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        yield lines
    if partial:
        last = b"".join(partial)
        yield [last[:-1] if last.endswith(b"\r") else last]


def _split(sep: bytes, line: bytes) -> tuple[bytes, bytes]:
    """A line's key and value, cut at ``--key-separator``."""
    key, found, value = line.partition(sep)
    if not found:
        raise ValueError(f"no key separator {sep.decode()!r} in "
                         f"{line.decode(errors='replace')!r}")
    return key, value


class _Landed:
    """Records handed to the producer, in order, until acknowledged; what landed, counted
    per partition (or streamed out as JSON) rather than kept, so memory stays flat."""

    def __init__(self, topic: str, *, stream_json: bool) -> None:
        self.topic = topic
        self.pending: deque[asyncio.Future[RecordMetadata]] = deque()
        self.count = 0
        self.failed = 0
        self.error: BaseException | None = None
        self._partitions: dict[int, list[int]] = {}  # partition: [records, first, last]
        self._json = stream_json
        self._json_started = False

    def add(self, future: asyncio.Future[RecordMetadata]) -> None:
        self.pending.append(future)

    def settle(self) -> None:
        """Count every acknowledged record at the head of the line."""
        pending = self.pending
        if not pending or not pending[0].done():
            return
        parts = self._partitions
        out: list[str] | None = [] if self._json else None
        popleft = pending.popleft
        landed = 0
        while pending and pending[0].done():
            future = popleft()
            try:
                meta = future.result()
            except Exception as exc:  # the record's failure: counted, the first kept
                self.failed += 1
                self.error = self.error or exc
                continue
            landed += 1
            p, offset = meta.partition, meta.offset
            counts = parts.get(p)
            if counts is None:
                parts[p] = [1, offset, offset]
            else:
                counts[0] += 1
                if offset < counts[1]:
                    counts[1] = offset
                elif offset > counts[2]:
                    counts[2] = offset
            if out is not None:
                out.append(json.dumps({"topic": meta.topic, "partition": p,
                                       "offset": offset}))
        self.count += landed
        if out:  # one JSON document, as before, written as it grows
            sys.stdout.write((", " if self._json_started else "[") + ", ".join(out))
            self._json_started = True

    async def room(self, limit: int) -> None:
        """Wait until fewer than ``limit`` records are unacknowledged (1: none). Never
        cancels a record's future, so a stop in this wait loses nothing."""
        self.settle()
        while len(self.pending) >= limit:
            await asyncio.wait((self.pending[0],))
            self.settle()

    def forget(self) -> None:
        """Read the outcome of every record given up on, so none is reported as an
        exception never retrieved."""
        for future in self.pending:
            future.add_done_callback(_outcome_read)
        self.pending.clear()

    def end_json(self) -> None:
        """Close the JSON list begun by :meth:`settle` (a stop or failure part way)."""
        if self._json_started:
            sys.stdout.write("]\n")
            self._json_started = False

    def show(self, args: argparse.Namespace) -> None:
        if args.json:
            sys.stdout.write("]\n" if self._json_started else "[]\n")
            self._json_started = False
            return
        table(f"produced {self.count} record(s) to {self.topic}",
              ["partition", "records", "offsets"],
              [(p, n, f"{first}-{last}")
               for p, (n, first, last) in sorted(self._partitions.items())])


def _outcome_read(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


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
                try:
                    async for r in _records(args, consumer, stop):
                        shown += 1
                        _print_record(args, r)
                except _NoAssignment:  # described while this consumer is still a member
                    why = await _why_unassigned(args, security, consumer.member_id, count)
                    raise CliError(f"no partitions were assigned within "
                                   f"{_assignment_bound_ms(args)} ms (group {args.group!r}: "
                                   f"{why})") from None
        except CorruptRecordError as exc:  # every record before it was printed
            sys.stdout.flush()
            raise CliError(f"cannot read {exc.topic_partition} at offset {exc.offset} "
                           f"({exc.message}): the records before it were printed") from exc
        finally:
            print(f"consumed {shown} record(s) from {args.topic}", file=sys.stderr)
        return 0

    return run_sdk(main, graceful=True)


class _NoAssignment(Exception):
    """A group member got no partitions within the bound (see :func:`_records`)."""


async def _records(args: argparse.Namespace, consumer: Consumer,
                   stop: Stop) -> AsyncIterator[Record]:
    """Until ``--max-messages``, ``--idle-timeout-ms`` of nothing, or a stop. Never fetches
    past ``--max-messages``: the group commits its position, which must be what was shown.

    The idle clock starts at the first assignment, not at the start: joining a new group
    takes the broker's initial rebalance delay (3 s by default), which is no idleness.
    With ``--idle-timeout-ms``, a member that has no partitions after
    ``max(--timeout-ms, --idle-timeout-ms)`` raises :class:`_NoAssignment`.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    assigned = args.group is None  # without a group every partition is read at once
    idle_since = started
    shown = 0
    while not stop.requested and (args.max_messages is None or shown < args.max_messages):
        left = None if args.max_messages is None else args.max_messages - shown
        batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=left)
        records = [r for rs in batches.values() for r in rs]
        now = loop.time()
        if not assigned and consumer.assignment():
            assigned, idle_since = True, now
        if not records:
            if args.idle_timeout_ms is None:
                continue
            if not assigned:
                if (now - started) * 1000 >= _assignment_bound_ms(args):
                    raise _NoAssignment
            elif (now - idle_since) * 1000 >= args.idle_timeout_ms:
                return
            continue
        idle_since = now
        for r in sorted(records, key=lambda r: (r.partition, r.offset))[:left]:
            shown += 1
            yield r
        sys.stdout.flush()


def _assignment_bound_ms(args: argparse.Namespace) -> int:
    """How long a member with ``--idle-timeout-ms`` waits for its first partitions."""
    return int(max(args.timeout_ms, args.idle_timeout_ms))


async def _why_unassigned(args: argparse.Namespace, security: SecurityConfig,
                          member_id: str, partitions: int) -> str:
    """The group as the broker describes it now, in words: why nothing came."""
    try:
        async with Admin(args.bootstrap, client_id=CLIENT_ID,
                         request_timeout_ms=args.timeout_ms, security=security) as admin:
            (g,) = await admin.describe_groups(args.group)
    except (GroupwireError, OSError) as exc:
        return f"it could not be described: {exc}"
    members = f"{g.state} with {len(g.members)} member(s)"
    if g.state in ("PreparingRebalance", "CompletingRebalance"):
        return (f"{members}: the rebalance waits for every member to rejoin, up to its "
                "rebalance timeout; a longer --timeout-ms waits for it")
    if g.state == "Stable" and any(m.member_id == member_id for m in g.members):
        owners = sum(bool(m.assignment) for m in g.members if m.member_id != member_id)
        return (f"{members}: all {partitions} partition(s) of {args.topic!r} went to "
                f"{owners} other member(s); it gets some when one of them leaves")
    return f"{members}; this consumer had not joined it yet"


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
