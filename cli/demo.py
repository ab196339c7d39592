"""``groupwire demo``: a broker, a producer and three consumers; one consumer is killed.

It shows what the broker is for: the survivors take over the dead consumer's partitions
after the reconnect grace (not the whole session timeout), every rebalance is explained as
it happens (read live from ``__group_events``), and at the end every produced message was
consumed. Consumers are separate processes so the kill is a real SIGKILL.

The consumers run in sessions of their own, so a Ctrl-C meant for the demo does not reach
them: the demo stops them itself (SIGTERM, then SIGKILL). Each also stops when its stdin,
a pipe from the demo, closes: no consumer outlives the demo, however it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from rich.console import Console

from groupwire.cli.arguments import (
    add_security_flags,
    parse_address,
    positive_int,
    security_from_properties,
    security_properties,
)
from groupwire.cli.child_security import child_env, open_connection
from groupwire.cli.errors import CliError
from groupwire.cli.output import console
from groupwire.cli.running import run_sdk
from groupwire.client.connection import Connection
from groupwire.client.errors import GroupwireError
from groupwire.client.producer import Producer
from groupwire.client.security import SecurityConfig
from groupwire.protocol.batches import decode_records
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)

TOPIC = "demo-orders"
GROUP = "demo-billing"
STOP_TIMEOUT_S = 15.0
"""How long a consumer may take to leave its group after SIGTERM before it is killed."""


@dataclass
class DemoOptions:
    messages: int = 3000
    partitions: int = 6
    consumers: int = 3
    rate: int = 500
    data_dir: Path | None = None
    session_timeout_ms: int = 10000
    bootstrap: str | None = None
    """An existing broker to run against; None starts one of the demo's own."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """How the demo's clients reach ``bootstrap`` (its own broker is plaintext)."""
    client_properties: dict[str, str] = field(default_factory=dict, repr=False)
    """``security`` as Kafka client properties: the consumer processes build their own."""


@dataclass(frozen=True)
class _Target:
    """Where the scenario runs: the broker's address and the names it uses there."""

    host: str
    port: int
    topic: str
    group: str
    grace_ms: int | None
    """The broker's connection-loss grace, when the demo knows it (its own broker)."""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class _Signals:
    """What the event watcher and the consumers' readers tell the scenario."""

    stable: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    killed_at: float | None = None
    session_timeout_ms: int = 0
    grace_ms: int | None = None


@dataclass
class ConsumerProc:
    name: str
    proc: asyncio.subprocess.Process
    seen: set[tuple[int, int]] = field(default_factory=set)
    alive: bool = True


async def run_demo(opts: DemoOptions, console: Console) -> int:
    """Run the scenario on ``opts.bootstrap`` or on a broker of its own; 0 if every
    produced message was consumed."""
    if opts.bootstrap is not None:
        host, port = parse_address(opts.bootstrap)
        suffix = uuid.uuid4().hex[:8]  # a broker in use: never mix with an earlier run
        target = _Target(host, port, f"{TOPIC}-{suffix}", f"{GROUP}-{suffix}", None)
        console.print(f"[bold]broker[/] at {target.bootstrap}")
        return await _scenario(target, opts, console)
    from groupwire.broker.config import BrokerSettings  # the demo's own broker only
    from groupwire.broker.server import Broker, StartupError

    with contextlib.ExitStack() as stack:
        data_dir = opts.data_dir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="groupwire-demo-")))
        broker = Broker(BrokerSettings(
            host="127.0.0.1", port=0, data_dir=data_dir, metrics_port=-1,
            group_initial_rebalance_delay_ms=1000, log_level="error"))
        try:
            await broker.start()
        except StartupError as exc:
            raise CliError(str(exc)) from exc
        try:
            suffix = "" if opts.data_dir is None else f"-{uuid.uuid4().hex[:8]}"
            target = _Target("127.0.0.1", broker.port, TOPIC + suffix, GROUP + suffix,
                             broker.settings.connection_loss_grace_ms)
            console.print(f"[bold]broker[/] listening on {target.bootstrap} "
                          f"(data in {data_dir})")
            return await _scenario(target, opts, console)
        finally:
            await broker.close()


async def _scenario(target: _Target, opts: DemoOptions, console: Console) -> int:
    signals = _Signals(session_timeout_ms=opts.session_timeout_ms, grace_ms=target.grace_ms)
    try:
        admin = await open_connection(target.host, target.port, opts.security,
                                      client_id="demo-admin", timeout=5)
    except OSError as exc:
        raise CliError(f"cannot reach a broker at {target.bootstrap}: "
                       f"{exc.strerror or exc or type(exc).__name__}") from exc
    except GroupwireError as exc:  # refused credentials, a TLS listener spoken to in plain
        raise CliError(f"cannot use the broker at {target.bootstrap}: {exc}") from exc
    consumers: list[ConsumerProc] = []
    readers: list[asyncio.Future[None]] = []
    watcher: asyncio.Future[None] | None = None
    produced: dict[int, int] = {}
    interrupted = False
    try:
        created = await admin.send(CreateTopicsRequest(topics=[
            CreatableTopic(name=target.topic, num_partitions=opts.partitions)]),
            response_type=CreateTopicsResponse)
        for result in created.topics:
            if result.error_code != ErrorCode.NONE:
                raise CliError(f"cannot create topic {target.topic!r}: "
                               f"{ErrorCode(result.error_code).name}: {result.error_message}")
        events_from = await _end_offset(admin, "__group_events", 0)
        console.print(f"topic [cyan]{target.topic}[/] with {opts.partitions} partitions; "
                      f"{opts.consumers} consumers join group [cyan]{target.group}[/]")
        for i in range(opts.consumers):
            consumers.append(await _spawn(f"consumer-{i + 1}", target, opts))
        readers = [asyncio.ensure_future(_read_output(c, signals)) for c in consumers]
        watcher = asyncio.ensure_future(_watch_events(target, events_from, console,
                                                     signals, opts.security))
        await _wait_stable(watcher, opts.consumers, signals)
        await _produce(target, opts, consumers, console, signals, produced)
        await _wait_consumed(consumers, produced, console, signals)
    except asyncio.CancelledError:  # Ctrl-C or SIGTERM
        interrupted = True
        raise
    finally:
        if watcher is not None:
            watcher.cancel()  # the consumers' shutdown is not part of the story
        await _stop_consumers(consumers)
        for r in readers:
            r.cancel()
        await admin.close()
        if interrupted:
            console.print()
            console.print(f"[bold]interrupted[/]: produced {sum(produced.values())} of "
                          f"{opts.messages}, consumed "
                          f"{len(set().union(*(c.seen for c in consumers)))} distinct; "
                          "losses are checked only when the run ends by itself")
    total = sum(produced.values())
    consumed = set().union(*(c.seen for c in consumers))
    twice = sum(len(c.seen) for c in consumers) - len(consumed)
    missing = total - len(consumed)
    console.print()
    console.print(f"[bold]summary[/]: produced {total}, consumed {len(consumed)} distinct, "
                  f"{twice} consumed twice (processed by the killed consumer but not yet "
                  f"committed), {missing} lost")
    if missing:
        console.print("[red]some messages were never consumed[/]")
        return 1
    console.print("[green]every produced message was consumed[/]")
    return 0


async def _spawn(name: str, target: _Target, opts: DemoOptions) -> ConsumerProc:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "groupwire.cli.demo_consumer", "--bootstrap", target.bootstrap,
        "--group", target.group, "--topic", target.topic, "--name", name,
        "--session-timeout-ms", str(opts.session_timeout_ms), "--stop-on-stdin-eof",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
        # the settings (a password among them) go in the environment, never in argv
        env={**os.environ, **child_env(opts.client_properties), "PYTHONUNBUFFERED": "1"})
    return ConsumerProc(name, proc)


async def _stop_consumers(consumers: list[ConsumerProc]) -> None:
    """SIGTERM (each leaves the group), then SIGKILL what is still running; all reaped.

    Shielded: a second Ctrl-C must not leave a consumer behind half-stopped.
    """
    async def stop_all() -> None:
        for c in consumers:
            if c.alive and c.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(c.proc.wait()) for c in consumers]
        if waits:
            await asyncio.wait(waits, timeout=STOP_TIMEOUT_S)
        for c in consumers:
            if c.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.kill()
                await c.proc.wait()

    if consumers:
        await asyncio.shield(asyncio.ensure_future(stop_all()))


async def _read_output(consumer: ConsumerProc, signals: _Signals) -> None:
    assert consumer.proc.stdout is not None
    async for line in consumer.proc.stdout:
        with contextlib.suppress(ValueError):
            for partition, offset in json.loads(line)["records"]:
                consumer.seen.add((partition, offset))
        signals.progress.set()


async def _end_offset(conn: Connection, topic: str, partition: int) -> int:
    resp = await conn.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsPartition(partition_index=partition,
                                                     timestamp=-1)])]),
        response_type=ListOffsetsResponse)
    return resp.topics[0].partitions[0].offset


async def _watch_events(target: _Target, offset: int, console: Console,
                        signals: _Signals, security: SecurityConfig) -> None:
    """Print the group's events as the broker writes them (a long-poll fetch loop)."""
    conn = await open_connection(target.host, target.port, security,
                                 client_id="demo-events", timeout=10)
    members: set[str] = set()
    try:
        while True:
            resp = await conn.send(FetchRequest(max_wait_ms=1000, topics=[FetchTopic(
                topic="__group_events", partitions=[FetchPartition(
                    partition=0, fetch_offset=offset)])]), response_type=FetchResponse)
            data = resp.responses[0].partitions[0].records
            for rec in decode_records(data, min_offset=offset):
                offset = rec.offset + 1
                assert rec.value is not None
                event = msgpack.unpackb(rec.value, raw=False)
                if event["group_id"] == target.group:
                    _show(event, members, console, signals)
    finally:
        await conn.close()


def _show(event: dict[str, object], members: set[str], console: Console,
          signals: _Signals) -> None:
    kind = event["type"]
    who = str(event.get("member_id") or "")[:24]
    parts = _fmt_partitions(event.get("partitions"))
    if kind == "member_joined":
        members.add(str(event["member_id"]))
        console.print(f"  [green]+ joined[/]  {who}")
    elif kind in ("member_left", "member_expired", "poll_interval_expired"):
        members.discard(str(event["member_id"]))
        console.print(f"  [red]- removed[/] {who}: {event.get('reason')} (owned {parts})")
    elif kind == "connection_lost":
        console.print(f"  [yellow]! connection lost[/] {who}, owned {parts}")
    elif kind == "rebalance_started":
        console.print(f"  [bold]rebalance started[/]: {event.get('reason')}")
    elif kind == "rebalance_completed":
        console.print(f"  [bold]rebalance done[/] in {event.get('duration_ms')} ms: "
                      f"generation {event.get('generation_id')}, moved {parts}")
        killed_at = signals.killed_at
        if killed_at is not None:
            since = (time.monotonic() - killed_at) * 1000
            grace = ("" if signals.grace_ms is None
                     else f", connection-loss grace {signals.grace_ms} ms")
            console.print(f"  [bold green]failover[/]: the survivors own the dead consumer's "
                          f"partitions {since:.0f} ms after the kill (session timeout "
                          f"{signals.session_timeout_ms} ms{grace})")
            signals.killed_at = None
        signals.stable.put_nowait(len(members))


def _fmt_partitions(value: object) -> str:
    if not value:
        return "nothing"
    assert isinstance(value, list)
    return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in value)


async def _wait_stable(watcher: asyncio.Future[None], members: int,
                       signals: _Signals) -> None:
    while True:
        getter: asyncio.Future[Any] = asyncio.ensure_future(signals.stable.get())
        waiting: list[asyncio.Future[Any]] = [getter, watcher]
        done, _ = await asyncio.wait(waiting, timeout=60,
                                     return_when=asyncio.FIRST_COMPLETED)
        if watcher in done:
            watcher.result()
        if getter not in done:
            getter.cancel()
            raise RuntimeError("the group did not form within 60 s")
        if getter.result() >= members:
            return


async def _produce(target: _Target, opts: DemoOptions, consumers: list[ConsumerProc],
                   console: Console, signals: _Signals, produced: dict[int, int]) -> None:
    """Produce ``opts.messages``, counting acknowledged ones per partition in ``produced``
    as they come (an interrupted run reports how far it got)."""
    victim = consumers[1] if len(consumers) > 1 else None
    async with Producer(target.bootstrap, client_id="demo-producer",
                        linger_ms=5, security=opts.security) as producer:
        t0 = time.monotonic()
        pending = []
        for i in range(opts.messages):
            pending.append(await producer.send(
                target.topic, f"order {i}".encode(), key=f"customer-{i % 97}".encode()))
            if victim is not None and i == opts.messages // 3:
                console.print(f"[bold red]killing {victim.name}[/] (SIGKILL, pid "
                              f"{victim.proc.pid}) after {i} messages")
                victim.proc.send_signal(signal.SIGKILL)
                victim.alive = False
                signals.killed_at = time.monotonic()
            if len(pending) >= 50:
                for meta in await asyncio.gather(*pending):
                    produced[meta.partition] = produced.get(meta.partition, 0) + 1
                pending.clear()
                ahead = (i + 1) / opts.rate - (time.monotonic() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)  # pacing the producer, not waiting for an event
        for meta in await asyncio.gather(*pending):
            produced[meta.partition] = produced.get(meta.partition, 0) + 1
    console.print(f"produced {opts.messages} messages")


async def _wait_consumed(consumers: list[ConsumerProc], produced: dict[int, int],
                         console: Console, signals: _Signals) -> None:
    wanted = {(p, o) for p, n in produced.items() for o in range(n)}
    progress = signals.progress
    deadline = time.monotonic() + 60
    while not wanted <= set().union(*(c.seen for c in consumers)):
        progress.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            console.print("[red]timed out waiting for the consumers[/]")
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await progress.wait()


def register(subparsers: Any) -> None:
    """Add ``demo`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser(
        "demo", help="a broker, a producer and three consumers; one is killed",
        description="Start a broker on embedded storage (or use --bootstrap), produce to a "
        "topic consumed by a group of consumer processes, SIGKILL one of them and show the "
        "rebalance as it happens; exit 0 if nothing was lost.")
    add_arguments(p)
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from groupwire.broker.logs import configure_logging

    configure_logging("console", "error")
    opts = options_from(args)  # a password prompt, if any, before anything starts
    return run_sdk(lambda stop: run_demo(opts, console()))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DemoOptions()
    parser.add_argument("--messages", type=positive_int, default=d.messages,
                        help=f"messages to produce (default {d.messages})")
    parser.add_argument("--partitions", type=positive_int, default=d.partitions,
                        help=f"partitions of the demo topic (default {d.partitions})")
    parser.add_argument("--consumers", type=positive_int, default=d.consumers,
                        help=f"consumer processes in the group (default {d.consumers})")
    parser.add_argument("--rate", type=positive_int, default=d.rate,
                        help=f"messages per second (default {d.rate})")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                       help="run against this broker instead of starting one; the demo "
                       "uses a topic and a group of its own, named uniquely")
    where.add_argument("--data-dir", type=Path, default=None,
                       help="storage of the demo's own broker (default: a temporary "
                       "directory)")
    parser.add_argument("--session-timeout-ms", type=positive_int,
                        default=d.session_timeout_ms,
                        help=f"consumers' session timeout (default {d.session_timeout_ms})")
    add_security_flags(parser)  # for a secured --bootstrap; the consumers get them too


def options_from(args: argparse.Namespace) -> DemoOptions:
    """The demo's options; security settings other than plaintext need --bootstrap (the
    demo's own broker listens in plaintext), a CliError otherwise."""
    props = security_properties(args)
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT" and args.bootstrap is None:
        raise CliError(f"security protocol {protocol}: the demo's own broker listens in "
                       "plaintext; pass --bootstrap with a secured broker's listener")
    return DemoOptions(messages=args.messages, partitions=args.partitions,
                       consumers=args.consumers, rate=args.rate, data_dir=args.data_dir,
                       session_timeout_ms=args.session_timeout_ms, bootstrap=args.bootstrap,
                       security=security_from_properties(props), client_properties=props)
