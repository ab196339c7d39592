"""The fault schedule of a chaos run, drawn from one seed so a run can be replayed."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

CONSUMER_FAULTS = ("kill", "zombie", "restart", "add", "remove")
WEIGHTS = (35, 25, 20, 10, 10)
CLUSTER_FAULTS = ("broker-kill", "broker-stop", "etcd-restart", "etcd-stop",
                  "etcd-half-open")
"""SIGKILL a broker and start it again; SIGSTOP one past its lease TTL and SIGCONT it;
SIGKILL etcd and start it again on the same data dir and ports; SIGSTOP etcd and SIGCONT
it; one broker's etcd connections go half-open (open, silent, never closed) for longer
than its lease, then new ones work (its watch must notice by its own deadline)."""
CLUSTER_WEIGHTS = (40, 20, 10, 10, 20)
ROLES = ("leader", "follower", "controller", "coordinator")
"""Whom a broker fault strikes: a partition's leader or in-sync follower (the partition
chosen by the fault's ``pick``), the controller, or the group's coordinator."""


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    """Seconds after production starts."""
    kind: str
    """kill, zombie, restart, add, remove, broker-kill, and with a cluster broker-stop,
    etcd-restart, etcd-stop and etcd-half-open."""
    pick: float
    """A number in [0, 1) that chooses the target among the candidates at that moment."""
    role: str = ""
    """A cluster's broker faults: one of :data:`ROLES`."""
    sure: bool = False
    """The run's first zombie: frozen only once the group is stable and it holds partitions
    with committed offsets, and no broker fault strikes until its probe is journaled, so
    every run shows the broker refusing a zombie rather than counting on one by chance."""


def draw(seed: int, consumer_faults: int, broker_faults: int, window_s: float, *,
         cluster: bool = False) -> list[Fault]:
    """Faults spread over the middle of the production window, in time order.

    Without ``cluster`` a seed gives the schedule it always gave: the cluster's draws
    come after every other one. The first zombie in time order is marked ``sure``; a
    schedule of consumer faults with no zombie gets its first fault turned into one (a
    run with consumer faults always probes a zombie)."""
    rng = random.Random(seed)
    faults = [
        Fault(rng.uniform(0.1, 0.9) * window_s,
              rng.choices(CONSUMER_FAULTS, WEIGHTS)[0], rng.random())
        for _ in range(consumer_faults)
    ]
    if not cluster:
        faults += [Fault(rng.uniform(0.2, 0.8) * window_s, "broker-kill", 0.0)
                   for _ in range(broker_faults)]
    else:
        faults += [Fault(rng.uniform(0.1, 0.85) * window_s,
                         rng.choices(CLUSTER_FAULTS, CLUSTER_WEIGHTS)[0], rng.random(),
                         rng.choice(ROLES))
                   for _ in range(broker_faults)]
    faults.sort(key=lambda f: f.at_s)
    consumer = [i for i, f in enumerate(faults) if f.kind in CONSUMER_FAULTS]
    zombie = next((i for i in consumer if faults[i].kind == "zombie"),
                  consumer[0] if consumer else None)
    if zombie is not None:
        faults[zombie] = dataclasses.replace(faults[zombie], kind="zombie", sure=True)
    return faults
