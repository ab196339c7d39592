"""One seeded schedule: N clients, a fault injector and the clock, all driven by one
``random.Random(seed)``; invariants after every step. Same seed, same run.

Half the schedules also hold every write's outcome (the shell's disk and replication):
a second generator from the seed settles the held writes stored or failed, in random
orders and after random delays, and drains them all at the end."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from groupwire.broker.coordinator import CoordinatorConfig
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import DescribedGroup
from tests.sim.client import GROUP, Client
from tests.sim.invariants import Checker
from tests.sim.world import World

TOPICS = {"t": 6, "u": 3}
DEFAULT_STEPS = 50


class SimulationFailure(AssertionError):
    """An invariant (or the shell's own checks) failed: carries what replays it."""

    def __init__(self, seed: int, steps: list[str], cause: BaseException) -> None:
        self.seed, self.steps, self.cause = seed, steps, cause
        listing = "\n".join(f"  {i:3d} {s}" for i, s in enumerate(steps))
        super().__init__(
            f"seed {seed} failed at step {len(steps) - 1}: {type(cause).__name__}: {cause}\n"
            f"replay: python -m tests.sim.run --seed {seed}  "
            f"(or GROUPWIRE_SIM_SEED={seed} pytest tests/sim)\nsteps:\n{listing}")


@dataclass
class Stats:
    schedules: int = 0
    steps: int = 0
    commits_accepted: int = 0
    generations: int = 0
    faults: dict[str, int] = field(default_factory=dict)


def make_config(rng: random.Random) -> CoordinatorConfig:
    return CoordinatorConfig(
        initial_rebalance_delay_ms=rng.choice([0, 100, 300]),
        min_session_timeout_ms=10, max_session_timeout_ms=600_000,
        group_max_size=rng.choice([3, 100, 100]),
        new_member_join_timeout_ms=rng.choice([1500, 6000]),
        offsets_retention_ms=60_000, offsets_retention_check_interval_ms=30_000,
        connection_loss_grace_ms=rng.choice([200, 500]),
        ownership_fencing=rng.random() < 0.5)


FAULTS = ("none", "crash", "restart", "pause", "slow_poll", "leave", "blip", "commit",
          "stale_commit", "jump")
WEIGHTS = (40, 4, 6, 4, 3, 3, 3, 10, 5, 3)
STORMY = (8, 6, 12, 5, 4, 5, 6, 8, 6, 4)  # half the schedules: faults most steps


def run_schedule(seed: int, steps: int = DEFAULT_STEPS, stats: Stats | None = None,
                 trace: list[str] | None = None) -> Stats:
    """Run one schedule; raise :class:`SimulationFailure` with the seed and steps if any
    invariant fails. ``trace`` receives the step list (a prefix of a longer run's)."""
    stats = stats if stats is not None else Stats()
    log: list[str] = trace if trace is not None else []
    try:
        _run(seed, steps, stats, log)
    except AssertionError as exc:  # invariants, the world's own checks
        raise SimulationFailure(seed, log, exc) from exc
    except Exception as exc:  # a crash in the coordinator is a failure too
        raise SimulationFailure(seed, log, exc) from exc
    stats.schedules += 1
    return stats


OUTCOME_CODES = (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                 ErrorCode.NOT_COORDINATOR)


@dataclass
class Outcomes:
    """How a schedule settles held writes: each step, each pending one with probability
    ``settle`` (in a shuffled order), failed with probability ``fail``."""

    rng: random.Random
    settle: float
    fail: float

    def step(self, world: World, drain: bool = False) -> list[str]:
        pending = list(world.pending)
        self.rng.shuffle(pending)
        done: list[str] = []
        for token in pending:
            if not drain and self.rng.random() >= self.settle:
                continue
            code = self.rng.choice(OUTCOME_CODES) if self.rng.random() < self.fail else None
            world.settle(token, code)
            done.append(f"{token}:{'stored' if code is None else code.name}")
        return done


def _outcomes(seed: int) -> Outcomes | None:
    """From the seed, apart from the fault schedule's generator."""
    rng = random.Random(f"outcomes-{seed}")
    if rng.random() < 0.5:
        return None
    return Outcomes(rng, rng.choice([0.3, 0.6, 0.9]), rng.choice([0.0, 0.2, 0.5]))


def _run(seed: int, steps: int, stats: Stats, log: list[str]) -> None:
    rng = random.Random(seed)
    config = make_config(rng)
    world = World(config, dict(TOPICS))
    outcomes = _outcomes(seed)
    n = rng.randint(2, 5)
    sessions = [rng.choice([1000, 1500, 3000]) for _ in range(n)]
    rebalances = [rng.choice([2000, 4000]) for _ in range(n)]
    slack = max(rebalances) + config.connection_loss_grace_ms + config.initial_rebalance_delay_ms
    checker = Checker(world, GROUP, {}, slack)
    clients = [
        Client(world, f"c{i}", f"i{i}" if rng.random() < 0.35 else None,
               rng.choice([["t"], ["t"], ["t", "u"]]), sessions[i], rebalances[i], checker)
        for i in range(n)]
    log.append(f"config {config}; clients "
               + ", ".join(f"{c.name}(static={c.instance_id}, S={c.session_timeout_ms}, "
                           f"R={c.rebalance_timeout_ms}, topics={c.topics})" for c in clients))
    weights = WEIGHTS if rng.random() < 0.5 else STORMY
    log[0] += f"; {'calm' if weights is WEIGHTS else 'stormy'}"
    if outcomes is not None:
        world.hold_writes = True
        log[0] += f"; writes held (settle {outcomes.settle}, fail {outcomes.fail})"
    generations: set[int] = set()
    for step in range(steps):
        order = list(clients)
        rng.shuffle(order)
        for c in order:
            c.progress()
        fault = rng.choices(FAULTS, weights)[0]
        c = rng.choice(clients)
        at = world.now
        log.append(f"t={at} {fault} {c.name} ...")  # shown if the injection itself fails
        what = _inject(fault, c, rng, world, checker)
        dt = rng.choice([20, 50, 100, 200, 400])
        log[-1] = f"t={at} {what}; then {dt} ms"
        if outcomes is not None:
            settled = outcomes.step(world)
            if settled:
                log[-1] += f"; settled {' '.join(settled)}"
        stats.faults[fault] = stats.faults.get(fault, 0) + 1
        world.step_through(dt)
        checker.check(frozenset(c.member_id for c in clients if c.parked))
        if checker.described is not None:
            generations.add(checker.described.generation_id)
        stats.steps += 1
        del step
    if outcomes is not None:
        log.append(f"t={world.now} drain ...")
        log[-1] = f"t={world.now} drained {' '.join(outcomes.step(world, drain=True))}"
    checker.check_settled()
    stats.commits_accepted += checker.commits_accepted
    stats.generations += len(generations)


def _inject(fault: str, c: Client, rng: random.Random, world: World,
            checker: Checker) -> str:
    now = world.now
    match fault:
        case "crash" if not c.down:
            c.crash()
        case "restart" if c.down or c.instance_id is not None:
            kind = "static restart" if c.instance_id is not None and not c.down else "restart"
            c.restart()
            return f"{kind} {c.name}"
        case "pause" if not c.down:
            c.paused_until = now + rng.choice([300, 1000, 2500, 5000])
            return f"pause {c.name} until {c.paused_until}"
        case "slow_poll" if not c.down:
            c.slow_until = now + rng.choice([1000, 3000, 6000])
            return f"slow poll {c.name} until {c.slow_until}"
        case "leave" if not c.down and c.member_id:
            c.leave()
        case "blip" if not c.down:
            c.blip()
        case "commit" if c.stable and not c.down:
            parts = c.owned or [("t", 0)]
            before = checker.before_commit()
            cid = c.commit({tp: now for tp in parts}, c.generation_id, c.member_id)
            codes = checker.sent_commit((c.conn, cid), before, c.member_id, c.generation_id,
                                        judge=True, owned=bool(c.owned))
            return f"commit {c.name} gen {c.generation_id} {parts} -> {_codes(codes)}"
        case "stale_commit" if c.member_id and not c.down:
            return _stale_commit(c, rng, checker, now)
        case "jump":
            ms = rng.choice([1000, 2500, 5000, 20_000])
            world.jump(ms)
            return f"clock jump {ms} ms"
        case _:
            return f"{fault} (no-op for {c.name})" if fault != "none" else "-"
    return f"{fault} {c.name}"


def _stale_commit(c: Client, rng: random.Random, checker: Checker, now: int) -> str:
    seen = c.generations_seen
    generation = rng.choice([c.generation_id - 1, seen[0] if seen else -1, c.generation_id + 1,
                             c.generation_id])
    member_id = rng.choice([c.member_id, c.member_id + "x", ""])
    before: DescribedGroup = checker.before_commit()
    cid = c.commit({("t", rng.randrange(TOPICS["t"])): now}, generation, member_id)
    codes = checker.sent_commit((c.conn, cid), before, member_id, generation,
                                judge=generation >= 0 or bool(member_id))
    return f"stale commit {c.name} as {member_id!r} gen {generation} -> {_codes(codes)}"


def _codes(codes: Mapping[tuple[str, int], ErrorCode] | None) -> str:
    if codes is None:
        return "held"
    return ",".join(sorted({v.name for v in codes.values()}))
