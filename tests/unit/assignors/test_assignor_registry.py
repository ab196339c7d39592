"""Names, protocols, lookup, the consumer-side helpers, and the sans-I/O rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from groupwire.client import assignors
from groupwire.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    get_assignor,
    rebalance_protocol_for,
    supported_protocols,
    user_data_for,
)
from groupwire.client.assignors.sticky import decode_sticky_user_data
from groupwire.client.types import TopicPartition


def test_names_and_protocols() -> None:
    expected = {
        "range": (RangeAssignor, "eager", ("eager",)),
        "roundrobin": (RoundRobinAssignor, "eager", ("eager",)),
        "sticky": (StickyAssignor, "eager", ("eager",)),
        "cooperative-sticky": (CooperativeStickyAssignor, "cooperative", ("eager", "cooperative")),
    }
    assert set(ASSIGNORS) == set(expected)
    for name, (cls, protocol, supported) in expected.items():
        assignor = get_assignor(name)
        assert ASSIGNORS[name] is cls
        assert isinstance(assignor, cls)
        assert isinstance(assignor, PartitionAssignor)
        assert assignor.name == name
        assert getattr(assignor, "rebalance_protocol") == protocol  # noqa: B009
        assert supported_protocols(assignor) == supported


def test_get_assignor_accepts_a_class_or_an_instance_and_rejects_the_rest() -> None:
    instance = RangeAssignor()
    assert get_assignor(instance) is instance
    assert isinstance(get_assignor(StickyAssignor), StickyAssignor)
    with pytest.raises(ValueError, match="unknown assignor 'fair'"):
        get_assignor("fair")
    with pytest.raises(TypeError):
        get_assignor(42)  # type: ignore[arg-type]


class _Custom:
    """A user assignor with only the required shape: eager by default, no user data."""

    name = "everything-to-first"

    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        first = min(subscriptions)
        return {
            m: [
                TopicPartition(t, p)
                for t in sorted(partitions_per_topic)
                for p in range(partitions_per_topic[t])
            ]
            if m == first
            else []
            for m in subscriptions
        }


def test_protocol_is_the_highest_every_assignor_supports() -> None:
    coop, rng = CooperativeStickyAssignor(), RangeAssignor()
    assert rebalance_protocol_for([coop]) == "cooperative"
    assert rebalance_protocol_for([rng, coop]) == "eager"
    assert rebalance_protocol_for([get_assignor(_Custom())]) == "eager"
    with pytest.raises(ValueError):
        rebalance_protocol_for([])


def test_only_the_eager_sticky_assignor_sends_user_data() -> None:
    owned = [TopicPartition("t", 1)]
    data = user_data_for(StickyAssignor(), owned, 5)
    assert data is not None
    claim = decode_sticky_user_data(data)
    assert claim is not None and list(claim.partitions) == owned and claim.generation == 5
    others: list[PartitionAssignor] = [
        RangeAssignor(),
        RoundRobinAssignor(),
        CooperativeStickyAssignor(),
        _Custom(),
    ]
    for other in others:
        assert user_data_for(other, owned, 5) is None


def test_assignors_are_sans_io() -> None:
    """No asyncio, sockets, threads or clocks in client/assignors (COMMON.md)."""
    forbidden = {"asyncio", "socket", "time", "threading", "selectors", "datetime"}
    package = Path(assignors.__file__).parent
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"
