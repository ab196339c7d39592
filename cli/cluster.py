"""``groupwire cluster brokers|partitions|elect-leaders``: the SDK's Admin on the cluster's
metadata. A single broker answers as a cluster of one: node 0, the controller, the only
replica of every partition."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from groupwire.cli.arguments import add_connection_flags, non_negative_int
from groupwire.cli.errors import EXIT_USAGE
from groupwire.cli.output import emit_json, table
from groupwire.cli.running import run_with_admin
from groupwire.client.admin import Admin, PartitionDescription
from groupwire.client.errors import BrokerResponseError
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode


def register(subparsers: Any) -> None:
    """Add ``cluster`` and its actions to the ``groupwire`` subparsers."""
    cluster = subparsers.add_parser(
        "cluster", help="brokers, partition replicas and preferred-leader elections")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("brokers", help="the live brokers and which one is the controller")
    add_connection_flags(p)
    p.set_defaults(func=brokers)
    p = actions.add_parser(
        "partitions", help="leader, leader epoch, replicas, ISR and offline replicas",
        description="Every partition of every topic (internal ones included), or of "
                    "--topic. --under-replicated and --unavailable keep only the partitions "
                    "that are so (either, when both are given).")
    p.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only this topic's partitions (repeatable)")
    p.add_argument("--under-replicated", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable", action="store_true",
                   help="only partitions without a leader")
    add_connection_flags(p)
    p.set_defaults(func=partitions)
    p = actions.add_parser(
        "elect-leaders", help="move leadership back to each partition's preferred replica",
        description="Ask the controller to make each partition's first replica its leader "
                    "again where that replica is live and in the ISR (a preferred election; "
                    "the controller by itself never elects a leader outside the ISR), and "
                    "print each partition's result. Every partition, or --topic's, or one "
                    "--partition of it. Exits 0 whatever the partitions' results, 1 if the "
                    "request failed. With --unclean (DATA LOSS), instead give each "
                    "partition that has no eligible leader any live replica as its leader.")
    p.add_argument("--topic", metavar="TOPIC", help="only this topic's partitions")
    p.add_argument("--partition", type=non_negative_int, metavar="P",
                   help="only partition P of --topic")
    p.add_argument("--unclean", action="store_true",
                   help="WARNING, LOSES DATA: an unclean election. Each partition without "
                        "an eligible leader (no live in-sync replica that kept its log, "
                        "e.g. its only in-sync replica came back on a wiped disk) gets its "
                        "first live replica as leader, one that lost its log only if no "
                        "other is live; the other replicas truncate to that leader's log, "
                        "so acknowledged records it lacks are lost for good. Use it only "
                        "when no replica with the data will come back. Partitions that "
                        "have or can get an eligible leader are left alone "
                        "(ELECTION_NOT_NEEDED)")
    add_connection_flags(p)
    p.set_defaults(func=elect_leaders)


def brokers(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        desc = await admin.describe_cluster()
        if args.json:
            emit_json({"cluster_id": desc.cluster_id, "controller_id": desc.controller_id,
                       "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port,
                                    "rack": b.rack, "controller": b.controller}
                                   for b in desc.brokers]})
            return 0
        table(f"brokers of cluster {desc.cluster_id}",
              ["node id", "address", "rack", "controller"],
              [(b.node_id, f"{b.host}:{b.port}", b.rack, "yes" if b.controller else "")
               for b in desc.brokers])
        if desc.controller_id < 0:
            print("no controller now", file=sys.stderr)
        return 0

    return run_with_admin(args, body)


def partitions(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        found = await admin.describe_partitions(
            None if args.topic is None else list(dict.fromkeys(args.topic)))
        shown = [d for d in found if _wanted(d, args.under_replicated, args.unavailable)]
        if args.json:
            emit_json([{"topic": d.topic, "partition": d.partition, "leader": d.leader,
                        "leader_epoch": d.leader_epoch, "replicas": d.replicas,
                        "isr": d.isr, "offline_replicas": d.offline_replicas}
                       for d in shown])
            return 0
        table("partitions", ["topic", "partition", "leader", "epoch", "replicas", "ISR",
                             "offline"],
              [(d.topic, d.partition, d.leader if d.leader >= 0 else "none",
                d.leader_epoch, _nodes(d.replicas), _nodes(d.isr),
                _nodes(d.offline_replicas)) for d in shown])
        return 0

    return run_with_admin(args, body)


def elect_leaders(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        print("groupwire cluster elect-leaders: error: --partition needs --topic "
              "(see groupwire cluster elect-leaders --help)", file=sys.stderr)
        return EXIT_USAGE

    async def body(admin: Admin) -> int:
        targets: list[TopicPartition] | None = None
        if args.partition is not None:
            targets = [TopicPartition(args.topic, args.partition)]
        elif args.topic is not None:
            targets = [TopicPartition(d.topic, d.partition)
                       for d in await admin.describe_partitions([args.topic])]
        if args.unclean:
            print("groupwire cluster elect-leaders: WARNING: an unclean election loses the "
                  "acknowledged records the new leaders lack", file=sys.stderr)
        results = sorted((await admin.elect_leaders(targets, unclean=args.unclean)).items())
        if args.json:
            emit_json([{"topic": tp.topic, "partition": tp.partition,
                        "result": _outcome(err)[0],
                        "error_code": 0 if err is None else err.raw_code,
                        "message": _outcome(err)[1]} for tp, err in results])
            return 0
        table("unclean leader elections" if args.unclean else "preferred leader elections",
              ["topic", "partition", "result", "detail"],
              [(tp.topic, tp.partition, *_outcome(err)) for tp, err in results])
        return 0

    return run_with_admin(args, body)


def _wanted(d: PartitionDescription, under_replicated: bool, unavailable: bool) -> bool:
    if not (under_replicated or unavailable):
        return True
    return (under_replicated and d.under_replicated) or (unavailable and d.unavailable)


def _nodes(ids: Sequence[int]) -> str:
    return ",".join(str(n) for n in ids)


def _outcome(err: BrokerResponseError | None) -> tuple[str, str | None]:
    """("elected", None), or the code's name and the broker's reason."""
    if err is None:
        return "elected", None
    name = ErrorCode.name_of(err.raw_code)
    text = str(err)
    return name, text.removeprefix(f"{name}: ") if text != name else None
