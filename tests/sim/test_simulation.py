"""Thousands of seeded schedules against the coordinator, invariants after every step.

``GROUPWIRE_SIM_SEED=N`` runs only seed N (the replay a failure prints);
``GROUPWIRE_SIM_SCHEDULES=K`` changes how many seeds the suite runs (default 3000).
"""

from __future__ import annotations

import os

import pytest

from groupwire.broker.coordinator import TimerKey, expiry
from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, PREPARING_REBALANCE
from tests.sim import invariants
from tests.sim.schedule import SimulationFailure, Stats, run_schedule

SCHEDULES = int(os.environ.get("GROUPWIRE_SIM_SCHEDULES", "3000"))
CHUNKS = 10
ONLY_SEED = os.environ.get("GROUPWIRE_SIM_SEED")

# seeds that once failed (each with the reason); they replay on every run
def _seeds(chunk: int) -> range:
    size = -(-SCHEDULES // CHUNKS)
    return range(chunk * size, min(SCHEDULES, (chunk + 1) * size))


@pytest.mark.skipif(ONLY_SEED is not None, reason="replaying one seed")
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_schedules_keep_every_invariant(chunk: int) -> None:
    stats = Stats()
    for seed in _seeds(chunk):
        run_schedule(seed, stats=stats)
    assert stats.schedules == len(_seeds(chunk))
    if stats.schedules >= 100:  # the schedules really exercise the group
        assert stats.generations > stats.schedules
        assert stats.commits_accepted > 0


@pytest.mark.skipif(ONLY_SEED is None, reason="set GROUPWIRE_SIM_SEED to replay a seed")
def test_replay_one_seed() -> None:
    assert ONLY_SEED is not None
    run_schedule(int(ONLY_SEED))


def test_same_seed_same_schedule() -> None:
    first: list[str] = []
    second: list[str] = []
    run_schedule(7, trace=first)
    run_schedule(7, trace=second)
    other: list[str] = []
    run_schedule(8, trace=other)
    assert first == second
    assert first != other


def test_a_failure_names_its_seed_and_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forbid one legal move: the simulator must catch it, say how to replay it, and
    fail identically on the replay."""
    legal = invariants.LEGAL - {(PREPARING_REBALANCE, COMPLETING_REBALANCE)}
    monkeypatch.setattr(invariants, "LEGAL", legal)
    with pytest.raises(SimulationFailure) as first:
        run_schedule(3)
    with pytest.raises(SimulationFailure) as again:
        run_schedule(3)
    assert first.value.seed == 3
    assert "python -m tests.sim.run --seed 3" in str(first.value)
    assert "PreparingRebalance -> CompletingRebalance" in str(first.value)
    assert first.value.steps == again.value.steps


def test_a_coordinator_that_forgets_sessions_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant coordinator whose session timers never fire: the deadline invariant fires."""
    real = expiry.expire

    def no_sessions(engine: Engine, key: TimerKey, now_ms: int) -> None:
        if key[0] != "session":
            real(engine, key, now_ms)

    monkeypatch.setattr(expiry, "expire", no_sessions)
    failures = []
    for seed in range(40):
        try:
            run_schedule(seed)
        except SimulationFailure as exc:
            failures.append(str(exc))
    assert any("past its deadline" in f for f in failures)
