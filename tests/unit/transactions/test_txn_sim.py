"""Exactly once, end to end, over random schedules (txn_sim.py): seeded runs and a
hypothesis property that shrinks a failure to a short schedule."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.transactions.txn_sim import (
    CONFIG,
    OPS,
    TXN_IDS,
    Violation,
    World,
    random_schedule,
    run,
)


def test_the_ids_live_on_both_partitions() -> None:
    world = World()
    assert {world.coordinator.partition_of(t) for t in TXN_IDS} == set(range(CONFIG.partitions))


@pytest.mark.parametrize("seed", range(100))
def test_seeded_schedules_keep_exactly_once(seed: int) -> None:
    world = run(random_schedule(seed, 500))
    assert world.tags  # transactions did happen


def test_the_schedules_reach_every_outcome() -> None:
    """The seeded runs are only worth something if they commit, abort, time out, fence,
    expire, fail and crash: count what 30 of them did."""
    stats: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for seed in range(30):
        world = run(random_schedule(seed, 500))
        stats.update(world.stats)
        for info in world.tags.values():
            outcomes["commit acked"] += info.commit_acked
            outcomes["abort acked"] += info.abort_acked
    wanted = [
        "Ongoing->PrepareCommit", "Ongoing->PrepareAbort", "Ongoing->PrepareEpochFence",
        "PrepareEpochFence->PrepareAbort", "PrepareCommit->CompleteCommit",
        "PrepareAbort->CompleteAbort", "CompleteCommit->Dead", "Empty->Empty",
        "CompleteAbort->Empty", "write failed", "marker failed", "stale marker job run",
        "restart", "partition moved", "produced", "produce fenced", "reply lost",
        "client got PRODUCER_FENCED", "client got INVALID_PRODUCER_ID_MAPPING"]
    assert {name: stats[name] for name in wanted if stats[name] < 3} == {}
    assert outcomes["commit acked"] > 50 and outcomes["abort acked"] > 20, outcomes


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(OPS) - 1), st.integers(0, (1 << 16) - 1)),
                max_size=120))
def test_any_schedule_keeps_exactly_once(schedule: list[tuple[int, int]]) -> None:
    run(schedule)


def test_the_model_catches_a_coordinator_that_forgets_a_decision() -> None:
    """A shell that loses a stored PrepareCommit record (an unsafe log): the reloaded
    coordinator still has the transaction open, times it out and aborts what the client
    was told was committed. The checks must see it."""
    world = World()
    client = world.clients[0]
    while client.phase != "txn" or not client.added:
        world.act(client, 2)  # init, then add
        while world.writes:
            world.store(min(world.writes))
    world.act(client, 5)  # produce
    client.request = ("end", True)
    world.send(client)
    (token,) = world.writes
    write = world.writes.pop(token)
    world.apply(world.coordinator.stored(token, world.now))  # told stored, never logged
    assert world.tags[(0, 1)].commit_acked
    world.markers.clear()  # it crashed before sending them
    partition = write.partition
    with pytest.raises(Violation, match="commit answered NONE but it was aborted"):
        world.crash(1 + 3 * partition)  # that partition reloaded from its log
        world.settle()
        world.check_outcomes()


def _settle_writes(world: World) -> None:
    while world.writes:
        world.store(min(world.writes))


def test_a_late_marker_from_before_a_move_cannot_end_the_next_transaction() -> None:
    """Transactional producers keep their epoch from one transaction to the next, so only
    the coordinator epoch tells a marker of the last transaction, sent by the coordinator
    before the partition moved and delivered late, from one for the current."""
    world = World()
    client = world.clients[0]
    client.request = ("init", (-1, -1))
    world.send(client)
    _settle_writes(world)
    client.request = ("add", (("d", 0),))
    world.send(client)
    _settle_writes(world)
    world.act(client, 5)  # produce to d-0
    client.request = ("end", True)
    world.send(client)
    _settle_writes(world)
    assert world.tags[(0, 1)].commit_acked
    (late,) = world.markers  # held back
    partition = world.coordinator.partition_of(client.tid)
    world.crash(1 + 3 * partition)  # moved: resent with the next coordinator epoch
    assert len(world.markers) == 2 and not world.markers[0][0]
    world.run_markers(1, 0)
    _settle_writes(world)
    # the next transaction, same producer id and epoch, on the same partition
    client.request = ("add", (("d", 0),))
    world.send(client)
    _settle_writes(world)
    world.act(client, 5)
    assert world.data[("d", 0)].open
    world.run_markers(0, 0)  # the late commit marker of the first transaction
    assert world.data[("d", 0)].open, "a stale marker ended the open transaction"
    client.request = ("end", False)
    world.send(client)
    world.settle()
    world.check_outcomes()
    assert [r[2] for r in world.data[("d", 0)].records] == [True, False]
    assert late[1].coordinator_epoch < world.coordinator.coordinator_epoch(partition)
