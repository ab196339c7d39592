"""The SDK's value types as applications print and use them."""

from __future__ import annotations

from groupwire.client.types import TopicPartition


def test_topic_partition_prints_short_and_stays_a_named_pair() -> None:
    tp = TopicPartition(topic="orders", partition=3)
    assert repr(tp) == "orders[3]" and str(tp) == "orders[3]"
    assert f"{sorted({TopicPartition('b', 0), tp})}" == "[b[0], orders[3]]"
    assert tp == ("orders", 3) and tp.topic == "orders" and tp.partition == 3
    assert tp._replace(partition=4) == ("orders", 4)
