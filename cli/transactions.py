"""``groupwire transactions list|describe``: what transaction coordinators know, through
the SDK's Admin (Kafka's ``kafka-transactions.sh list`` / ``describe``)."""

from __future__ import annotations

import argparse
from typing import Any

from groupwire.cli.arguments import add_connection_flags, non_negative_int
from groupwire.cli.errors import CliError
from groupwire.cli.output import emit_json, iso_ms, table
from groupwire.cli.running import run_with_admin
from groupwire.client.admin import Admin, TransactionDescription


def register(subparsers: Any) -> None:
    """Add ``transactions`` and its actions to the ``groupwire`` subparsers."""
    txns = subparsers.add_parser(
        "transactions", help="list and describe transactional producers' transactions")
    actions = txns.add_subparsers(dest="transactions_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("list", help="transactional ids, their producer and state")
    p.add_argument("--state", action="append", metavar="STATE",
                   help="only those in this state (repeatable; Empty, Ongoing, "
                        "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, "
                        "PrepareEpochFence, Dead)")
    p.add_argument("--producer-id", action="append", type=int, metavar="ID",
                   help="only those of this producer id (repeatable)")
    p.add_argument("--open-longer-than-ms", type=non_negative_int, metavar="MS",
                   help="only transactions open (Ongoing) for longer than MS: ones a "
                        "producer may have left hanging")
    add_connection_flags(p)
    p.set_defaults(func=list_transactions)
    p = actions.add_parser(
        "describe", help="state, producer, timeout and partitions of transactional ids")
    p.add_argument("transactional_ids", nargs="+", metavar="TRANSACTIONAL_ID",
                   help="transactional ids")
    add_connection_flags(p)
    p.set_defaults(func=describe)


def list_transactions(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        try:
            listed = await admin.list_transactions(
                args.state, args.producer_id, open_longer_than_ms=args.open_longer_than_ms)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if args.json:
            emit_json([{"transactional_id": t.transactional_id,
                        "producer_id": t.producer_id, "state": t.state} for t in listed])
        else:
            table("transactions", ["transactional id", "producer id", "state"],
                  [(t.transactional_id, t.producer_id, t.state) for t in listed])
        return 0

    return run_with_admin(args, body)


def describe(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        described = await admin.describe_transactions(args.transactional_ids)
        if args.json:
            emit_json([_json(t) for t in described])
            return 0
        table("transactions",
              ["transactional id", "coordinator", "state", "producer id", "epoch",
               "timeout ms", "started (UTC)", "partitions"],
              [(t.transactional_id, t.coordinator_id, t.state, t.producer_id,
                t.producer_epoch, t.timeout_ms, iso_ms(t.start_time_ms),
                " ".join(f"{tp.topic}-{tp.partition}" for tp in t.partitions) or None)
               for t in described])
        return 0

    return run_with_admin(args, body)


def _json(t: TransactionDescription) -> dict[str, object]:
    return {"transactional_id": t.transactional_id, "coordinator_id": t.coordinator_id,
            "state": t.state, "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch, "timeout_ms": t.timeout_ms,
            "start_time_ms": t.start_time_ms,
            "partitions": [{"topic": tp.topic, "partition": tp.partition}
                           for tp in t.partitions]}
