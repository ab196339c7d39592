"""The fault schedule of a chaos run, drawn from one seed so a run can be replayed."""

from __future__ import annotations

import random
from dataclasses import dataclass

CONSUMER_FAULTS = ("kill", "zombie", "restart", "add", "remove")
WEIGHTS = (35, 25, 20, 10, 10)


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    """Seconds after production starts."""
    kind: str
    """kill, zombie, restart, add, remove, or broker-kill."""
    pick: float
    """A number in [0, 1) that chooses the target among the candidates at that moment."""


def draw(seed: int, consumer_faults: int, broker_faults: int, window_s: float) -> list[Fault]:
    """Faults spread over the middle of the production window, in time order."""
    rng = random.Random(seed)
    faults = [
        Fault(rng.uniform(0.1, 0.9) * window_s,
              rng.choices(CONSUMER_FAULTS, WEIGHTS)[0], rng.random())
        for _ in range(consumer_faults)
    ]
    faults += [Fault(rng.uniform(0.2, 0.8) * window_s, "broker-kill", 0.0)
               for _ in range(broker_faults)]
    return sorted(faults, key=lambda f: f.at_s)
