"""The etcd key layout and its JSON values."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.keys import (
    BrokerInfo,
    BrokerKey,
    ControllerInfo,
    ControllerKey,
    PartitionKey,
    PartitionState,
    TopicAssignment,
    TopicKey,
    broker_key,
    controller_key,
    decode_broker,
    decode_controller,
    decode_partition,
    decode_topic,
    encode_broker,
    encode_controller,
    encode_partition,
    encode_topic,
    parse_key,
    partition_key,
    topic_key,
)


def test_keys_follow_the_designs_layout_and_parse_back() -> None:
    assert broker_key("c", 3) == "/groupwire/c/brokers/3"
    assert controller_key("c") == "/groupwire/c/controller"
    assert topic_key("c", "orders") == "/groupwire/c/topics/orders"
    assert partition_key("c", "orders", 7) == "/groupwire/c/partitions/orders/7"
    assert parse_key("c", broker_key("c", 3)) == BrokerKey(3)
    assert parse_key("c", controller_key("c")) == ControllerKey()
    assert parse_key("c", topic_key("c", "a.b-c_d")) == TopicKey("a.b-c_d")
    assert parse_key("c", partition_key("c", "orders", 7)) == PartitionKey("orders", 7)


@pytest.mark.parametrize("key", [
    "/groupwire/other/brokers/1", "/groupwire/c/brokers/x", "/groupwire/c/brokers/",
    "/groupwire/c/brokers/-1", "/groupwire/c/partitions/t", "/groupwire/c/partitions/t/x",
    "/groupwire/c/partitions/a/b/1", "/groupwire/c/topics/a/b", "/groupwire/c/future/1",
    "/groupwire/c/controller/x", "/elsewhere",
])
def test_keys_it_does_not_know_parse_as_none(key: str) -> None:
    assert parse_key("c", key) is None


def test_values_round_trip_through_json() -> None:
    b = BrokerInfo(1, "h", 9092, None, "inc")
    assert decode_broker("k", encode_broker(b)) == b
    assert decode_broker("k", encode_broker(BrokerInfo(1, "h", 1, "r1", "i"))).rack == "r1"
    c = ControllerInfo(2, "x")
    assert decode_controller("k", encode_controller(c)) == c
    t = TopicAssignment("t", "uuid", True, ((1, 2), (2, 3)))
    assert decode_topic("k", "t", encode_topic(t)) == t
    s = PartitionState(-1, 4, (1, 2), 9)
    assert decode_partition("k", encode_partition(s)) == s
    assert encode_partition(s) == b'{"isr":[1,2],"leader":-1,"leader_epoch":4,"partition_epoch":9}'


@pytest.mark.parametrize("value, why", [
    (b"{not json", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"leader_epoch":0,"isr":[1],"partition_epoch":0}', "missing 'leader'"),
    (b'{"leader":"1","leader_epoch":0,"isr":[1],"partition_epoch":0}', "'leader' is not an"),
    (b'{"leader":true,"leader_epoch":0,"isr":[1],"partition_epoch":0}', "'leader' is not an"),
    (b'{"leader":1,"leader_epoch":0,"isr":[1,"2"],"partition_epoch":0}', "'isr' is not a list"),
    (b"\xff", "not JSON"),
])
def test_a_bad_partition_value_is_a_value_error_naming_the_key(value: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=rf"etcd key '/groupwire/c/partitions/t/0': {why}"):
        decode_partition("/groupwire/c/partitions/t/0", value)


def test_bad_topic_and_broker_values_name_their_key() -> None:
    with pytest.raises(ValueError, match="'/t': 'replicas' is not a list"):
        decode_topic("/t", "t", b'{"topic_id":"x","internal":false,"replicas":3}')
    with pytest.raises(ValueError, match="'/t': 'replicas' is not a list of integers"):
        decode_topic("/t", "t", b'{"topic_id":"x","internal":false,"replicas":[[1],[null]]}')
    with pytest.raises(ValueError, match="'/b': 'rack' is not a string or null"):
        decode_broker("/b", b'{"node_id":1,"host":"h","port":1,"rack":5,"incarnation":"i"}')
