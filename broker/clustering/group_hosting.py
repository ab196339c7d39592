"""Cluster mode: which groups this broker coordinates, and loading them as it comes to.

A group is coordinated by the leader of its ``__consumer_offsets`` partition. As this
broker comes to lead one, its groups are loaded (a supervised service, answering
COORDINATOR_LOAD_IN_PROGRESS meanwhile); as it stops, they are unloaded (their parked
requests answer NOT_COORDINATOR), as Kafka's coordinator does.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any

from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.coordinator import Coordinator, Result
from groupwire.broker.logs import get_logger
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.hashing import coordinator_partition

log = get_logger("groupwire.broker")


class GroupHosting:
    """The offsets partitions whose groups are loaded here, or being loaded."""

    def __init__(self, cluster: ClusterNode, coordinator: Coordinator, *,
                 offsets_log: OffsetsLog, offsets_partitions: int, supervisor: Supervisor,
                 execute: Callable[[Result], None], now: Callable[[], int],
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 slice_s: float) -> None:
        """``execute``: carries out a coordinator result (``GroupRuntime.execute``);
        ``now``: the coordinator's time; ``spawn``: a task awaited at close."""
        self._cluster = cluster
        self._coordinator = coordinator
        self._offsets_log = offsets_log
        self._offsets_partitions = offsets_partitions
        self._supervisor = supervisor
        self._execute = execute
        self._now = now
        self._spawn = spawn
        self._slice_s = slice_s
        self.hosted: set[int] = set()
        """Offsets partitions whose groups are loaded here."""
        self.loads: dict[int, Service] = {}
        """Offsets partitions being loaded (COORDINATOR_LOAD_IN_PROGRESS)."""

    def coordinates(self, group_id: str) -> bool:
        """Whether this broker serves the group (leads its offsets partition, and has
        loaded it)."""
        return coordinator_partition(group_id, self._offsets_partitions) in self.hosted

    def loading_group(self, group_id: str) -> bool:
        return coordinator_partition(group_id, self._offsets_partitions) in self.loads

    def roles_changed(self, partitions: set[tuple[str, int]]) -> None:
        """Load the groups of offsets partitions this broker came to lead (answering
        COORDINATOR_LOAD_IN_PROGRESS meanwhile), unload those it lost (their parked
        requests answer NOT_COORDINATOR), as Kafka's coordinator does."""
        led = self._cluster.leadership.led
        for topic, p in sorted(partitions):
            if topic != OFFSETS_TOPIC:
                continue
            leads = (topic, p) in led
            if leads and p not in self.hosted and p not in self.loads:
                self.loads[p] = self._supervisor.spawn(
                    f"group-load-{p}", functools.partial(self._load_offsets_partition, p,
                                                         led[(topic, p)]),
                    kind="group-load")
            elif not leads and (p in self.hosted or p in self.loads):
                self.hosted.discard(p)
                load = self.loads.pop(p, None)
                if load is not None:
                    self._spawn(load.stop())
                self._execute(self._coordinator.unload_partition(p, self._now()))
                log.info("groups_unloaded", partition=p)

    async def _load_offsets_partition(self, p: int, leader_epoch: int) -> None:
        """Read the partition's records a slice at a time, then load them in one step.

        A supervised service (``group-load``): a load that fails is logged and tried
        again with backoff, its groups answering COORDINATOR_LOAD_IN_PROGRESS meanwhile;
        one that keeps failing stops the broker rather than leave them so forever."""
        t0 = time.perf_counter()
        records = []
        deadline = time.perf_counter() + self._slice_s
        for record in self._offsets_log.replay_partition(p):
            records.append(record)
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + self._slice_s
        if self._cluster.leadership.led.get((OFFSETS_TOPIC, p)) != leader_epoch:
            self.loads.pop(p, None)
            return  # lost it meanwhile: roles_changed unloaded it
        self._execute(self._coordinator.load_partition(p, records, self._now()))
        self.loads.pop(p, None)
        self.hosted.add(p)
        log.info("groups_loaded", partition=p, records=len(records), leader_epoch=leader_epoch,
                 load_ms=round((time.perf_counter() - t0) * 1000, 1))

    async def close(self) -> None:
        """Stop the loads still running."""
        for load in list(self.loads.values()):
            await load.stop()
