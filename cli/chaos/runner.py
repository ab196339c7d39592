"""Run a chaos scenario: broker, producer, consumer processes, faults, verdict."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from groupwire.cli.chaos.report_hook import write_rebalance_report
from groupwire.cli.chaos.schedule import Fault, draw
from groupwire.cli.chaos.verdict import Verdict, judge, read_journals
from groupwire.client.admin import Admin
from groupwire.client.errors import GroupwireError
from groupwire.client.producer import Producer

TOPIC = "chaos"
GROUP = "chaos-group"


@dataclass
class ChaosOptions:
    bootstrap: str | None = None
    consumers: int = 6
    faults: int = 20
    records: int = 5000
    broker_faults: int = 0
    seed: int = 0
    session_timeout_ms: int = 3000
    partitions: int = 12
    rate: int = 500
    report: Path | None = None
    rebalance_report: bool = False


@dataclass
class Member:
    name: str
    journal: Path
    proc: asyncio.subprocess.Process
    state: str = "alive"  # alive, zombie, dead


@dataclass
class Run:
    opts: ChaosOptions
    workdir: Path
    console: Console
    bootstrap: str = ""
    broker: asyncio.subprocess.Process | None = None
    broker_port: int = 0
    members: list[Member] = field(default_factory=list)
    faulted: dict[str, float] = field(default_factory=dict)
    zombies: set[str] = field(default_factory=set)
    fault_times: list[float] = field(default_factory=list)
    acked: set[tuple[int, int]] = field(default_factory=set)
    samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    drains: list[asyncio.Future[None]] = field(default_factory=list)


async def run_chaos(opts: ChaosOptions, console: Console) -> Verdict:
    with contextlib.ExitStack() as stack:
        workdir = opts.report or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="groupwire-chaos-")))
        workdir.mkdir(parents=True, exist_ok=True)
        run = Run(opts, workdir, console)
        try:
            return await _scenario(run)
        finally:
            await _teardown(run)


async def _scenario(run: Run) -> Verdict:
    opts = run.opts
    started_ms = time.time_ns() // 1_000_000
    if opts.bootstrap is None:
        run.broker_port = _free_port()
        await _start_broker(run)
    else:
        run.bootstrap = opts.bootstrap
    async with Admin(run.bootstrap, client_id="chaos-admin") as admin:
        await admin.create_topics([TOPIC], num_partitions=opts.partitions, exist_ok=True)
    run.console.print(f"chaos: seed {opts.seed}, {opts.consumers} consumers, "
                      f"{opts.faults} consumer faults, {opts.broker_faults} broker kills, "
                      f"{opts.records} records on {opts.partitions} partitions")
    for _ in range(opts.consumers):
        await _add_member(run)
    window_s = opts.records / opts.rate
    schedule = draw(opts.seed, opts.faults, opts.broker_faults, window_s)
    rng = random.Random(opts.seed + 1)
    sampler = asyncio.ensure_future(_sample_offsets(run))
    t0 = time.monotonic()
    producer = asyncio.ensure_future(_produce(run))
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=run.console, transient=False) as progress:
        task = progress.add_task("faults", total=len(schedule), info="")
        for fault in schedule:
            delay = t0 + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's clock: faults happen at set times
            await _inject(run, fault, rng)
            progress.update(task, advance=1, info=run.log[-1] if run.log else "")
        await producer
        end_task = progress.add_task("consumed", total=len(run.acked), info="")
        await _wait_consumed(run, progress, end_task)
    end_t = time.time()
    sampler.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sampler
    await _stop_members(run)
    # session timeout (a dead member is noticed) + the rebalance bound: one more session
    # timeout (members a restarted broker reloads get a fresh one) and 10 s to rejoin
    bound = (opts.session_timeout_ms * 2 + 10_000) / 1000
    verdict = judge(read_journals(run.workdir), run.acked, run.faulted, run.zombies,
                    run.samples, opts.partitions, run.fault_times, end_t, bound)
    _print(run, verdict)
    if opts.report is not None:
        (opts.report / "verdict.json").write_text(json.dumps(
            {"seed": opts.seed, "faults": run.log, **verdict.as_dict()}, indent=2))
        if opts.rebalance_report:  # the broker still serves: the job reads its events
            await write_rebalance_report(run.bootstrap, opts.report, GROUP, run.console,
                                         since_ms=started_ms)
    return verdict


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _start_broker(run: Run) -> None:
    data = run.workdir / "broker-data"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "groupwire", "broker", "--host", "127.0.0.1",
        "--port", str(run.broker_port),
        "--data-dir", str(data), "--metrics-port", "-1", "--fsync", "always",
        "--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "100",
        "--connection-loss-grace-ms", "300", "--log-format", "json", "--log-level", "info",
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL)
    assert proc.stderr is not None
    log_path = run.workdir / "broker.log"
    with log_path.open("ab") as log:
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            if not line:
                raise RuntimeError(f"broker exited while starting; see {log_path}")
            log.write(line)
            if b'"broker_started"' in line:
                break

    async def drain() -> None:
        assert proc.stderr is not None
        with log_path.open("ab") as log:
            async for line in proc.stderr:
                log.write(line)

    run.drains.append(asyncio.ensure_future(drain()))
    run.broker = proc
    run.bootstrap = f"127.0.0.1:{run.broker_port}"


async def _add_member(run: Run) -> Member:
    name = f"member-{len(run.members) + 1:02d}"
    journal = run.workdir / f"{name}.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "groupwire.cli.chaos.member", "--bootstrap", run.bootstrap,
        "--group", GROUP, "--topic", TOPIC, "--name", name, "--journal", str(journal),
        "--session-timeout-ms", str(run.opts.session_timeout_ms),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    member = Member(name, journal, proc)
    run.members.append(member)
    return member


async def _inject(run: Run, fault: Fault, rng: random.Random) -> None:
    now = time.time()
    alive = [m for m in run.members if m.state == "alive"]
    kind = fault.kind
    if kind == "broker-kill":
        if run.broker is None:
            return
        run.broker.send_signal(signal.SIGKILL)
        await run.broker.wait()
        run.fault_times.append(now)
        await _start_broker(run)
        run.log.append(f"broker killed and restarted ({time.time() - now:.1f} s)")
        return
    if kind in ("kill", "zombie", "remove", "restart") and len(alive) <= 1:
        kind = "add"  # keep one consumer at least
    target = alive[int(fault.pick * len(alive))] if alive else None
    if kind == "add" or target is None:
        member = await _add_member(run)
        run.log.append(f"added {member.name}")
        return
    run.fault_times.append(now)
    run.faulted.setdefault(target.journal.stem, now)
    if kind in ("kill", "restart"):
        target.proc.send_signal(signal.SIGKILL)
        target.state = "dead"
        if kind == "restart":
            member = await _add_member(run)
            run.log.append(f"killed {target.name}, started {member.name}")
        else:
            run.log.append(f"killed {target.name}")
    elif kind == "zombie":
        target.proc.send_signal(signal.SIGSTOP)
        target.state = "zombie"
        run.zombies.add(target.journal.stem)
        pause = run.opts.session_timeout_ms / 1000 + rng.uniform(0.5, 2.0)
        asyncio.get_running_loop().call_later(pause, _resume, target)
        run.log.append(f"froze {target.name} for {pause:.1f} s")
    elif kind == "remove":
        target.proc.send_signal(signal.SIGTERM)
        target.state = "dead"
        run.log.append(f"stopped {target.name}")


def _resume(member: Member) -> None:
    with contextlib.suppress(ProcessLookupError):
        member.proc.send_signal(signal.SIGCONT)
    member.state = "alive"


async def _produce(run: Run) -> None:
    opts = run.opts
    sent = 0
    t0 = time.monotonic()
    async with Producer(run.bootstrap, client_id="chaos-producer", linger_ms=5,
                        request_timeout_ms=30000) as producer:
        while sent < opts.records:
            chunk = range(sent, min(sent + 50, opts.records))
            futures = [await producer.send(TOPIC, f"r{i}".encode(), key=f"k{i}".encode())
                       for i in chunk]
            for fut in futures:
                try:
                    meta = await fut
                except GroupwireError:
                    continue  # not acknowledged: not counted, it may or may not be in the log
                run.acked.add((meta.partition, meta.offset))
            sent += len(chunk)
            ahead = sent / opts.rate - (time.monotonic() - t0)
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the producer


async def _sample_offsets(run: Run) -> None:
    """Committed offsets every 200 ms, to check that none ever goes backwards."""
    while True:
        try:
            async with Admin(run.bootstrap, client_id="chaos-monitor",
                             request_timeout_ms=2000) as admin:
                while True:
                    offsets = await admin.list_consumer_group_offsets(GROUP)
                    run.samples.append((time.time(), {
                        tp.partition: om.offset for tp, om in offsets.items()
                        if om.offset >= 0}))
                    await asyncio.sleep(0.2)  # the sampling period
        except asyncio.CancelledError:
            raise
        except Exception:  # the broker is being killed: sample again once it is back
            await asyncio.sleep(0.2)


async def _wait_consumed(run: Run, progress: Progress, task: object) -> None:
    deadline = time.monotonic() + 60 + run.opts.session_timeout_ms / 1000 * 3
    while time.monotonic() < deadline:
        seen = {(int(p), int(o)) for e in read_journals(run.workdir)
                if e["event"] == "records" for p, o in e["records"]}  # type: ignore[attr-defined]
        done = len(run.acked & seen)
        progress.update(task, completed=done)  # type: ignore[arg-type]
        if done == len(run.acked):
            return
        await asyncio.sleep(0.5)  # the journals are files: re-read them periodically


async def _stop_members(run: Run) -> None:
    for m in run.members:
        if m.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                if m.state == "zombie":
                    m.proc.send_signal(signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
    for m in run.members:
        try:
            await asyncio.wait_for(m.proc.wait(), 15)
        except TimeoutError:
            m.proc.kill()
            await m.proc.wait()


async def _teardown(run: Run) -> None:
    for m in run.members:
        if m.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                m.proc.kill()
            await m.proc.wait()
    if run.broker is not None and run.broker.returncode is None:
        run.broker.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(run.broker.wait(), 20)
        except TimeoutError:
            run.broker.kill()
    for drain in run.drains:
        drain.cancel()


def _print(run: Run, v: Verdict) -> None:
    table = Table(title=f"chaos verdict (seed {run.opts.seed})")
    table.add_column("check")
    table.add_column("result")
    table.add_row("acknowledged records", str(v.produced))
    table.add_row("processed (distinct)", str(v.processed))
    table.add_row("lost", str(len(v.lost)))
    table.add_row("duplicates (a consumer died before committing)",
                  f"{v.duplicates} ({len(v.unexplained_duplicates)} unexplained)")
    table.add_row("committed offsets went backwards", str(len(v.offsets_backwards)))
    table.add_row("partition owned twice in a generation", str(len(v.double_owned)))
    table.add_row("zombie fetches / commits refused after the freeze",
                  f"{v.zombie_fetches_refused} / {v.zombie_commits_refused} "
                  f"({len(v.zombie_accepted)} accepted; {v.zombie_probes} probes, "
                  f"{v.zombie_probes_unanswered} unanswered)")
    table.add_row("slowest return to full ownership",
                  f"{v.slowest_recovery_s:.2f} s (bound {v.recovery_bound_s:.1f} s)")
    longest = max(v.longest_unowned_s.items(), key=lambda x: x[1], default=(None, 0.0))
    table.add_row("longest time a partition had no owner",
                  f"{longest[1]:.2f} s (partition {longest[0]})")
    run.console.print(table)
    for violation in v.violations:
        run.console.print(f"[red]violation[/]: {violation}")
    if not v.violations:
        run.console.print("[green]no violation[/]")
