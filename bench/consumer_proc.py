"""A consumer in its own process for the group benchmarks, and the parent's handle on it.

Separate processes because failover SIGKILLs consumers, and four consumers sharing one
interpreter would share one GIL. Times are ``time.monotonic()``: CLOCK_MONOTONIC is one
clock for every process on the machine, so the parent can subtract a child's times from
its own.

The child (``python -m bench.consumer_proc``) prints JSON lines: ``ready`` once
connected; ``assigned``/``revoked``/``lost`` with partitions (groupwire only); then, with
``--report batches``, one ``batch`` per poll (records per partition and the time), or with
``--report count``, ``progress`` lines (records so far, times of the first and last);
with ``--report-commits``, a ``commit`` line per successful commit.
It does nothing until ``go`` arrives on stdin, so a parent can start several and let them
join at once; ``leave`` unsubscribes (groupwire); SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.common import REPO_ROOT, python_module_cmd, repo_env

PROGRESS_EVERY_S = 0.2


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Counter:
    """Records consumed and when the first and last arrived (``--report count``)."""

    def __init__(self) -> None:
        self.n = 0
        self.first = 0.0
        self.last = 0.0
        self._emitted_n = -1
        self._emitted_at = 0.0

    def add(self, n: int, now: float) -> None:
        if n and not self.n:
            self.first = now
        self.n += n
        if n:
            self.last = now

    def maybe_emit(self, now: float, *, idle: bool) -> None:
        if self.n != self._emitted_n and (idle or now - self._emitted_at >= PROGRESS_EVERY_S):
            emit(e="progress", n=self.n, first=self.first, last=self.last)
            self._emitted_n, self._emitted_at = self.n, now


# --- the child: groupwire ------------------------------------------------------------------


async def _run_groupwire(args: argparse.Namespace) -> None:
    from groupwire.client import Consumer, RebalanceListener, TopicPartition
    from groupwire.client.errors import GroupwireError

    def parts(tps: set[TopicPartition]) -> list[int]:
        return sorted(tp.partition for tp in tps)

    class Reporter(RebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            emit(e="revoked", t=time.monotonic(), p=parts(revoked))

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            emit(e="assigned", t=time.monotonic(), p=parts(assigned))

        def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            emit(e="lost", t=time.monotonic(), p=parts(lost))

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    commands: asyncio.Queue[str] = asyncio.Queue()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def read_commands() -> None:
        async for line in reader:
            await commands.put(line.decode().strip())
        await commands.put("eof")

    reading = asyncio.ensure_future(read_commands())
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        partition_assignment_strategy=(args.strategy,), enable_auto_commit=False,
        auto_offset_reset="earliest", max_poll_records=args.max_poll_records)
    counter = _Counter()
    subscribed = False
    async with consumer:
        emit(e="ready", t=time.monotonic())
        while not stop.is_set():
            while not commands.empty() or not subscribed:
                cmd = await commands.get()
                if cmd == "go" and not subscribed:
                    consumer.subscribe([args.topic], listener=Reporter())
                    subscribed = True
                elif cmd == "leave" and subscribed:
                    consumer.unsubscribe()
                    subscribed = False
                    emit(e="left", t=time.monotonic())
                elif cmd == "eof":
                    stop.set()
                    break
            if stop.is_set():
                break
            try:
                batches = await consumer.getmany(timeout_ms=100)
            except GroupwireError as exc:
                emit(e="error", t=time.monotonic(), error=repr(exc))
                continue
            now = time.monotonic()
            n = sum(len(rs) for rs in batches.values())
            if args.report == "batches":
                if n:
                    emit(e="batch", t=now,
                         p={str(tp.partition): len(rs) for tp, rs in batches.items() if rs})
            else:
                counter.add(n, now)
                counter.maybe_emit(now, idle=not n)
            if n and args.commit:
                t0 = time.monotonic()
                try:
                    await consumer.commit()
                except GroupwireError as exc:
                    emit(e="commit_failed", t=time.monotonic(), error=repr(exc))
                else:
                    if args.report_commits:
                        emit(e="commit", t0=t0, t=time.monotonic())
    reading.cancel()


# --- the child: Redis Streams ---------------------------------------------------------------


def _run_redis(args: argparse.Namespace) -> None:
    """XREADGROUP COUNT n + XACK, redis-py with hiredis: what a Redis user writes."""
    import redis

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    client = redis.Redis.from_url(args.redis)
    client.ping()
    emit(e="ready", t=time.monotonic())
    while sys.stdin.readline().strip() != "go":
        pass
    emit(e="started", t=time.monotonic())
    counter = _Counter()
    stream = args.topic
    while True:
        resp: Any = client.xreadgroup(args.group, args.name, {stream: ">"},
                                      count=args.max_poll_records, block=100)
        now = time.monotonic()
        ids = [entry_id for _, entries in resp or [] for entry_id, _ in entries]
        if ids and args.commit:
            client.xack(stream, args.group, *ids)
        counter.add(len(ids), now)
        counter.maybe_emit(now, idle=not ids)
        if not ids and select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            return  # stdin closed: the parent is done with us


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.consumer_proc")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--redis", default=None, help="redis:// URL: consume a stream instead")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True, help="topic, or stream key with --redis")
    p.add_argument("--name", default="bench-consumer")
    p.add_argument("--strategy", default="range")
    p.add_argument("--session-timeout-ms", type=int, default=45000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=3000)
    p.add_argument("--max-poll-records", type=int, default=500)
    p.add_argument("--report", choices=("batches", "count"), default="batches")
    p.add_argument("--commit", action="store_true", help="commit (XACK) after every poll")
    p.add_argument("--report-commits", action="store_true",
                   help="a ``commit`` line (start t0, end t) per successful commit (groupwire)")
    args = p.parse_args(argv)
    if args.redis:
        _run_redis(args)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            try:
                import uvloop

                uvloop.run(_run_groupwire(args))
            except ImportError:
                asyncio.run(_run_groupwire(args))


# --- the parent's handle --------------------------------------------------------------------


class ConsumerProc:
    """A running child: its reports as they arrive, and waiting on them (no sleeps)."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process,
                 notify: asyncio.Event | None = None) -> None:
        self.name = name
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._notify = notify
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, name: str, *args: str,
                    notify: asyncio.Event | None = None) -> ConsumerProc:
        """Start a child; ``notify`` (shared by several) is set on each of its reports."""
        proc = await asyncio.create_subprocess_exec(
            *python_module_cmd("bench.consumer_proc", "--name", name, *args),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=repo_env(), cwd=REPO_ROOT)
        return cls(name, proc, notify)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))
                self._changed.set()
                if self._notify is not None:
                    self._notify.set()
        self._changed.set()
        if self._notify is not None:
            self._notify.set()

    async def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool],
                       timeout: float = 60) -> None:
        async def loop() -> None:
            while not predicate(self.events):
                self._changed.clear()
                if self._reader.done():
                    raise RuntimeError(f"consumer {self.name} exited: {self.events[-3:]}")
                await self._changed.wait()
        await asyncio.wait_for(loop(), timeout)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")

    def owned(self) -> set[int]:
        """Partitions held according to its last assigned/revoked/lost reports."""
        held: set[int] = set()
        for e in self.events:
            if e["e"] == "assigned":
                held |= set(e["p"])
            elif e["e"] in ("revoked", "lost"):
                held -= set(e["p"])
            elif e["e"] == "left":
                held.clear()
        return held

    def started(self) -> float | None:
        """When it began consuming: its first assignment (groupwire) or its go (Redis)."""
        return next((float(e["t"]) for e in self.events if e["e"] in ("assigned", "started")
                     and (e["e"] == "started" or e["p"])), None)

    def progress(self) -> dict[str, Any]:
        last = [e for e in self.events if e["e"] == "progress"]
        return last[-1] if last else {"n": 0, "first": 0.0, "last": 0.0}

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def stop_all(procs: list[ConsumerProc]) -> None:
    await asyncio.gather(*(p.stop() for p in procs))


class Group:
    """Consumer processes of one group, and the questions benches ask about them."""

    def __init__(self, address: str, topic: str, group: str, partitions: int,
                 *extra: str) -> None:
        self.address, self.topic, self.group = address, topic, group
        self.partitions = partitions
        self.extra = extra
        self.procs: list[ConsumerProc] = []
        self.notify = asyncio.Event()
        self._started = 0

    async def add(self, *, go: bool = True) -> ConsumerProc:
        """Start one more member, connected; it joins on ``go`` (now, or later)."""
        proc = await ConsumerProc.start(
            f"c{self._started}", "--bootstrap", self.address, "--group", self.group,
            "--topic", self.topic, "--report", "batches", "--commit", *self.extra,
            notify=self.notify)
        self._started += 1
        self.procs.append(proc)
        await proc.wait_for(lambda ev: any(e["e"] == "ready" for e in ev))
        if go:
            proc.send("go")
        return proc

    async def until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``done()`` holds, checked again on every report of any member."""
        deadline = time.monotonic() + timeout
        while True:
            self.notify.clear()
            if done():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.notify.wait(), left)

    def owners(self) -> dict[int, ConsumerProc]:
        return {p: proc for proc in self.procs for p in proc.owned()}

    def settled(self) -> bool:
        """Every partition owned once, and consumed by its owner since its assignment."""
        seen: set[int] = set()
        for proc in self.procs:
            owned = proc.owned()
            if owned & seen:
                return False
            seen |= owned
            if not owned:
                continue
            last = max((i for i, e in enumerate(proc.events) if e["e"] == "assigned"),
                       default=None)
            if last is None:
                return False
            consumed = {int(p) for e in proc.events[last:] if e["e"] == "batch"
                        for p in e["p"]}
            if not owned <= consumed:
                return False
        return seen == set(range(self.partitions))

    def consumed_at(self) -> dict[int, list[float]]:
        """When each partition had records consumed, by any member, in time order."""
        out: dict[int, list[float]] = {}
        for proc in self.procs:
            for e in proc.events:
                if e["e"] == "batch":
                    for p in e["p"]:
                        out.setdefault(int(p), []).append(float(e["t"]))
        for times in out.values():
            times.sort()
        return out

    async def stop(self) -> None:
        await stop_all(self.procs)


if __name__ == "__main__":
    main()
