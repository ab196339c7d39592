"""One consumer process of a chaos run: it writes everything it does to a journal.

Journal lines (JSON): ``assigned``/``revoked``/``lost`` with the generation, member id and
partitions; ``records`` with ``[partition, offset]`` pairs, written *before* the batch is
committed; ``committed`` after a commit succeeded; ``commit_failed`` when the broker (or
the consumer's own state) refused it; ``error`` for a retriable error (the 1st, 2nd, 4th
... of a streak, each followed by a growing, jittered pause); ``fatal`` for an error no
retry cures, after which the process tells the runner on stdout and exits
(:data:`~groupwire.cli.chaos.fatal.FATAL_EXIT`); ``zombie_probe`` right after a SIGCONT (see
:func:`probe_as_zombie`). A killed process leaves a journal that is complete up to the kill,
since every line is flushed as it is written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import IO

from groupwire.cli.chaos.fatal import FATAL_EXIT, FATAL_PREFIX, Backoff, code_of, is_fatal
from groupwire.cli.child_security import open_connection, security_from_env
from groupwire.client import Consumer, RebalanceListener, TopicPartition
from groupwire.client.errors import CommitFailedError, GroupwireError
from groupwire.client.security import SecurityConfig
from groupwire.client.types import parse_bootstrap
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchGroup,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)


class Journal:
    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def write(self, **fields: object) -> None:
        fields["t"] = time.time()
        fields["pid"] = os.getpid()
        self._file.write(json.dumps(fields) + "\n")


@dataclass
class Identity:
    """Who this consumer is as a working member: what a zombie of it would act as.

    ``committed`` holds only offsets committed while the partition stayed with this member,
    so re-committing them can never move a partition that is still ours backwards.
    """

    member: str = ""
    generation: int = -1
    partitions: set[int] = field(default_factory=set)
    committed: dict[int, int] = field(default_factory=dict)

    def copy(self) -> Identity:
        return Identity(self.member, self.generation, set(self.partitions), dict(self.committed))

    def change(self, consumer: Consumer, added: set[int], removed: set[int]) -> None:
        self.member, self.generation = consumer.member_id, consumer.generation_id
        self.partitions = (self.partitions - removed) | added
        for p in removed | added:
            self.committed.pop(p, None)


class Reporter(RebalanceListener):
    def __init__(self, journal: Journal, consumer: Consumer) -> None:
        self._journal = journal
        self._consumer = consumer
        self.identity = Identity()
        self._before_loss: tuple[float, Identity] | None = None  # (monotonic time, identity)

    def _write(self, event: str, tps: set[TopicPartition]) -> set[int]:
        parts = {tp.partition for tp in tps}
        self._journal.write(event=event, generation=self._consumer.generation_id,
                            member=self._consumer.member_id, partitions=sorted(parts))
        return parts

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.identity.change(self._consumer, set(), self._write("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.identity.change(self._consumer, self._write("assigned", assigned), set())

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._before_loss = (time.monotonic(), self.identity.copy())
        self.identity.change(self._consumer, set(), self._write("lost", lost))

    def frozen_identity(self) -> Identity:
        """What this member held when it was frozen.

        A consumer that wakes after a freeze may declare its partitions lost in the same
        loop turn as the SIGCONT handler runs; a loss that recent is the freeze's own.
        """
        if self._before_loss is not None and time.monotonic() - self._before_loss[0] < 1.0:
            return self._before_loss[1]
        return self.identity.copy()


async def probe_as_zombie(args: argparse.Namespace, journal: Journal, who: Identity,
                          security: SecurityConfig | None = None) -> None:
    """Fetch and commit as the member this process was before it was frozen.

    The consumer itself notices the freeze and stops handing out records, so it never tries
    this; the probe does, on a separate connection, to show what the broker does with a
    zombie's requests once its partitions have moved: it must refuse both. The commit
    re-commits this member's own last committed offsets, so an accepted one can only move
    an offset backwards, which the run's offset samples would catch too. It connects
    as the consumer does (``security``), so a broker that ties members to principals
    sees the same user: what refuses it is the fencing, not the ACLs.
    """
    if not who.partitions:
        return
    sent = time.time()
    fetch: dict[str, str] = {}
    commit: dict[str, str] = {}
    host, port = parse_bootstrap(args.bootstrap)[0]
    try:
        async with await open_connection(host, port, security or SecurityConfig(),
                                         client_id=args.name + "-zombie",
                                         timeout=5.0) as conn:
            parts = [FetchPartition(partition=p, fetch_offset=who.committed.get(p, 0),
                                    partition_max_bytes=1024)
                     for p in sorted(who.partitions)]
            fr = await conn.send(FetchRequest(
                max_wait_ms=0, topics=[FetchTopic(topic=args.topic, partitions=parts)],
                group=FetchGroup(group_id=args.group, member_id=who.member,
                                 generation_id=who.generation)),
                timeout=5.0, response_type=FetchResponse)
            if fr.error_code != ErrorCode.NONE:  # the whole request refused
                fetch = {str(p): ErrorCode.name_of(fr.error_code) for p in sorted(who.partitions)}
            else:
                fetch = {str(d.partition_index): ErrorCode.name_of(d.error_code)
                         for r in fr.responses for d in r.partitions}
            mine = [OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                    for p, o in sorted(who.committed.items()) if p in who.partitions]
            if mine:
                cr = await conn.send(OffsetCommitRequest(
                    group_id=args.group, generation_id=who.generation, member_id=who.member,
                    topics=[OffsetCommitRequestTopic(name=args.topic, partitions=mine)]),
                    timeout=5.0, response_type=OffsetCommitResponse)
                commit = {str(d.partition_index): ErrorCode.name_of(d.error_code)
                          for r in cr.topics for d in r.partitions}
    except (OSError, TimeoutError, GroupwireError) as exc:
        journal.write(event="zombie_probe", sent=sent, generation=who.generation,
                      member=who.member, partitions=sorted(who.partitions), error=repr(exc))
        return
    journal.write(event="zombie_probe", sent=sent, generation=who.generation,
                  member=who.member, partitions=sorted(who.partitions), fetch=fetch,
                  commit=commit)


async def _pause_after(exc: BaseException, backoff: Backoff, journal: Journal,
                       stop: asyncio.Event) -> None:
    """A fatal error ends the process (the runner is told); any other is journaled (the
    1st, 2nd, 4th... of a streak) and waited out, the pause cut short by SIGTERM."""
    if is_fatal(exc):
        _report_fatal(journal, exc)
        raise SystemExit(FATAL_EXIT) from None
    delay = backoff.next_delay()
    if backoff.worth_journaling():
        journal.write(event="error", error=repr(exc), failures=backoff.failures,
                      retry_in_s=round(delay, 3))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await stop.wait()


async def run(args: argparse.Namespace) -> None:
    journal = Journal(args.journal)
    stop = asyncio.Event()
    probes: set[asyncio.Task[None]] = set()
    security = security_from_env()  # the runner's settings: never in argv
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(50, args.session_timeout_ms // 6),
        request_timeout_ms=max(5000, args.session_timeout_ms),
        enable_auto_commit=False, auto_offset_reset="earliest", retry_backoff_ms=50,
        close_timeout_ms=3000, security=security)
    reporter = Reporter(journal, consumer)
    identity = reporter.identity

    def resumed() -> None:
        # Runs at the loop's first turn after SIGCONT, before the consumer can rejoin.
        snapshot = reporter.frozen_identity()
        task = asyncio.get_running_loop().create_task(
            probe_as_zombie(args, journal, snapshot, security))
        probes.add(task)
        task.add_done_callback(probes.discard)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGCONT, resumed)
    starting = Backoff()
    while True:  # a member started while the broker restarts waits for it, as an app would
        try:
            await consumer.start()  # refused credentials show here: fatal, not a crash
            break
        except (GroupwireError, ConnectionError, TimeoutError) as exc:
            await _pause_after(exc, starting, journal, stop)
            if stop.is_set():
                return
    async with consumer:
        consumer.subscribe([args.topic], listener=reporter)
        backoff = Backoff()
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=100)
            except (GroupwireError, ConnectionError, TimeoutError) as exc:
                await _pause_after(exc, backoff, journal, stop)
                continue
            backoff.reset()
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
                identity.committed.update((tp.partition, o) for tp, o in offsets.items()
                                          if tp.partition in identity.partitions)


def _report_fatal(journal: Journal, exc: BaseException) -> None:
    """Journal the error and tell the runner (one line on stdout) before closing down."""
    journal.write(event="fatal", code=code_of(exc), error=str(exc))
    sys.stdout.write(FATAL_PREFIX + json.dumps({"code": code_of(exc), "error": str(exc)}) + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m groupwire.cli.chaos.member")
    p.add_argument("--bootstrap", required=True, help="broker HOST:PORT")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True, help="topic")
    p.add_argument("--name", required=True, help="client id")
    p.add_argument("--journal", required=True, help="file to append events to")
    p.add_argument("--session-timeout-ms", type=int, default=6000, help="session timeout")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
