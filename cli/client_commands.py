"""``groupwire topics|groups|produce``: the SDK's Admin and Producer on the command line.

``register(subparsers)`` adds the subcommands to the ``groupwire`` parser. Output is a
rich table for people and ``--json`` for scripts; failures are one line and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn

from groupwire.client.admin import Admin, GroupDescription, ResetTo, TopicSpec
from groupwire.client.cluster import BrokerNotAvailableError
from groupwire.client.errors import GroupwireError
from groupwire.client.producer import Producer

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_FAILURE = 1


def _fail(message: str) -> NoReturn:
    from groupwire.cli.main import CliError

    raise CliError(message)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                   help=f"broker addresses HOST:PORT[,HOST:PORT] (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=int, default=10000,
                   help="give up on the broker after this long (default 10000)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _run(args: argparse.Namespace, body: Callable[[Admin], Awaitable[int]]) -> int:
    async def main() -> int:
        async with Admin(args.bootstrap, client_id="groupwire-cli",
                         request_timeout_ms=args.timeout_ms) as admin:
            return await body(admin)

    return _guard(main)


def _guard(main: Callable[[], Awaitable[int]]) -> int:
    try:
        return asyncio.run(_coro(main))
    except BrokerNotAvailableError as exc:
        _fail(str(exc))
    except (GroupwireError, ValueError, TypeError) as exc:
        _fail(str(exc) or type(exc).__name__)
    except (OSError, ConnectionError) as exc:
        _fail(f"connection failed: {exc}")


async def _coro(main: Callable[[], Awaitable[int]]) -> int:
    return await main()


def _emit_json(data: object) -> None:
    print(json.dumps(data, indent=None, sort_keys=False))


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    Console(soft_wrap=False).print(table)


# --- topics -------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        specs = [TopicSpec(n, args.partitions, args.replication_factor) for n in args.names]
        created = await admin.create_topics(specs, exist_ok=args.if_not_exists)
        if args.json:
            _emit_json({"created": created})
        else:
            _table("created topics", ["topic", "partitions"], sorted(created.items()))
        return 0

    return _run(args, body)


def _topics_list(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        topics = await admin.describe_topics(include_internal=args.internal)
        if args.json:
            _emit_json([{"name": t.name, "partitions": t.partitions, "internal": t.internal}
                        for t in topics])
        else:
            _table("topics", ["topic", "partitions", "internal"],
                   [(t.name, t.partitions, "yes" if t.internal else "") for t in topics])
        return 0

    return _run(args, body)


def _topics_describe(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        topics = await admin.describe_topics(args.names or None, include_internal=True)
        ends = await admin.list_offsets({tp: -1 for t in topics
                                         for tp in _tps(t.name, t.partitions)})
        starts = await admin.list_offsets({tp: -2 for tp in ends})
        if args.json:
            _emit_json([{"name": t.name, "internal": t.internal, "partitions": [
                {"partition": tp.partition, "start_offset": starts[tp], "end_offset": ends[tp]}
                for tp in _tps(t.name, t.partitions)]} for t in topics])
        else:
            _table("partitions", ["topic", "partition", "start offset", "end offset"],
                   [(tp.topic, tp.partition, starts[tp], ends[tp])
                    for t in topics for tp in _tps(t.name, t.partitions)])
        return 0

    return _run(args, body)


def _tps(topic: str, n: int) -> list[Any]:
    from groupwire.client.types import TopicPartition

    return [TopicPartition(topic, p) for p in range(n)]


# --- groups -------------------------------------------------------------------------------


def _groups_list(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        groups = await admin.list_groups(args.state or None)
        if args.json:
            _emit_json([{"group_id": g.group_id, "protocol_type": g.protocol_type,
                         "state": g.state} for g in groups])
        else:
            _table("groups", ["group", "protocol type", "state"],
                   [(g.group_id, g.protocol_type, g.state) for g in groups])
        return 0

    return _run(args, body)


def _describe_json(g: GroupDescription, history: int) -> dict[str, object]:
    return {
        "group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
        "protocol": g.protocol, "generation_id": g.generation_id, "leader_id": g.leader_id,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "topics": m.topics,
            "assignment": None if m.assignment is None else [
                {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment],
            "last_heartbeat_ms": m.last_heartbeat_ms, "poll_age_ms": m.poll_age_ms,
        } for m in g.members],
        "rebalances": [{
            "generation_id": r.generation_id, "reason": r.reason, "detail": r.detail,
            "started_ms": r.started_ms, "completed_ms": r.completed_ms,
            "duration_ms": r.duration_ms, "trigger_member_id": r.trigger_member_id,
            "moved_partitions": [[t, list(ps)] for t, ps in r.moved_partitions],
        } for r in g.rebalances[-history:]] if history > 0 else [],
    }


def _fmt_assignment(tps: list[Any] | None) -> str:
    if tps is None:
        return "(opaque)"
    by_topic: dict[str, list[str]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(str(tp.partition))
    return " ".join(f"{t}[{','.join(ps)}]" for t, ps in by_topic.items()) or "(none)"


def _groups_describe(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        groups = await admin.describe_groups(args.groups)
        if args.json:
            _emit_json([_describe_json(g, args.history) for g in groups])
            return 0
        for g in groups:
            _table(f"group {g.group_id}: {g.state}, generation {g.generation_id}, "
                   f"protocol {g.protocol or '-'}",
                   ["member", "instance", "client", "host", "assignment", "poll age ms"],
                   [(m.member_id + (" (leader)" if m.member_id == g.leader_id else ""),
                     m.group_instance_id, m.client_id, m.client_host,
                     _fmt_assignment(m.assignment), m.poll_age_ms) for m in g.members])
            if args.history > 0 and g.rebalances:
                _table("rebalances", ["generation", "reason", "started ms", "duration ms",
                                      "moved", "trigger"],
                       [(r.generation_id, r.reason + (f" ({r.detail})" if r.detail else ""),
                         r.started_ms, r.duration_ms,
                         " ".join(f"{t}{list(ps)}" for t, ps in r.moved_partitions) or None,
                         r.trigger_member_id) for r in g.rebalances[-args.history:]])
        return 0

    return _run(args, body)


def _groups_lag(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        lag = await admin.group_lag(args.group)
        if args.json:
            _emit_json([{"topic": tp.topic, "partition": tp.partition, "committed": v.committed,
                         "end": v.end, "lag": v.lag} for tp, v in lag.items()])
        else:
            total = sum(v.lag for v in lag.values() if v.lag is not None)
            _table(f"group {args.group}: total lag {total}",
                   ["topic", "partition", "committed", "end", "lag"],
                   [(tp.topic, tp.partition, v.committed, v.end, v.lag)
                    for tp, v in lag.items()])
        return 0

    return _run(args, body)


def _groups_reset(args: argparse.Namespace) -> int:
    to: ResetTo | None = None
    if args.to_earliest:
        to = "earliest"
    elif args.to_latest:
        to = "latest"
    elif args.to_offset is not None:
        to = args.to_offset

    async def body(admin: Admin) -> int:
        result = await admin.reset_group_offsets(
            args.group, to=to, timestamp_ms=args.to_timestamp, topics=args.topic or None)
        if args.json:
            _emit_json([{"topic": tp.topic, "partition": tp.partition, "offset": off}
                        for tp, off in result.items()])
        else:
            _table(f"group {args.group}: offsets reset", ["topic", "partition", "offset"],
                   [(tp.topic, tp.partition, off) for tp, off in result.items()])
        return 0

    return _run(args, body)


def _groups_delete(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        results = await admin.delete_groups(args.groups)
        failed = {g: str(e) for g, e in results.items() if e is not None}
        if args.json:
            _emit_json({g: (str(e) if e is not None else None) for g, e in results.items()})
        else:
            _table("deleted groups", ["group", "result"],
                   [(g, "deleted" if e is None else str(e)) for g, e in results.items()])
        if failed and not args.json:
            first = next(iter(failed.items()))
            print(f"groupwire groups delete: error: {first[0]}: {first[1]}", file=sys.stderr)
        return EXIT_FAILURE if failed else 0

    return _run(args, body)


# --- produce ------------------------------------------------------------------------------


def _produce(args: argparse.Namespace) -> int:
    async def lines() -> AsyncIterator[str]:
        if args.value is not None:
            yield args.value
            return
        while line := await asyncio.to_thread(sys.stdin.readline):  # interactive: no stall
            yield line.rstrip("\r\n")

    async def main() -> int:
        async with Producer(args.bootstrap, client_id="groupwire-cli",
                            request_timeout_ms=args.timeout_ms) as producer:
            futures = []
            async for line in lines():
                key: str | None = args.key
                value = line
                if args.key_separator is not None:
                    key, sep, rest = line.partition(args.key_separator)
                    if not sep:
                        raise ValueError(f"no key separator {args.key_separator!r} in {line!r}")
                    value = rest
                futures.append(await producer.send(
                    args.topic, value.encode(), key=None if key is None else key.encode(),
                    partition=args.partition))
            metas = [await f for f in futures]
        if args.json:
            _emit_json([{"topic": m.topic, "partition": m.partition, "offset": m.offset}
                        for m in metas])
        else:
            counts: dict[int, list[int]] = {}
            for m in metas:
                counts.setdefault(m.partition, []).append(m.offset)
            _table(f"produced {len(metas)} record(s) to {args.topic}",
                   ["partition", "records", "offsets"],
                   [(p, len(o), f"{min(o)}-{max(o)}") for p, o in sorted(counts.items())])
        return 0

    return _guard(main)


def _consume(args: argparse.Namespace) -> int:
    """Print records as they arrive; in a group with --group (committing as it goes)."""

    async def main() -> int:
        from groupwire.client.consumer import Consumer

        consumer = Consumer(
            args.bootstrap, group_id=args.group, client_id="groupwire-cli",
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            request_timeout_ms=args.timeout_ms)
        shown = 0
        async with consumer:
            if args.group is None:
                from groupwire.client.types import TopicPartition

                async with Admin(args.bootstrap, client_id="groupwire-cli",
                                 request_timeout_ms=args.timeout_ms) as admin:
                    count = (await admin.list_topics()).get(args.topic)
                if not count:
                    raise ValueError(f"unknown topic {args.topic!r}")
                consumer.assign([TopicPartition(args.topic, p) for p in range(count)])
                if args.from_beginning:
                    await consumer.seek_to_beginning()
            else:
                consumer.subscribe([args.topic])
            idle_ms = 0
            while args.max_messages is None or shown < args.max_messages:
                batches = await consumer.getmany(timeout_ms=200)
                records = [r for rs in batches.values() for r in rs]
                if not records:
                    idle_ms += 200
                    if args.idle_timeout_ms is not None and idle_ms >= args.idle_timeout_ms:
                        break
                    continue
                idle_ms = 0
                for r in sorted(records, key=lambda r: (r.partition, r.offset)):
                    if args.max_messages is not None and shown >= args.max_messages:
                        break
                    shown += 1
                    value = (r.value or b"").decode(errors="replace")
                    if args.json:
                        _emit_json({"topic": r.topic, "partition": r.partition,
                                    "offset": r.offset, "timestamp_ms": r.timestamp_ms,
                                    "key": None if r.key is None else r.key.decode(
                                        errors="replace"),
                                    "value": value})
                    elif args.print_key:
                        print(f"{(r.key or b'').decode(errors='replace')}\t{value}")
                    else:
                        print(value)
                sys.stdout.flush()
        return 0

    return _guard(main)


# --- registration -------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``topics``, ``groups`` and ``produce`` to the ``groupwire`` subparsers."""
    topics = subparsers.add_parser("topics", help="create, list and describe topics")
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION")
    tsub.required = True
    p = tsub.add_parser("create", help="create topics")
    p.add_argument("names", nargs="+", metavar="TOPIC", help="topic names to create")
    p.add_argument("--partitions", type=int, default=-1,
                   help="partitions per topic (default: the broker's --num-partitions)")
    p.add_argument("--replication-factor", type=int, default=1,
                   help="replicas per partition; only 1 is supported (default 1)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="do not fail when a topic already exists")
    _common(p)
    p.set_defaults(func=_topics_create)
    p = tsub.add_parser("list", help="list topics and their partition counts")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    _common(p)
    p.set_defaults(func=_topics_list)
    p = tsub.add_parser("describe", help="start and end offsets of each partition")
    p.add_argument("names", nargs="*", metavar="TOPIC", help="topics (default: all)")
    _common(p)
    p.set_defaults(func=_topics_describe)

    groups = subparsers.add_parser("groups", help="inspect, reset and delete consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", metavar="ACTION")
    gsub.required = True
    p = gsub.add_parser("list", help="list groups")
    p.add_argument("--state", action="append", metavar="STATE",
                   help="only groups in this state (repeatable; e.g. Stable, Empty)")
    _common(p)
    p.set_defaults(func=_groups_list)
    p = gsub.add_parser("describe", help="members, assignments and rebalance history")
    p.add_argument("groups", nargs="+", metavar="GROUP", help="group ids")
    p.add_argument("--history", type=int, default=5,
                   help="show the last N rebalances (default 5, 0 for none)")
    _common(p)
    p.set_defaults(func=_groups_describe)
    p = gsub.add_parser("lag", help="committed offset, log end and lag per partition")
    p.add_argument("group", metavar="GROUP", help="group id")
    _common(p)
    p.set_defaults(func=_groups_lag)
    p = gsub.add_parser("reset-offsets",
                        help="commit new positions for a group with no members (Empty)")
    p.add_argument("group", metavar="GROUP", help="group id")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true", help="the first offset kept")
    where.add_argument("--to-latest", action="store_true", help="the log end")
    where.add_argument("--to-offset", type=int, metavar="N",
                       help="offset N (clamped to the log)")
    where.add_argument("--to-timestamp", type=int, metavar="MS",
                       help="first record at or after MS (epoch milliseconds)")
    p.add_argument("--topic", action="append", metavar="TOPIC",
                   help="every partition of TOPIC (repeatable; default: the group's "
                        "committed partitions)")
    _common(p)
    p.set_defaults(func=_groups_reset)
    p = gsub.add_parser("delete", help="delete groups with no members")
    p.add_argument("groups", nargs="+", metavar="GROUP", help="group ids")
    _common(p)
    p.set_defaults(func=_groups_delete)

    p = subparsers.add_parser("produce", help="send records: --value, or one per stdin line")
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument("--value", help="a single record value (default: read lines from stdin)")
    p.add_argument("--key", help="key for every record (default: none, spread by batch)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line into KEY SEP VALUE (overrides --key)")
    p.add_argument("--partition", type=int,
                   help="partition to write to (default: by key, else sticky per batch)")
    _common(p)
    p.set_defaults(func=_produce)

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
    _common(p)
    p.set_defaults(func=_consume)


def main_for_tests(argv: Sequence[str]) -> int:
    """Parse and run only these subcommands, as ``groupwire`` would (errors: exit 1)."""
    from groupwire.cli.main import CliError

    parser = argparse.ArgumentParser(prog="groupwire")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return code
