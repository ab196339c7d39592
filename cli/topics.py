"""``groupwire topics create|list|describe|delete``: the SDK's Admin on topics."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from groupwire.cli.arguments import add_connection_flags, positive_int
from groupwire.cli.errors import EXIT_FAILURE
from groupwire.cli.output import emit_json, table
from groupwire.cli.running import run_with_admin
from groupwire.client.admin import Admin, TopicSpec
from groupwire.client.errors import UnknownTopicOrPartitionError
from groupwire.client.types import TopicPartition


def register(subparsers: Any) -> None:
    """Add ``topics`` and its actions to the ``groupwire`` subparsers."""
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="topics_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("create", help="create topics")
    p.add_argument("names", nargs="+", metavar="TOPIC", help="topic names to create")
    p.add_argument("--partitions", type=positive_int, default=-1,
                   help="partitions per topic (default: the broker's --num-partitions)")
    p.add_argument("--replication-factor", type=positive_int, default=-1,
                   help="replicas per partition (default: the broker's "
                        "--default-replication-factor in a cluster; 1 on a single broker)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="do not fail when a topic already exists")
    add_connection_flags(p)
    p.set_defaults(func=create)
    p = actions.add_parser("list", help="list topics and their partition counts")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    add_connection_flags(p)
    p.set_defaults(func=list_topics)
    p = actions.add_parser("describe", help="start and end offsets of each partition")
    p.add_argument("names", nargs="*", metavar="TOPIC", help="topics (default: all)")
    add_connection_flags(p)
    p.set_defaults(func=describe)
    p = actions.add_parser(
        "delete", help="delete topics, their records and groups' committed offsets for them",
        description="Delete at once, without asking (as kafka-topics.sh --delete does), "
                    "and print what was deleted. Internal topics cannot be deleted.")
    p.add_argument("names", nargs="+", metavar="TOPIC", help="topic names to delete")
    p.add_argument("--if-exists", action="store_true",
                   help="do not fail when a topic does not exist")
    add_connection_flags(p)
    p.set_defaults(func=delete)


def create(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        specs = [TopicSpec(n, args.partitions, args.replication_factor) for n in args.names]
        created = await admin.create_topics(specs, exist_ok=args.if_not_exists)
        existing = [n for n in dict.fromkeys(args.names) if n not in created]
        if args.json:
            emit_json({"created": created, "existing": existing})
            return 0
        if created:
            table("created topics", ["topic", "partitions"], sorted(created.items()))
        for name in existing:  # only with --if-not-exists: otherwise creating them failed
            print(f"topic {name!r} already exists")
        return 0

    return run_with_admin(args, body)


def list_topics(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        topics = await admin.describe_topics(include_internal=args.internal)
        if args.json:
            emit_json([{"name": t.name, "partitions": t.partitions, "internal": t.internal}
                       for t in topics])
        else:
            table("topics", ["topic", "partitions", "internal"],
                  [(t.name, t.partitions, "yes" if t.internal else "") for t in topics])
        return 0

    return run_with_admin(args, body)


def describe(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        topics = await admin.describe_topics(args.names or None, include_internal=True)
        ends = await admin.list_offsets({tp: -1 for t in topics
                                         for tp in _partitions(t.name, t.partitions)})
        starts = await admin.list_offsets({tp: -2 for tp in ends})
        if args.json:
            emit_json([{"name": t.name, "internal": t.internal, "partitions": [
                {"partition": tp.partition, "start_offset": starts[tp], "end_offset": ends[tp]}
                for tp in _partitions(t.name, t.partitions)]} for t in topics])
        else:
            table("partitions", ["topic", "partition", "start offset", "end offset"],
                  [(tp.topic, tp.partition, starts[tp], ends[tp])
                   for t in topics for tp in _partitions(t.name, t.partitions)])
        return 0

    return run_with_admin(args, body)


def delete(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        results = await admin.delete_topics(list(dict.fromkeys(args.names)),
                                            timeout_ms=args.timeout_ms)
        deleted = [n for n, e in results.items() if e is None]
        missing = [n for n, e in results.items()
                   if isinstance(e, UnknownTopicOrPartitionError) and args.if_exists]
        failed = {n: str(e) for n, e in results.items()
                  if e is not None and n not in missing}
        if args.json:
            emit_json({"deleted": deleted, "missing": missing, "errors": failed})
            return EXIT_FAILURE if failed else 0
        table("deleted topics", ["topic", "result"], [
            (n, "deleted" if e is None else "does not exist" if n in missing else str(e))
            for n, e in results.items()])
        if failed:  # the broker's message names the topic
            print(f"groupwire topics delete: error: {next(iter(failed.values()))}",
                  file=sys.stderr)
        return EXIT_FAILURE if failed else 0

    return run_with_admin(args, body)


def _partitions(topic: str, count: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]
