"""One consumer process of a chaos run: it writes everything it does to a journal.

Journal lines (JSON): ``assigned``/``revoked``/``lost`` with the generation, member id and
partitions; ``records`` with ``[partition, offset]`` pairs, written *before* the batch is
committed; ``committed`` after a commit succeeded; ``commit_failed`` when the broker (or
the consumer's own state) refused it. A killed process leaves a journal that is complete up
to the kill, since every line is flushed as it is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from typing import IO

from client import Consumer, RebalanceListener, TopicPartition
from client.errors import CommitFailedError, GroupwireError


class Journal:
    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def write(self, **fields: object) -> None:
        fields["t"] = time.time()
        fields["pid"] = os.getpid()
        self._file.write(json.dumps(fields) + "\n")


class Reporter(RebalanceListener):
    def __init__(self, journal: Journal, consumer: Consumer) -> None:
        self._journal = journal
        self._consumer = consumer

    def _write(self, event: str, tps: set[TopicPartition]) -> None:
        self._journal.write(event=event, generation=self._consumer.generation_id,
                            member=self._consumer.member_id,
                            partitions=sorted(tp.partition for tp in tps))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._write("revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._write("assigned", assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._write("lost", lost)


async def run(args: argparse.Namespace) -> None:
    journal = Journal(args.journal)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(50, args.session_timeout_ms // 6),
        request_timeout_ms=max(5000, args.session_timeout_ms),
        enable_auto_commit=False, auto_offset_reset="earliest", retry_backoff_ms=50,
        close_timeout_ms=3000)
    async with consumer:
        consumer.subscribe([args.topic], listener=Reporter(journal, consumer))
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=100)
            except GroupwireError as exc:
                journal.write(event="error", error=repr(exc))
                continue
            records = [[r.partition, r.offset] for rs in batches.values() for r in rs]
            if not records:
                continue
            journal.write(event="records", generation=consumer.generation_id,
                          member=consumer.member_id, records=records)
            offsets = {tp: rs[-1].offset + 1 for tp, rs in batches.items() if rs}
            try:
                await consumer.commit(offsets)
            except (CommitFailedError, GroupwireError) as exc:
                journal.write(event="commit_failed", error=type(exc).__name__,
                              partitions=sorted(tp.partition for tp in offsets))
            else:
                journal.write(event="committed",
                              offsets={str(tp.partition): o for tp, o in offsets.items()})


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m broker.chaos.member")
    p.add_argument("--bootstrap", required=True, help="broker HOST:PORT")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True, help="topic")
    p.add_argument("--name", required=True, help="client id")
    p.add_argument("--journal", required=True, help="file to append events to")
    p.add_argument("--session-timeout-ms", type=int, default=6000, help="session timeout")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
