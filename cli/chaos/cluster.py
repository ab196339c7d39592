"""A chaos run's own cluster: one etcd and N brokers, each a chaos child of the run.

Every start waits for a line of the process's log with a bound; a process that exits
or stays silent meanwhile is a :class:`ClusterStartError` naming its log. Faults act on
the process group of a child (the child *is* the broker, or etcd after its exec), so a
SIGSTOP freezes the whole broker and a SIGKILL leaves nothing of it.

Each broker reaches etcd through its own :class:`EtcdProxy` (in the run's process), so
the ``etcd-half-open`` fault can leave one broker's etcd connections half-open while the
others' work (:meth:`LocalCluster.half_open`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupwire.cli.chaos.child import EXEC, start_child
from groupwire.cli.chaos.etcd_proxy import EtcdProxy
from groupwire.client.admin import Admin, PartitionDescription
from groupwire.client.cluster import Cluster
from groupwire.client.security import SecurityConfig

LEASE_TTL_MS = 1000
"""Brokers' etcd lease: a dead or frozen broker is out of the cluster about a second later."""
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
CLUSTER_NAME = "chaos"
ETCD_READY = b"serving insecure client requests"
BROKER_READY = b'"broker_started"'
ROLES_TIMEOUT_S = 5.0
EXIT_S = 5.0


class ClusterStartError(Exception):
    """A process of the cluster did not come up; the message names its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Node:
    """One process of the cluster, restarted in place: same ports, same data dir."""

    name: str
    port: int
    data: Path
    log_path: Path
    proc: asyncio.subprocess.Process | None = None
    node_id: int = 0
    stopped: bool = False
    """SIGSTOPped: alive, but answering nothing."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


@dataclass
class Roles:
    """Who does what right now, as the brokers' Metadata and FindCoordinator say."""

    controller: int = -1
    coordinator: int = -1
    partitions: list[PartitionDescription] = field(default_factory=list)

    @property
    def under_replicated(self) -> list[PartitionDescription]:
        return [p for p in self.partitions if p.under_replicated or p.leader < 0]


@dataclass
class LocalCluster:
    workdir: Path
    size: int
    broker_args: list[str]
    """Flags every broker gets besides its node id, port, data dir and etcd."""
    spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Future[Any]]
    """Runs a task of the run (each log's drain)."""
    start_s: float = 60.0
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """How the run's clients (here: the role look-ups) reach the brokers."""
    etcd: Node = field(init=False)
    brokers: list[Node] = field(init=False)
    peer_port: int = field(init=False)
    proxies: dict[int, EtcdProxy] = field(init=False, default_factory=dict)
    """Per broker node id: the proxy it reaches etcd through."""

    def __post_init__(self) -> None:
        self.peer_port = free_port()
        self.etcd = Node("etcd", free_port(), self.workdir / "etcd-data",
                         self.workdir / "etcd.log")
        self.brokers = [Node(f"broker {i}", free_port(), self.workdir / f"broker-{i}-data",
                             self.workdir / f"broker-{i}.log", node_id=i)
                        for i in range(1, self.size + 1)]

    @property
    def endpoints(self) -> str:
        return f"http://127.0.0.1:{self.etcd.port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def live_bootstrap(self) -> str:
        """The brokers that answer now (a frozen one would hold a request until it times out)."""
        live = [b for b in self.brokers if b.running and not b.stopped]
        return ",".join(f"127.0.0.1:{b.port}" for b in live or self.brokers)

    def processes(self) -> list[asyncio.subprocess.Process]:
        return [n.proc for n in (*self.brokers, self.etcd) if n.proc is not None]

    def broker(self, node_id: int) -> Node | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)

    async def start(self) -> None:
        await self.start_etcd()
        for b in self.brokers:
            if b.node_id not in self.proxies:
                proxy = EtcdProxy("127.0.0.1", self.etcd.port)
                await proxy.start()
                self.proxies[b.node_id] = proxy
        for b in self.brokers:  # the first broker up makes the others' wait no longer
            await self.start_broker(b)

    def etcd_endpoints_of(self, b: Node) -> str:
        """Where broker ``b`` reaches etcd: its proxy, once :meth:`start` made it."""
        proxy = self.proxies.get(b.node_id)
        return self.endpoints if proxy is None else proxy.url

    def half_open(self, b: Node) -> int:
        """Every etcd connection broker ``b`` has, and each it opens until :meth:`heal`,
        goes half-open (open, silent, never closed). Returns how many were caught."""
        proxy = self.proxies[b.node_id]
        proxy.go_half_open()
        return proxy.caught

    def heal(self, b: Node) -> None:
        """``b``'s new etcd connections work again; the half-open ones stay so."""
        self.proxies[b.node_id].heal()

    async def half_open_for(self, b: Node, duration_s: float) -> str:
        """The ``etcd-half-open`` fault on broker ``b``: its etcd connections go
        half-open for ``duration_s``, then new ones work again. The line for the run's
        log."""
        caught = self.half_open(b)
        try:
            await asyncio.sleep(duration_s)  # the fault lasts this long
        finally:
            self.heal(b)
        return (f"{b.name}: etcd connections half-open for {duration_s:.1f} s "
                f"({caught} caught open), then new ones healed")

    async def close_proxies(self) -> None:
        for proxy in self.proxies.values():
            await proxy.close()
        self.proxies.clear()

    async def start_etcd(self) -> None:
        etcd, peer = self.etcd, f"http://127.0.0.1:{self.peer_port}"
        client = self.endpoints
        await self._start(etcd, ETCD_READY, EXEC, _etcd_program(),
                          "--data-dir", str(etcd.data), "--name", "chaos",
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", f"chaos={peer}",
                          # a 1 s lease needs elections well under it
                          "--election-timeout", "500", "--heartbeat-interval", "100")

    async def start_broker(self, b: Node) -> None:
        await self._start(b, BROKER_READY, "groupwire", "broker", "--host", "127.0.0.1",
                          "--port", str(b.port), "--data-dir", str(b.data),
                          "--node-id", str(b.node_id),
                          "--etcd-endpoints", self.etcd_endpoints_of(b),
                          "--cluster-name", CLUSTER_NAME,
                          "--etcd-lease-ttl-ms", str(LEASE_TTL_MS),
                          "--default-replication-factor", str(REPLICATION_FACTOR),
                          "--offsets-topic-replication-factor", str(REPLICATION_FACTOR),
                          "--min-insync-replicas", str(MIN_INSYNC), *self.broker_args)

    async def _start(self, node: Node, ready: bytes, *argv: str) -> None:
        """Start ``node``'s process and wait for ``ready`` in its log, with a bound."""
        node.stopped = False
        proc = await start_child(*argv, stdout=asyncio.subprocess.DEVNULL,
                                 stderr=asyncio.subprocess.PIPE)
        node.proc = proc
        assert proc.stderr is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_s
        with node.log_path.open("ab") as log:
            while True:
                try:
                    async with asyncio.timeout(max(0.0, deadline - loop.time())):
                        line = await proc.stderr.readline()
                except TimeoutError:
                    raise ClusterStartError(f"{node.name} did not start within "
                                            f"{self.start_s:.0f} s; see {node.log_path}"
                                            ) from None
                if not line:
                    raise ClusterStartError(f"{node.name} exited while starting; see "
                                            f"{node.log_path}")
                log.write(line)
                if ready in line:
                    break

        async def drain() -> None:
            assert proc.stderr is not None
            with node.log_path.open("ab") as log:
                async for line in proc.stderr:
                    log.write(line)

        self.spawn(drain())

    async def kill(self, node: Node) -> None:
        """SIGKILL ``node`` and wait (bounded) until it is gone."""
        node.signal(signal.SIGKILL)
        node.stopped = False
        if node.proc is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_S):
                    await node.proc.wait()

    def freeze(self, node: Node) -> None:
        node.signal(signal.SIGSTOP)
        node.stopped = True

    def thaw(self, node: Node) -> None:
        node.signal(signal.SIGCONT)
        node.stopped = False

    async def stop_brokers(self, timeout: float) -> None:
        """SIGTERM every broker (thawed first), SIGKILL what has not ended in ``timeout``:
        their logs are then still, for the checks that read them."""
        for b in self.brokers:
            if b.stopped:
                self.thaw(b)
            b.signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(b.proc.wait()) for b in self.brokers
                 if b.proc is not None and b.proc.returncode is None]
        if not waits:
            return
        try:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            if pending:
                for b in self.brokers:
                    b.signal(signal.SIGKILL)
                await asyncio.wait(pending, timeout=EXIT_S)
        finally:
            for w in waits:
                w.cancel()

    async def roles(self, topic: str, group: str) -> Roles:
        """Controller, the group's coordinator and the topic's partitions, from the live
        brokers; what could not be learnt within a bound stays -1 / empty."""
        bootstrap = self.live_bootstrap()
        roles = Roles()
        with contextlib.suppress(Exception):  # any failure: a role left unknown
            async with asyncio.timeout(ROLES_TIMEOUT_S):
                async with Admin(bootstrap, client_id="chaos-roles",
                                 request_timeout_ms=2000, security=self.security) as admin:
                    roles.controller = (await admin.describe_cluster()).controller_id
                    roles.partitions = await admin.describe_partitions([topic])
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ROLES_TIMEOUT_S):
                cluster = Cluster(bootstrap, client_id="chaos-roles", request_timeout_ms=2000,
                                  security=self.security)
                try:
                    _, port = await cluster.find_coordinator(group)
                finally:
                    await cluster.close()
                roles.coordinator = next((b.node_id for b in self.brokers if b.port == port),
                                         -1)
        return roles


def _etcd_program() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise ClusterStartError("--cluster needs etcd 3.4 or later on the PATH "
                                "(Debian: apt-get install etcd-server)")
    return path
