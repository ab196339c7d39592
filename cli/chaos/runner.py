"""Run a chaos scenario: broker (or cluster), producer, consumer processes, faults, verdict.

Every process the run starts is a :mod:`~groupwire.cli.chaos.child`: its own process
group (killed on the way out, whatever ended the run) and a parent-death signal (for a
runner that is SIGKILLed itself). Every wait has a bound; a member's fatal error ends
the run at once with :class:`ChaosFatal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from groupwire.broker.storage.topic_store import LOGS_DIR
from groupwire.cli.chaos.child import start_child
from groupwire.cli.chaos.cluster import (
    LEASE_TTL_MS,
    ClusterStartError,
    LocalCluster,
    Node,
    Roles,
)
from groupwire.cli.chaos.fatal import FATAL_PREFIX, explain
from groupwire.cli.chaos.options import ChaosFatal, ChaosOptions
from groupwire.cli.chaos.replica_logs import (
    read_partition,
    rebalance_times,
    replicas_of,
    values,
)
from groupwire.cli.chaos.report_hook import write_rebalance_report
from groupwire.cli.chaos.schedule import Fault, draw
from groupwire.cli.chaos.verdict import (
    ClusterFindings,
    StoredBatch,
    Verdict,
    acked_missing,
    consume_gap,
    coordinator_rebalances,
    epoch_conflicts,
    judge,
    produce_gaps,
    read_journals,
    stored_twice,
)
from groupwire.cli.child_security import child_env, open_connection
from groupwire.cli.output import table
from groupwire.client.admin import Admin, TopicSpec
from groupwire.client.cluster import Cluster
from groupwire.client.errors import GroupwireError
from groupwire.client.producer import Producer
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import OffsetFetchRequest, OffsetFetchResponse

BROKER_START_S = 60.0
ADMIN_TIMEOUT_S = 30.0
TASK_EXIT_S = 5.0
"""How long a cancelled task of the run, or a signalled process, has to end."""
MEMBER_STOP_S = 15.0
REBALANCE_REPORT_S = 900.0
MAX_UNACKED = 2000
"""Records the producer may have in flight before it waits for answers."""
BROKER_ARGS = ["--metrics-port", "-1", "--fsync", "always",
               "--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "100",
               "--connection-loss-grace-ms", "300", "--log-format", "json", "--log-level", "info"]
"""What the run's own broker (or each broker of its cluster) is started with."""
CLUSTER_REPLICATION = 3
HEALTHY_WAIT_S = 15.0
"""How long a cluster fault waits for every replica to be in sync again before it strikes."""
BROKER_STOP_S = 15.0


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
    topic: str = ""
    group: str = ""
    bootstrap: str = ""
    broker: asyncio.subprocess.Process | None = None
    broker_port: int = 0
    members: list[Member] = field(default_factory=list)
    faulted: dict[str, float] = field(default_factory=dict)
    zombies: set[str] = field(default_factory=set)
    fault_times: list[float] = field(default_factory=list)
    acked: set[tuple[int, int]] = field(default_factory=set)
    produced: bool = False
    samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    cluster: LocalCluster | None = None
    acked_values: dict[tuple[int, int], bytes] = field(default_factory=dict)
    acked_at: dict[tuple[int, int], float] = field(default_factory=dict)
    produce_span: tuple[float, float] = (0.0, 0.0)
    member_fault_times: list[float] = field(default_factory=list)
    """Every consumer fault, additions included: each may start a rebalance."""
    coordinator_fault_times: list[float] = field(default_factory=list)
    tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    fatal: asyncio.Future[str] | None = None
    on_verdict: Callable[[dict[str, object]], object] | None = None
    deadline: float = 0.0
    """time.monotonic() past which nothing waits any more (set once production starts)."""
    sure_zombie: Member | None = None
    """The schedule's ``sure`` zombie until its probe is journaled: no fault strikes it,
    and broker faults wait (:func:`_wait_for_sure_probe`)."""
    sure_probed: asyncio.Event = field(default_factory=asyncio.Event)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """A task of the run: cancelled and awaited (with a bound) on the way out."""
        task: asyncio.Future[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        return task

    def processes(self) -> list[asyncio.subprocess.Process]:
        procs = [m.proc for m in self.members]
        if self.cluster is not None:
            procs += self.cluster.processes()
        return [*procs, self.broker] if self.broker is not None else procs


def names(seed: int) -> tuple[str, str]:
    """A topic and a group of one run: the seed, the time and the process make them unique."""
    stamp = f"{seed}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return f"chaos-{stamp}", f"chaos-group-{stamp}"


async def run_chaos(opts: ChaosOptions, console: Console,
                    on_verdict: Callable[[dict[str, object]], object] | None = None) -> Verdict:
    """The run's verdict; ChaosFatal when it cannot go on. No process of it outlives it.

    ``on_verdict`` gets the run's :func:`summary` as soon as the verdict is known."""
    with contextlib.ExitStack() as stack:
        workdir = opts.report or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="groupwire-chaos-")))
        workdir.mkdir(parents=True, exist_ok=True)
        topic, group = names(opts.seed)
        run = Run(opts, workdir, console, topic=opts.topic or topic, group=opts.group or group,
                  on_verdict=on_verdict)
        run.fatal = asyncio.get_running_loop().create_future()
        scenario = run.spawn(_scenario(run))
        try:
            racing: list[asyncio.Future[Any]] = [scenario, run.fatal]
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if run.fatal.done():
                raise ChaosFatal(run.fatal.result())
            verdict: Verdict = scenario.result()
            return verdict
        finally:
            try:
                await _teardown(run)
            finally:
                _kill_groups(run.processes())


async def _scenario(run: Run) -> Verdict:
    opts = run.opts
    started_ms = time.time_ns() // 1_000_000
    if opts.cluster:
        await _start_cluster(run)
    elif opts.bootstrap is None:
        run.broker_port = _free_port()
        await _start_broker(run)
    else:
        run.bootstrap = opts.bootstrap
    async with Admin(run.bootstrap, client_id="chaos-admin",
                     security=opts.security) as admin:
        try:
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                if opts.cluster:
                    await admin.create_topics([TopicSpec(run.topic, opts.partitions,
                                                         CLUSTER_REPLICATION)], exist_ok=True)
                else:
                    await admin.create_topics([run.topic], num_partitions=opts.partitions,
                                              exist_ok=True)
        except TimeoutError:
            raise ChaosFatal(f"the broker at {run.bootstrap} did not create the topic "
                             f"{run.topic!r} within {ADMIN_TIMEOUT_S:.0f} s") from None
    if run.cluster is not None and not await _healthy(run, ADMIN_TIMEOUT_S):
        raise ChaosFatal(f"the topic {run.topic!r} had no leader and full ISR on every "
                         f"partition within {ADMIN_TIMEOUT_S:.0f} s; see the brokers' logs in "
                         f"{run.workdir}")
    where = f"a cluster of {opts.cluster} brokers, " if opts.cluster else ""
    kills = "broker and etcd faults" if opts.cluster else "broker kills"
    run.console.print(f"chaos: seed {opts.seed}, {where}{opts.consumers} consumers, "
                      f"{opts.faults} consumer faults, {opts.broker_faults} {kills}, "
                      f"{opts.records} records on {opts.partitions} partitions of "
                      f"{run.topic}, group {run.group}, session timeout "
                      f"{opts.session_timeout} ms")
    for _ in range(opts.consumers):
        await _add_member(run)
    window_s = opts.records / opts.rate
    schedule = draw(opts.seed, opts.faults, opts.broker_faults, window_s,
                    cluster=bool(opts.cluster))
    rng = random.Random(opts.seed + 1)
    t0 = time.monotonic()
    # the producer's window, twice over, then the wait for the last records to be read
    run.deadline = t0 + 2 * window_s + 60 + opts.session_timeout / 1000 * 3
    sampler = run.spawn(_sample_offsets(run))
    producer = run.spawn(_produce(run))
    # bars for a person at a terminal; piped, one line per fault that a log keeps
    bars = run.console.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=run.console, transient=False,
                  disable=not bars) as progress:
        task = progress.add_task("faults", total=len(schedule), info="")
        for n, fault in enumerate(schedule, 1):
            delay = t0 + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's clock: faults happen at set times
            await _inject(run, fault, rng)
            progress.update(task, advance=1, info=run.log[-1] if run.log else "")
            if not bars and run.log:
                run.console.print(f"fault {n}/{len(schedule)} at "
                                  f"{time.monotonic() - t0:.1f} s: {run.log[-1]}",
                                  highlight=False)
        await asyncio.wait([producer], timeout=max(0.0, t0 + 2 * window_s + 60 - time.monotonic()))
        if not producer.done():
            run.console.print("chaos: the producer did not finish in time; judging the "
                              f"{len(run.acked)} records acknowledged so far")
            await _settle([producer])
        run.produced = True
        end_task = progress.add_task("consumed", total=len(run.acked), info="")
        await _wait_consumed(run, progress, end_task)
    end_t = time.time()
    # the sampler ends by itself once every acknowledged record is committed; not later
    # than the run's deadline, and at once if the records were never all read
    await _settle([sampler], cancel=time.monotonic() >= run.deadline,
                  timeout=max(TASK_EXIT_S, run.deadline - time.monotonic()))
    await _stop_members(run)
    # session timeout (a dead member is noticed) + the rebalance bound: one more session
    # timeout (members a restarted broker reloads get a fresh one) and 10 s to rejoin
    bound = (opts.session_timeout * 2 + 10_000) / 1000
    events = read_journals(run.workdir)
    verdict = judge(events, run.acked, run.faulted, run.zombies,
                    run.samples, opts.partitions, run.fault_times, end_t, bound)
    if run.cluster is not None:
        await run.cluster.stop_brokers(BROKER_STOP_S)  # their logs are still from here on
        verdict.cluster = _cluster_findings(run, events, verdict)
        # a cluster's partition leaders serve a group's fetches unchecked (only the
        # coordinator knows the members, docs/design/cluster.md): not a violation there
        served = [x for x in verdict.zombie_accepted if x.startswith("fetch ")]
        verdict.zombie_accepted = [x for x in verdict.zombie_accepted if x not in served]
        verdict.cluster.zombie_fetches_served = len(served)
    elif run.broker is not None:  # production is over: nothing writes the topic's log
        data = run.workdir / "broker-data"
        verdict.log_duplicates = stored_twice({
            p: values(read_partition(data, run.topic, p) or [])
            for p in range(opts.partitions)})
    _print(run, verdict)
    if run.on_verdict is not None:
        run.on_verdict(summary(run, verdict))
    if opts.report is not None:
        (opts.report / "verdict.json").write_text(json.dumps(summary(run, verdict), indent=2))
        if opts.rebalance_report:  # the broker still serves: the job reads its events
            try:
                async with asyncio.timeout(REBALANCE_REPORT_S):
                    await write_rebalance_report(run.bootstrap, opts.report, run.group,
                                                 run.console, since_ms=started_ms,
                                                 security=opts.client_properties)
            except TimeoutError:
                run.console.print(f"[yellow]rebalance report skipped[/]: the job took longer "
                                  f"than {REBALANCE_REPORT_S:.0f} s")
    return verdict


async def _start_cluster(run: Run) -> None:
    cluster = LocalCluster(run.workdir, run.opts.cluster, BROKER_ARGS, run.spawn,
                           start_s=BROKER_START_S, security=run.opts.security)
    run.cluster = cluster
    try:
        await cluster.start()
    except ClusterStartError as exc:
        raise ChaosFatal(str(exc)) from None
    run.bootstrap = cluster.bootstrap


async def _healthy(run: Run, timeout: float) -> bool:
    """Wait (bounded) until every broker is registered and every partition of the run's
    topic has a leader and its whole ISR."""
    assert run.cluster is not None
    deadline = time.monotonic() + timeout
    while True:
        roles = await run.cluster.roles(run.topic, run.group)
        if roles.partitions and not roles.under_replicated and roles.controller >= 0:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)  # metadata has no watch for clients: poll it


def _cluster_findings(run: Run, events: list[dict[str, object]],
                      verdict: Verdict) -> ClusterFindings:
    """Read every replica's log from the stopped brokers' data dirs and judge them."""
    cluster = run.cluster
    assert cluster is not None
    dirs = {b.node_id: b.data for b in cluster.brokers}
    found = ClusterFindings(brokers=len(dirs))
    stored: dict[int, list[dict[int, bytes | None]]] = {}
    offsets = {int(d.name.rsplit("-", 1)[1]) for data in dirs.values()
               for d in (data / LOGS_DIR).glob("__consumer_offsets-*")}
    checked = [(run.topic, p) for p in range(run.opts.partitions)]
    checked += [("__consumer_offsets", p) for p in sorted(offsets)]
    checked.append(("__group_events", 0))
    for topic, p in checked:
        replicas = replicas_of(dirs, topic, p)
        found.epoch_conflicts += [f"{topic}-{p}: {x}" for x in epoch_conflicts(replicas)[:1]]
        if topic == run.topic:
            stored[p] = [values(batches) for batches in replicas.values()]
        elif topic == "__group_events":
            longest: list[StoredBatch] = max(replicas.values(), key=len, default=[])
            rebalances = rebalance_times(longest, run.group)
            found.rebalances = len(rebalances)
            window = LEASE_TTL_MS / 1000 + 2 * run.opts.session_timeout / 1000 + 2
            found.coordinator_rebalances = coordinator_rebalances(
                rebalances, run.coordinator_fault_times, run.member_fault_times, window)
    found.coordinator_faults = len(run.coordinator_fault_times)
    found.offset_samples = len(run.samples)
    found.acked_missing = acked_missing(run.acked_values, stored)
    # the longest replica of each partition: the leader's, or one that holds all of it
    verdict.log_duplicates = stored_twice({p: max(replicas, key=len, default={})
                                           for p, replicas in stored.items()})
    start, end = run.produce_span
    found.produce_unavailable_s = produce_gaps(
        ((t, p) for (p, _), t in run.acked_at.items()), run.opts.partitions, start, end)
    found.consume_unavailable_s = consume_gap(events, run.acked_at)
    return found


def summary(run: Run, verdict: Verdict) -> dict[str, object]:
    """The run as one JSON object: what ran, what happened, the verdict."""
    return {"seed": run.opts.seed, "topic": run.topic, "group": run.group,
            "bootstrap": run.bootstrap, "session_timeout_ms": run.opts.session_timeout,
            "faults": run.log, **verdict.as_dict()}


async def _settle(tasks: Iterable[asyncio.Future[Any]], *, cancel: bool = True,
                  timeout: float = TASK_EXIT_S) -> None:
    """Let ``tasks`` end (cancelling them first when asked) within ``timeout`` each round.

    Never waits past the bound, even for a task that swallows its cancellation, and never
    swallows the caller's own cancellation (asyncio.wait does not cancel what it waits for).
    """
    pending = [t for t in tasks if not t.done()]
    if pending and not cancel:
        _, still = await asyncio.wait(pending, timeout=timeout)
        pending = list(still)
    if pending:
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=TASK_EXIT_S)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: a crash here is not the run's result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _start_child(run: Run, module: str, *args: str,
                       stdout: int, stderr: int) -> asyncio.subprocess.Process:
    """``python -m module args`` in its own process group, dying with this process, with
    the run's security settings in its environment (a password is never an argument)."""
    return await start_child(module, *args, stdout=stdout, stderr=stderr,
                             env=child_env(run.opts.client_properties))


async def _start_broker(run: Run) -> None:
    data = run.workdir / "broker-data"
    proc = await _start_child(
        run, "groupwire", "broker", "--host", "127.0.0.1",
        "--port", str(run.broker_port),
        "--data-dir", str(data), *BROKER_ARGS,
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL)
    run.broker = proc
    assert proc.stderr is not None
    log_path = run.workdir / "broker.log"
    deadline = time.monotonic() + BROKER_START_S
    with log_path.open("ab") as log:
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    line = await proc.stderr.readline()
            except TimeoutError:
                raise ChaosFatal(f"the run's broker did not start within {BROKER_START_S:.0f} "
                                 f"s; see {log_path}") from None
            if not line:
                raise ChaosFatal(f"the run's broker exited while starting; see {log_path}")
            log.write(line)
            if b'"broker_started"' in line:
                break

    async def drain() -> None:
        assert proc.stderr is not None
        with log_path.open("ab") as log:
            async for line in proc.stderr:
                log.write(line)

    run.spawn(drain())
    run.bootstrap = f"127.0.0.1:{run.broker_port}"


async def _add_member(run: Run) -> Member:
    name = f"member-{len(run.members) + 1:02d}"
    journal = run.workdir / f"{name}.jsonl"
    proc = await _start_child(
        run, "groupwire.cli.chaos.member", "--bootstrap", run.bootstrap,
        "--group", run.group, "--topic", run.topic, "--name", name, "--journal", str(journal),
        "--session-timeout-ms", str(run.opts.session_timeout),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    member = Member(name, journal, proc)
    run.members.append(member)
    run.spawn(_watch(run, member))
    return member


async def _watch(run: Run, member: Member) -> None:
    """Read the member's stdout: a fatal error it reports ends the run."""
    assert member.proc.stdout is not None
    async for raw in member.proc.stdout:
        line = raw.decode(errors="replace")
        if not line.startswith(FATAL_PREFIX) or run.fatal is None or run.fatal.done():
            continue
        try:
            report = json.loads(line[len(FATAL_PREFIX):])
        except ValueError:
            report = {"code": "UNKNOWN", "error": line.strip()}
        run.fatal.set_result(explain(
            str(report.get("code")), str(report.get("error")), member=member.name,
            session_timeout_ms=run.opts.session_timeout, bootstrap=run.bootstrap,
            group=run.group, consumers=run.opts.consumers))


async def _inject(run: Run, fault: Fault, rng: random.Random) -> None:
    now = time.time()
    kind = fault.kind
    if kind.startswith(("broker-", "etcd-")):
        await _wait_for_sure_probe(run)
        now = time.time()
    for m in run.members:  # a member that ended on its own is no target for a fault
        if m.state != "dead" and m.proc.returncode is not None:
            m.state = "dead"
            run.log.append(f"{m.name} had exited by itself (code {m.proc.returncode})")
    alive = [m for m in run.members if m.state == "alive" and m is not run.sure_zombie]
    if run.cluster is not None and kind.startswith(("broker-", "etcd-")):
        await _inject_cluster(run, run.cluster, fault, rng)
        return
    if fault.sure and kind == "zombie" and alive:
        ready = await _ready_zombie_targets(run, alive)
        alive = ready or alive
        now = time.time()
    run.member_fault_times.append(now)
    if kind == "broker-kill":
        if run.broker is None:
            return
        _kill_groups([run.broker])
        async with asyncio.timeout(TASK_EXIT_S):
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
        pause = run.opts.session_timeout / 1000 + rng.uniform(0.5, 2.0)
        asyncio.get_running_loop().call_later(pause, _resume, target)
        run.log.append(f"froze {target.name} for {pause:.1f} s")
        if fault.sure:
            run.sure_zombie = target
            run.sure_probed.clear()
            run.spawn(_await_probe(run, target, now, pause + PROBE_WAIT_S))
    elif kind == "remove":
        target.proc.send_signal(signal.SIGTERM)
        target.state = "dead"
        run.log.append(f"stopped {target.name}")


async def _inject_cluster(run: Run, cluster: LocalCluster, fault: Fault,
                          rng: random.Random) -> None:
    """One broker or etcd fault; the next fault starts after this one has ended."""
    healthy = await _healthy(run, HEALTHY_WAIT_S)  # one fault at a time, as far as it goes
    note = "" if healthy else f" (not every replica in sync after {HEALTHY_WAIT_S:.0f} s)"
    roles = await cluster.roles(run.topic, run.group)
    now = time.time()
    if fault.kind == "etcd-restart":
        await cluster.kill(cluster.etcd)
        run.fault_times.append(now)
        run.coordinator_fault_times.append(now)  # every broker fences itself meanwhile
        pause = rng.uniform(0.2, 1.0)
        await asyncio.sleep(pause)  # etcd stays down this long
        await _restart(cluster, cluster.etcd)
        run.log.append(f"etcd killed, restarted after {pause:.1f} s "
                       f"(up {time.time() - now:.1f} s after the kill){note}")
        return
    if fault.kind == "etcd-stop":
        cluster.freeze(cluster.etcd)
        run.fault_times.append(now)
        run.coordinator_fault_times.append(now)
        pause = rng.uniform(0.5, 3.0)
        await asyncio.sleep(pause)  # etcd stays frozen this long
        cluster.thaw(cluster.etcd)
        run.log.append(f"etcd frozen (SIGSTOP) for {pause:.1f} s{note}")
        return
    victim, role = _victim(cluster, roles, fault, run.opts.partitions)
    run.fault_times.append(now)
    if victim.node_id == roles.coordinator:
        run.coordinator_fault_times.append(now)
        if role != "coordinator":
            role += ", the group's coordinator"
    if fault.kind == "broker-kill":
        await cluster.kill(victim)
        pause = rng.uniform(0.5, 2.0)
        await asyncio.sleep(pause)  # the broker stays dead this long
        await _restart(cluster, victim)
        run.log.append(f"killed broker {victim.node_id} ({role}), restarted after "
                       f"{pause:.1f} s (up {time.time() - now:.1f} s after the kill){note}")
    elif fault.kind == "etcd-half-open":
        pause = LEASE_TTL_MS / 1000 + rng.uniform(1.0, 5.0)
        line = await cluster.half_open_for(victim, pause)
        run.log.append(f"{line} ({role}){note}")
    else:
        cluster.freeze(victim)
        pause = LEASE_TTL_MS / 1000 + rng.uniform(0.5, 2.0)
        await asyncio.sleep(pause)  # frozen past its lease: it must fence itself
        cluster.thaw(victim)
        run.log.append(f"froze broker {victim.node_id} ({role}) for {pause:.1f} s{note}")


def _victim(cluster: LocalCluster, roles: Roles, fault: Fault,
            partitions: int) -> tuple[Node, str]:
    """The broker holding ``fault.role`` now; a live one by ``fault.pick`` when the role's
    holder is unknown."""
    p = int(fault.pick * partitions)
    desc = next((d for d in roles.partitions if d.partition == p), None)
    node_id, role = -1, fault.role
    if fault.role == "leader" and desc is not None:
        node_id, role = desc.leader, f"leader of partition {p}"
    elif fault.role == "follower" and desc is not None:
        followers = [n for n in desc.isr if n != desc.leader] or \
            [n for n in desc.replicas if n != desc.leader]
        if followers:
            node_id = followers[int(fault.pick * 7919) % len(followers)]
            role = f"follower of partition {p}"
    elif fault.role == "controller":
        node_id = roles.controller
    elif fault.role == "coordinator":
        node_id = roles.coordinator
    victim = cluster.broker(node_id)
    if victim is None or not victim.running:
        live = [b for b in cluster.brokers if b.running]
        victim = live[int(fault.pick * len(live))]
        role = f"any broker: the {fault.role} was unknown"
    return victim, role


async def _restart(cluster: LocalCluster, node: Node) -> None:
    try:
        if node is cluster.etcd:
            await cluster.start_etcd()
        else:
            await cluster.start_broker(node)
    except ClusterStartError as exc:
        raise ChaosFatal(str(exc)) from None


PROBE_WAIT_S = 10.0
"""How long after its freeze ends a sure zombie's probe is waited for."""


def _ownership_state(journal: Path) -> tuple[int, set[int], set[int], str]:
    """From a member's journal: its latest generation, the partitions it holds, those of
    them it committed since they were assigned, and its latest ownership event."""
    generation, owned, committed, last = -1, set[int](), set[int](), ""
    with contextlib.suppress(OSError):
        for line in journal.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind in ("assigned", "revoked", "lost"):
                parts = set(event.get("partitions") or [])
                last = kind
                if kind == "assigned":
                    generation = int(event.get("generation", -1))
                    owned |= parts
                else:
                    owned -= parts
                committed -= parts
            elif kind == "committed":
                committed |= {int(p) for p in event.get("offsets", {})} & owned
    return generation, owned, committed, last


async def _ready_zombie_targets(run: Run, alive: list[Member]) -> list[Member]:
    """Members a freeze turns into a zombie whose probe the broker must refuse: the group
    stable (every live member's latest event an assignment of one generation), and the
    member holding partitions with offsets committed since; waited for, bounded (empty
    when the bound passed)."""
    bound = time.monotonic() + (run.opts.session_timeout * 2 + 10_000) / 1000
    while True:
        states = {m.name: _ownership_state(m.journal) for m in alive}
        generations = {g for g, _, _, last in states.values() if last == "assigned"}
        stable = len(generations) == 1 and all(last == "assigned"
                                               for _, _, _, last in states.values())
        ready = [m for m in alive if stable and states[m.name][2]]
        if ready or time.monotonic() >= min(bound, run.deadline or bound):
            if not ready:
                run.log.append("no member was ready to be a sure zombie in time")
            return ready
        await asyncio.sleep(0.1)  # another process's journal: read again


async def _await_probe(run: Run, member: Member, frozen_at: float, bound_s: float) -> None:
    """Until the sure zombie has journaled its probe (or ``bound_s`` passed)."""
    end = time.monotonic() + bound_s
    try:
        while time.monotonic() < end and member.proc.returncode is None:
            if member.state != "zombie" and any(
                    '"zombie_probe"' in line and json.loads(line).get("t", 0) >= frozen_at
                    for line in _lines(member.journal)):
                return
            await asyncio.sleep(0.05)  # another process's journal: read again
    finally:
        run.sure_zombie = None
        run.sure_probed.set()


def _lines(path: Path) -> list[str]:
    try:
        return [x for x in path.read_text().splitlines() if x.endswith("}")]
    except OSError:
        return []


async def _wait_for_sure_probe(run: Run) -> None:
    """A broker fault waits for the sure zombie's probe: a broker restarted during the
    freeze gives the member a fresh session, and its probe would show nothing."""
    if run.sure_zombie is not None:
        await run.sure_probed.wait()  # bounded: _await_probe sets it within its bound


def _resume(member: Member) -> None:
    if member.proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            member.proc.send_signal(signal.SIGCONT)
    if member.state == "zombie":
        member.state = "alive"


async def _produce(run: Run) -> None:
    """Send at ``--rate``; every answer is noted as it comes, so a partition that stalls
    holds up neither the others nor their acknowledgement times."""
    opts = run.opts
    sent = 0
    t0 = time.monotonic()
    unanswered: set[asyncio.Future[Any]] = set()

    def answered(value: bytes, fut: asyncio.Future[Any]) -> None:
        unanswered.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            return  # not acknowledged: not counted, it may or may not be in the log
        meta = fut.result()
        key = (meta.partition, meta.offset)
        run.acked.add(key)
        run.acked_values[key] = value
        run.acked_at[key] = time.time()

    run.produce_span = (time.time(), time.time())
    async with Producer(run.bootstrap, client_id="chaos-producer", linger_ms=5,
                        request_timeout_ms=30000, security=opts.security) as producer:
        while sent < opts.records:
            for i in range(sent, min(sent + 50, opts.records)):
                value = f"r{i}".encode()
                fut = await producer.send(run.topic, value, key=f"k{i}".encode())
                unanswered.add(fut)
                fut.add_done_callback(functools.partial(answered, value))
                sent += 1
            while len(unanswered) > MAX_UNACKED:
                await asyncio.wait(list(unanswered), return_when=asyncio.FIRST_COMPLETED)
            ahead = sent / opts.rate - (time.monotonic() - t0)
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the producer
        if unanswered:  # each is answered within the producer's request timeout
            await asyncio.wait(list(unanswered))
    run.produce_span = (run.produce_span[0], time.time())


def _all_committed(run: Run, committed: dict[int, int]) -> bool:
    """Production is over and every acknowledged record lies below its committed offset."""
    if not run.produced:
        return False
    return all(committed.get(p, -1) > o for p, o in run.acked)


async def _sample_offsets(run: Run) -> None:
    """Committed offsets every 200 ms, to check that none ever goes backwards.

    Ends once every acknowledged record is committed, or at the run's deadline: it never
    depends on being cancelled (a cancellation the SDK's close swallowed would otherwise
    start it again).
    """
    if run.cluster is not None:
        await _sample_from_coordinator(run)
        return
    while time.monotonic() < run.deadline:
        try:
            async with Admin(run.bootstrap, client_id="chaos-monitor",
                             request_timeout_ms=2000, security=run.opts.security) as admin:
                while time.monotonic() < run.deadline:
                    offsets = await admin.list_consumer_group_offsets(run.group)
                    sample = {tp.partition: om.offset for tp, om in offsets.items()
                              if om.offset >= 0 and tp.topic == run.topic}
                    run.samples.append((time.time(), sample))
                    if _all_committed(run, sample):
                        return
                    await asyncio.sleep(0.2)  # the sampling period
        except (GroupwireError, ConnectionError, TimeoutError):
            await asyncio.sleep(0.2)  # the broker is being killed: sample again once it is back


async def _sample_from_coordinator(run: Run) -> None:
    """:func:`_sample_offsets` in a cluster: OffsetFetch goes to the group's coordinator,
    found again whenever it moves (the admin client sends it to its bootstrap broker,
    which answers NOT_COORDINATOR unless it is the coordinator)."""
    assert run.cluster is not None
    while time.monotonic() < run.deadline:
        cluster = Cluster(run.cluster.live_bootstrap(), client_id="chaos-monitor",
                          request_timeout_ms=2000, security=run.opts.security)
        try:
            host, port = await cluster.find_coordinator(run.group)
            async with await open_connection(host, port, run.opts.security,
                                             client_id="chaos-monitor", timeout=2.0) as conn:
                while time.monotonic() < run.deadline:
                    resp = await conn.send(OffsetFetchRequest(group_id=run.group), timeout=2.0,
                                           response_type=OffsetFetchResponse)
                    codes = {p.error_code for t in resp.topics for p in t.partitions}
                    if resp.error_code != ErrorCode.NONE or codes - {ErrorCode.NONE}:
                        break  # moved, or loading: find the coordinator again
                    sample = {p.partition_index: p.committed_offset for t in resp.topics
                              if t.name == run.topic for p in t.partitions
                              if p.committed_offset >= 0}
                    run.samples.append((time.time(), sample))
                    if _all_committed(run, sample):
                        return
                    await asyncio.sleep(0.2)  # the sampling period
        except (GroupwireError, ConnectionError, OSError, TimeoutError):
            pass
        finally:
            await cluster.close()
        await asyncio.sleep(0.2)  # the coordinator is moving: ask again shortly


async def _wait_consumed(run: Run, progress: Progress, task: object) -> None:
    while time.monotonic() < run.deadline:
        seen = {(int(p), int(o)) for e in read_journals(run.workdir)
                if e["event"] == "records" for p, o in e["records"]}  # type: ignore[attr-defined]
        done = len(run.acked & seen)
        progress.update(task, completed=done)  # type: ignore[arg-type]
        if done == len(run.acked):
            return
        await asyncio.sleep(0.5)  # the journals are files: re-read them periodically


async def _stop_members(run: Run) -> None:
    """SIGTERM every member (they leave the group), SIGKILL what has not ended in time."""
    run.member_fault_times.append(time.time())  # their leaving starts a rebalance
    for m in run.members:
        if m.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                if m.state == "zombie":
                    m.proc.send_signal(signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
    await _reap([m.proc for m in run.members], MEMBER_STOP_S)


async def _reap(procs: list[asyncio.subprocess.Process], timeout: float) -> None:
    """Wait ``timeout`` for ``procs`` to exit, then SIGKILL their groups and wait a bound."""
    waits = [asyncio.ensure_future(p.wait()) for p in procs if p.returncode is None]
    if not waits:
        return
    try:
        _, pending = await asyncio.wait(waits, timeout=timeout)
        if pending:
            _kill_groups(procs)
            _, pending = await asyncio.wait(pending, timeout=TASK_EXIT_S)
    finally:
        for w in waits:
            w.cancel()


def _kill_groups(procs: Iterable[asyncio.subprocess.Process]) -> None:
    """SIGKILL the process group of every child still running (its group is its pid)."""
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


async def _teardown(run: Run) -> None:
    """End everything the run started, each wait bounded: members first, at once (their
    verdict is taken or no longer wanted), then the run's tasks, then the broker."""
    _kill_groups(m.proc for m in run.members)
    await _settle(list(run.tasks))
    await _reap([m.proc for m in run.members], TASK_EXIT_S)
    if run.cluster is not None:
        await run.cluster.stop_brokers(10.0)
        _kill_groups(run.cluster.processes())
        await run.cluster.close_proxies()
    if run.broker is not None and run.broker.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            run.broker.send_signal(signal.SIGTERM)
        await _reap([run.broker], 10.0)


def _cluster_rows(v: Verdict) -> list[tuple[str, object]]:
    c = v.cluster
    if c is None:
        return []
    slowest = max(c.produce_unavailable_s.items(), key=lambda x: x[1], default=(None, 0.0))
    return [
        ("cluster: acknowledged records lost", c.acked_lost(v)),
        ("cluster: committed offsets regressed",
         f"{len(v.offsets_backwards)} ({c.offset_samples} samples)"),
        ("cluster: partitions with two leaders in one epoch", len(c.epoch_conflicts)),
        ("cluster: rebalances caused by a coordinator move",
         f"{len(c.coordinator_rebalances)} (of {c.rebalances} rebalances; "
         f"{c.coordinator_faults} coordinator faults)"),
        ("cluster: longest acks=all produce outage",
         f"{slowest[1]:.2f} s (partition {slowest[0]})"),
        ("cluster: longest time the group consumed nothing", f"{c.consume_unavailable_s:.2f} s"),
        ("cluster: zombie fetches a non-coordinator leader served (not fenced in a cluster)",
         c.zombie_fetches_served),
    ]


def _print(run: Run, v: Verdict) -> None:
    longest = max(v.longest_unowned_s.items(), key=lambda x: x[1], default=(None, 0.0))
    table(f"chaos verdict (seed {run.opts.seed})", ["check", "result"], [
        ("acknowledged records", v.produced),
        ("processed (distinct)", v.processed),
        ("lost", len(v.lost)),
        ("duplicates (a consumer died before committing)",
         f"{v.duplicates} ({len(v.unexplained_duplicates)} unexplained)"),
        ("records stored twice in the log (idempotent producer)",
         "not read" if v.log_duplicates is None else v.log_duplicates),
        ("committed offsets went backwards", len(v.offsets_backwards)),
        ("partition owned twice in a generation", len(v.double_owned)),
        ("zombie fetches / commits refused after the freeze",
         f"{v.zombie_fetches_refused} / {v.zombie_commits_refused} "
         f"({len(v.zombie_accepted)} accepted; {v.zombie_probes} probes, "
         f"{v.zombie_probes_unanswered} unanswered)"),
        ("slowest return to full ownership",
         f"{v.slowest_recovery_s:.2f} s (bound {v.recovery_bound_s:.1f} s)"),
        ("longest time a partition had no owner",
         f"{longest[1]:.2f} s (partition {longest[0]})"),
        *_cluster_rows(v),
    ], out=run.console)
    for violation in v.violations:
        run.console.print(f"[red]violation[/]: {violation}")
    if not v.violations:
        run.console.print("[green]no violation[/]")
