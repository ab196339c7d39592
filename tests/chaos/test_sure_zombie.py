"""Every chaos run with consumer faults probes one zombie on purpose, not by chance: the
schedule marks one ``sure``, and the runner freezes it only when its probe must be
refused (the group stable, the member holding partitions with committed offsets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupwire.cli.chaos.runner import _ownership_state
from groupwire.cli.chaos.schedule import draw


@pytest.mark.parametrize("seed", range(20))
def test_every_schedule_with_consumer_faults_has_one_sure_zombie(seed: int) -> None:
    for faults in (2, 20):
        schedule = draw(seed, faults, 2, 16.0)
        sure = [f for f in schedule if f.sure]
        assert len(sure) == 1 and sure[0].kind == "zombie"
        zombies = [f for f in schedule if f.kind == "zombie"]
        assert zombies[0] is sure[0]  # the first zombie in time order


def test_the_draws_stay_those_of_the_seed() -> None:
    """Seed 7 (CI's) keeps its schedule: only the first zombie is marked."""
    kinds = [f.kind for f in draw(7, 20, 2, 16.0)]
    assert kinds[:4] == ["add", "zombie", "kill", "zombie"]
    assert kinds.count("broker-kill") == 2 and len(kinds) == 22


def test_no_consumer_faults_no_zombie() -> None:
    assert not any(f.sure for f in draw(3, 0, 2, 16.0))


def _journal(path: Path, *events: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps({"t": i, **e}) + "\n" for i, e in enumerate(events))
                    + '{"t": 99, "event": "commi')  # a line cut by SIGKILL
    return path


def test_ownership_is_read_from_the_journal(tmp_path: Path) -> None:
    path = _journal(
        tmp_path / "member-1.jsonl",
        {"event": "assigned", "generation": 3, "partitions": [0, 1, 2]},
        {"event": "committed", "offsets": {"0": 5, "1": 7}},
        {"event": "revoked", "generation": 3, "partitions": [0, 1, 2]},
        {"event": "assigned", "generation": 4, "partitions": [1, 2]},
        {"event": "committed", "offsets": {"2": 9}})
    # partition 1's commit came before it was revoked: not this assignment's
    assert _ownership_state(path) == (4, {1, 2}, {2}, "assigned")


def test_a_member_mid_rebalance_is_seen_as_such(tmp_path: Path) -> None:
    path = _journal(
        tmp_path / "member-2.jsonl",
        {"event": "assigned", "generation": 3, "partitions": [0]},
        {"event": "committed", "offsets": {"0": 5}},
        {"event": "revoked", "generation": 3, "partitions": [0]})
    assert _ownership_state(path) == (3, set(), set(), "revoked")
    assert _ownership_state(tmp_path / "missing.jsonl") == (-1, set(), set(), "")
