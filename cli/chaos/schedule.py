"""The fault schedule of a chaos run, drawn from one seed so a run can be replayed."""

from __future__ import annotations

import random
from dataclasses import dataclass

CONSUMER_FAULTS = ("kill", "zombie", "restart", "add", "remove")
WEIGHTS = (35, 25, 20, 10, 10)
CLUSTER_FAULTS = ("broker-kill", "broker-stop", "etcd-restart")
"""SIGKILL a broker and start it again; SIGSTOP one past its lease TTL and SIGCONT it;
SIGKILL etcd and start it again on the same data dir and ports."""
CLUSTER_WEIGHTS = (60, 25, 15)
ROLES = ("leader", "follower", "controller", "coordinator")
"""Whom a broker fault strikes: a partition's leader or in-sync follower (the partition
chosen by the fault's ``pick``), the controller, or the group's coordinator."""


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    """Seconds after production starts."""
    kind: str
    """kill, zombie, restart, add, remove, broker-kill, and with a cluster broker-stop and
    etcd-restart."""
    pick: float
    """A number in [0, 1) that chooses the target among the candidates at that moment."""
    role: str = ""
    """A cluster's broker faults: one of :data:`ROLES`."""


def draw(seed: int, consumer_faults: int, broker_faults: int, window_s: float, *,
         cluster: bool = False) -> list[Fault]:
    """Faults spread over the middle of the production window, in time order.

    Without ``cluster`` a seed gives the schedule it always gave: the cluster's draws
    come after every other one."""
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
    return sorted(faults, key=lambda f: f.at_s)
