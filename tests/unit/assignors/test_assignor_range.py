"""RangeAssignor against Kafka's documented examples and §16's member order."""

from __future__ import annotations

from groupwire.client.assignors import RangeAssignor, Subscription

from .assignor_checks import check_complete, check_valid, tps

S = Subscription


def test_kafka_javadoc_two_members_two_topics_of_three() -> None:
    subs = {"C0": S(["t0", "t1"]), "C1": S(["t0", "t1"])}
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result == {
        "C0": tps("t0", 0, 1) + tps("t1", 0, 1),
        "C1": tps("t0", 2) + tps("t1", 2),
    }


def test_first_member_takes_every_topics_extra_partition_8_6_6() -> None:
    subs = {m: S(["t0", "t1"]) for m in ("c2", "c0", "c1")}
    result = RangeAssignor().assign({"t0": 10, "t1": 10}, subs)
    assert result == {
        "c0": tps("t0", 0, 1, 2, 3) + tps("t1", 0, 1, 2, 3),
        "c1": tps("t0", 4, 5, 6) + tps("t1", 4, 5, 6),
        "c2": tps("t0", 7, 8, 9) + tps("t1", 7, 8, 9),
    }


def test_static_members_first_by_instance_id_then_dynamic_by_plain_string_order() -> None:
    subs = {
        "m2": S(["t"]),
        "m10": S(["t"]),
        "zz-static": S(["t"], group_instance_id="b"),
        "aa-static": S(["t"], group_instance_id="c"),
        "yy-static": S(["t"], group_instance_id="a"),
    }
    result = RangeAssignor().assign({"t": 5}, subs)
    order = [m for m, ps in sorted(result.items(), key=lambda item: item[1][0].partition)]
    assert order == ["yy-static", "zz-static", "aa-static", "m10", "m2"]


def test_static_member_keeps_its_range_under_a_new_member_id() -> None:
    before = {"x-1": S(["t"], group_instance_id="i1"), "a-1": S(["t"], group_instance_id="i2")}
    after = {"x-2": S(["t"], group_instance_id="i1"), "a-1": S(["t"], group_instance_id="i2")}
    first = RangeAssignor().assign({"t": 4}, before)
    second = RangeAssignor().assign({"t": 4}, after)
    assert first["x-1"] == second["x-2"] == tps("t", 0, 1)
    assert first["a-1"] == second["a-1"] == tps("t", 2, 3)


def test_only_subscribers_share_a_topic_and_every_member_appears() -> None:
    subs = {"a": S(["t0"]), "b": S(["t0", "t1"]), "c": S(["gone"]), "d": S([])}
    ppt = {"t0": 3, "t1": 2}
    result = RangeAssignor().assign(ppt, subs)
    assert result == {"a": tps("t0", 0, 1), "b": tps("t0", 2) + tps("t1", 0, 1), "c": [], "d": []}
    check_valid(ppt, subs, result)
    check_complete(ppt, subs, result)


def test_more_members_than_partitions_leaves_the_last_members_empty() -> None:
    subs = {m: S(["t"]) for m in ("a", "b", "c")}
    assert RangeAssignor().assign({"t": 2}, subs) == {"a": tps("t", 0), "b": tps("t", 1), "c": []}


def test_no_members_no_assignment() -> None:
    assert RangeAssignor().assign({"t": 3}, {}) == {}
