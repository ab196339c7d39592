"""A consumer process for the process-level tests: it reports everything on stdout.

Lines are JSON: ``{"event": "assigned"|"revoked"|"lost", "partitions": [[t, p], ...]}``,
``{"event": "records", "records": [[partition, offset, value], ...]}`` (printed before the
batch is committed) and ``{"event": "commit_failed"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from groupwire.client import Consumer, RebalanceListener, TopicPartition
from groupwire.client.errors import CommitFailedError, GroupwireError


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _tps(partitions: object) -> list[list[object]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)  # type: ignore[attr-defined]


class Reporter(RebalanceListener):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        emit(event="revoked", partitions=_tps(revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        emit(event="assigned", partitions=_tps(assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        emit(event="lost", partitions=_tps(lost))


async def run(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.max_poll_interval_ms,
        enable_auto_commit=False, auto_offset_reset="earliest",
        partition_assignment_strategy=(args.strategy,))
    async with consumer:
        consumer.subscribe([args.topic], listener=Reporter())
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=100)
            except GroupwireError as exc:
                emit(event="error", error=repr(exc))
                continue
            records = [[r.partition, r.offset, (r.value or b"").decode()]
                       for rs in batches.values() for r in rs]
            if not records:
                continue
            emit(event="records", records=records)
            try:
                await consumer.commit()
            except CommitFailedError:
                emit(event="commit_failed")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default="proc")
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=300)
    p.add_argument("--max-poll-interval-ms", type=int, default=300000)
    p.add_argument("--strategy", default="range")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
