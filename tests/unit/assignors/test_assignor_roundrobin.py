"""RoundRobinAssignor against Kafka's documented examples and §16's member order."""

from __future__ import annotations

from groupwire.client.assignors import RoundRobinAssignor, Subscription

from .assignor_checks import check_complete, check_valid, tps

S = Subscription


def test_kafka_javadoc_equal_subscriptions() -> None:
    subs = {"C1": S(["t0", "t1"]), "C0": S(["t0", "t1"])}
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result == {
        "C0": tps("t0", 0, 2) + tps("t1", 1),
        "C1": tps("t0", 1) + tps("t1", 0, 2),
    }


def test_kafka_javadoc_unequal_subscriptions_skip_members_not_subscribed() -> None:
    subs = {"C0": S(["t0"]), "C1": S(["t0", "t1"]), "C2": S(["t0", "t1", "t2"])}
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert result == {
        "C0": tps("t0", 0),
        "C1": tps("t1", 0),
        "C2": tps("t1", 1) + tps("t2", 0, 1, 2),
    }


def test_circle_is_static_members_by_instance_id_then_member_id_in_string_order() -> None:
    subs = {
        "m2": S(["t"]),
        "m10": S(["t"]),
        "s-late": S(["t"], group_instance_id="a"),
    }
    result = RoundRobinAssignor().assign({"t": 7}, subs)
    assert result == {"s-late": tps("t", 0, 3, 6), "m10": tps("t", 1, 4), "m2": tps("t", 2, 5)}


def test_topics_without_metadata_are_ignored_and_every_member_appears() -> None:
    subs = {"a": S(["t", "missing"]), "b": S(["missing"])}
    ppt = {"t": 2}
    result = RoundRobinAssignor().assign(ppt, subs)
    assert result == {"a": tps("t", 0, 1), "b": []}
    check_valid(ppt, subs, result)
    check_complete(ppt, subs, result)
