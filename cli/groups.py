"""``groupwire groups list|describe|lag|reset-offsets|delete``: the SDK's Admin on groups."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from groupwire.cli.arguments import add_connection_flags, non_negative_int
from groupwire.cli.errors import EXIT_FAILURE, CliError
from groupwire.cli.output import emit_json, iso_ms, table
from groupwire.cli.running import run_with_admin
from groupwire.client.admin import Admin, GroupDescription, PartitionLag, ResetTo
from groupwire.client.types import TopicPartition


def register(subparsers: Any) -> None:
    """Add ``groups`` and its actions to the ``groupwire`` subparsers."""
    groups = subparsers.add_parser("groups", help="inspect, reset and delete consumer groups")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("list", help="list groups")
    p.add_argument("--state", action="append", metavar="STATE",
                   help="only groups in this state (repeatable; e.g. Stable, Empty)")
    add_connection_flags(p)
    p.set_defaults(func=list_groups)
    p = actions.add_parser("describe", help="members, assignments and rebalance history")
    p.add_argument("groups", nargs="+", metavar="GROUP", help="group ids")
    p.add_argument("--history", type=non_negative_int, default=5,
                   help="show the last N rebalances (default 5, 0 for none)")
    add_connection_flags(p)
    p.set_defaults(func=describe)
    p = actions.add_parser("lag", help="committed offset, log end and lag per partition")
    p.add_argument("group", metavar="GROUP", help="group id")
    add_connection_flags(p)
    p.set_defaults(func=lag)
    p = actions.add_parser(
        "reset-offsets", help="plan (or --execute) new positions for a group with no members",
        description="Print the plan (partition, current offset, new offset) and commit "
                    "nothing, unless --execute is given. The group must have no members "
                    "(Empty), and must exist unless --allow-new-group is given.")
    p.add_argument("group", metavar="GROUP", help="group id")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true", help="the first offset kept")
    where.add_argument("--to-latest", action="store_true", help="the log end")
    where.add_argument("--to-offset", type=non_negative_int, metavar="N",
                       help="offset N (clamped to the log)")
    where.add_argument("--to-timestamp", type=non_negative_int, metavar="MS",
                       help="first record at or after MS (epoch milliseconds)")
    p.add_argument("--topic", action="append", metavar="TOPIC",
                   help="every partition of TOPIC (repeatable; default: the group's "
                        "committed partitions)")
    p.add_argument("--execute", action="store_true",
                   help="commit the new offsets (default: a dry run that only prints them)")
    p.add_argument("--allow-new-group", action="store_true",
                   help="reset a group that does not exist yet, creating it (needs --topic)")
    add_connection_flags(p)
    p.set_defaults(func=reset_offsets)
    p = actions.add_parser("delete", help="delete groups with no members")
    p.add_argument("groups", nargs="+", metavar="GROUP", help="group ids")
    add_connection_flags(p)
    p.set_defaults(func=delete)


def list_groups(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        groups = await admin.list_groups(args.state or None)
        if args.json:
            emit_json([{"group_id": g.group_id, "protocol_type": g.protocol_type,
                        "state": g.state} for g in groups])
        else:
            table("groups", ["group", "protocol type", "state"],
                  [(g.group_id, g.protocol_type, g.state) for g in groups])
        return 0

    return run_with_admin(args, body)


def describe(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        groups = await admin.describe_groups(args.groups)
        _refuse_missing([g for g in groups if _missing(g)])
        if args.json:
            emit_json([_description_json(g, args.history) for g in groups])
            return 0
        for g in groups:
            table(f"group {g.group_id}: {g.state}, generation {g.generation_id}, "
                  f"protocol {g.protocol or '-'}",
                  ["member", "instance", "client", "host", "assignment", "poll age ms"],
                  [(m.member_id + (" (leader)" if m.member_id == g.leader_id else ""),
                    m.group_instance_id, m.client_id, m.client_host,
                    _fmt_assignment(m.assignment), m.poll_age_ms) for m in g.members])
            if args.history > 0 and g.rebalances:
                table("rebalances", ["generation", "reason", "started (UTC)", "duration ms",
                                     "moved", "trigger"],
                      [(r.generation_id, r.reason + (f" ({r.detail})" if r.detail else ""),
                        iso_ms(r.started_ms), r.duration_ms,
                        " ".join(f"{t}{list(ps)}" for t, ps in r.moved_partitions) or None,
                        r.trigger_member_id) for r in g.rebalances[-args.history:]])
        return 0

    return run_with_admin(args, body)


def _missing(g: GroupDescription) -> bool:
    """The broker describes a group it does not know as Dead with no members (Kafka)."""
    return g.state == "Dead" and not g.members


def _refuse_missing(missing: list[GroupDescription]) -> None:
    if len(missing) == 1:
        raise CliError(f"group {missing[0].group_id!r} does not exist")
    if missing:
        names = ", ".join(repr(g.group_id) for g in missing)
        raise CliError(f"groups {names} do not exist")


def _description_json(g: GroupDescription, history: int) -> dict[str, object]:
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


def _fmt_assignment(tps: list[TopicPartition] | None) -> str:
    if tps is None:
        return "(opaque)"
    by_topic: dict[str, list[str]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(str(tp.partition))
    return " ".join(f"{t}[{','.join(ps)}]" for t, ps in by_topic.items()) or "(none)"


def lag(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        _refuse_missing([g for g in await admin.describe_groups(args.group) if _missing(g)])
        lags = await admin.group_lag(args.group)
        if args.json:
            emit_json([{"topic": tp.topic, "partition": tp.partition, "committed": v.committed,
                        "end": v.end, "lag": v.lag} for tp, v in lags.items()])
        elif not lags:
            print(f"group {args.group} has no committed offsets and no assigned "
                  "partitions: its lag is unknown")
        else:
            table(_lag_title(args.group, lags),
                  ["topic", "partition", "committed", "end", "lag"],
                  [(tp.topic, tp.partition, v.committed, v.end, v.lag)
                   for tp, v in lags.items()])
        return 0

    return run_with_admin(args, body)


def _lag_title(group: str, lags: dict[TopicPartition, PartitionLag]) -> str:
    """The total over committed partitions; a partition without a commit has no lag to
    add (it is not 0), and the title says how many there are."""
    unknown = sum(v.lag is None for v in lags.values())
    if unknown == len(lags):
        return f"group {group}: no committed offsets (lag unknown for {unknown} partition(s))"
    total = sum(v.lag for v in lags.values() if v.lag is not None)
    if unknown:
        return (f"group {group}: total lag {total} (unknown for {unknown} partition(s) "
                "without a commit)")
    return f"group {group}: total lag {total}"


def reset_offsets(args: argparse.Namespace) -> int:
    to: ResetTo | None = None
    if args.to_earliest:
        to = "earliest"
    elif args.to_latest:
        to = "latest"
    elif args.to_offset is not None:
        to = args.to_offset

    async def body(admin: Admin) -> int:
        (desc,) = await admin.describe_groups(args.group)
        if _missing(desc) and not args.allow_new_group:
            raise CliError(f"group {args.group!r} does not exist (check the name; "
                           "--allow-new-group resets it anyway, creating it)")
        if _missing(desc) and not args.topic:
            raise CliError(f"group {args.group!r} does not exist and commits nothing: "
                           "name the partitions to reset with --topic")
        planned = await admin.reset_group_offsets(
            args.group, to=to, timestamp_ms=args.to_timestamp, topics=args.topic or None,
            commit=False)
        current = await admin.list_consumer_group_offsets(args.group, planned)
        if args.execute:
            done = await admin.reset_group_offsets(
                args.group, to=to, timestamp_ms=args.to_timestamp,
                topics=args.topic or None)
            planned = done
        if args.json:
            emit_json({"group": args.group, "executed": args.execute, "offsets": [
                {"topic": tp.topic, "partition": tp.partition,
                 "current": current[tp].offset if tp in current else None, "new": off}
                for tp, off in planned.items()]})
            return 0
        what = "offsets reset" if args.execute else "planned reset (dry run: nothing committed)"
        table(f"group {args.group}: {what}", ["topic", "partition", "current", "new"],
              [(tp.topic, tp.partition, current[tp].offset if tp in current else None, off)
               for tp, off in planned.items()])
        if not args.execute:
            print("dry run: run again with --execute to commit these offsets",
                  file=sys.stderr)
        return 0

    return run_with_admin(args, body)


def delete(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        results = await admin.delete_groups(args.groups)
        failed = {g: str(e) for g, e in results.items() if e is not None}
        if args.json:
            emit_json({g: (str(e) if e is not None else None) for g, e in results.items()})
        else:
            table("deleted groups", ["group", "result"],
                  [(g, "deleted" if e is None else str(e)) for g, e in results.items()])
        if failed and not args.json:  # the broker's message names the group
            print(f"groupwire groups delete: error: {next(iter(failed.values()))}",
                  file=sys.stderr)
        return EXIT_FAILURE if failed else 0

    return run_with_admin(args, body)
