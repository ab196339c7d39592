"""The "consumer" protocol's subscription and assignment bins (docs/protocol.md §6)."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.consumer import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import LocalProtocolError, RemoteProtocolError

from .message_strategies import msgpack_values

int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
topic_partitions = st.lists(
    st.tuples(st.text(max_size=8), st.lists(int32s, max_size=4)), max_size=4
)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(st.text(max_size=8), max_size=4),
    owned_partitions=topic_partitions,
    generation_id=int32s,
    user_data=st.none() | st.binary(max_size=16),
    rack_id=st.none() | st.text(max_size=8),
)
assignments = st.builds(
    Assignment,
    assigned_partitions=topic_partitions,
    user_data=st.none() | st.binary(max_size=16),
)


def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def test_protocol_type() -> None:
    assert CONSUMER_PROTOCOL_TYPE == "consumer"


def test_worked_example_subscription_bytes() -> None:
    data = encode_subscription(Subscription(topics=["orders"]))
    assert data == (
        b"\x85\xa6topics\x91\xa6orders\xb0owned_partitions\x90\xadgeneration_id\xff"
        b"\xa9user_data\xc0\xa7rack_id\xc0"
    )
    assert len(data) == 69


def test_worked_example_assignment_bytes() -> None:
    data = encode_assignment(Assignment(assigned_partitions=[("orders", [0, 1, 2])]))
    assert data == b"\x82\xb3assigned_partitions\x91\x92\xa6orders\x93\x00\x01\x02\xa9user_data\xc0"
    assert len(data) == 45


@settings(max_examples=100, deadline=None)
@given(subscriptions)
def test_subscription_round_trips(subscription: Subscription) -> None:
    data = encode_subscription(subscription)
    assert decode_subscription(data) == subscription
    assert encode_subscription(decode_subscription(data)) == data


@settings(max_examples=100, deadline=None)
@given(assignments)
def test_assignment_round_trips(assignment: Assignment) -> None:
    data = encode_assignment(assignment)
    assert decode_assignment(data) == assignment
    assert encode_assignment(decode_assignment(data)) == data


def test_absent_and_nil_optional_keys_take_defaults() -> None:
    expected = Subscription(topics=["a"])
    assert decode_subscription(pack({"topics": ["a"]})) == expected
    nils = {"owned_partitions": None, "generation_id": None, "user_data": None, "rack_id": None}
    assert decode_subscription(pack({"topics": ["a"], **nils})) == expected
    assert decode_assignment(pack({"assigned_partitions": []})) == Assignment(
        assigned_partitions=[]
    )


def test_unknown_keys_are_ignored() -> None:
    data = pack({"topics": ["a"], "rack_id": "r1", "future": [1.5, {"x": 1}]})
    assert decode_subscription(data) == Subscription(topics=["a"], rack_id="r1")
    data = pack({"assigned_partitions": [["t", [3]]], "version": 2})
    assert decode_assignment(data).assigned_partitions == [("t", [3])]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "topics: required"),
        ({"topics": None}, "topics: required"),
        ({"topics": "a"}, "topics: expected array"),
        ({"topics": ["a", 1]}, "topics[1]: expected str"),
        ({"topics": [], "generation_id": True}, "generation_id: expected int"),
        ({"topics": [], "generation_id": 1.0}, "generation_id: expected int"),
        ({"topics": [], "generation_id": 2**31}, "generation_id: out of range for int"),
        ({"topics": [], "user_data": "x"}, "user_data: expected bin or nil"),
        ({"topics": [], "rack_id": b"r"}, "rack_id: expected str or nil"),
        ({"topics": [], "owned_partitions": [["t"]]}, "owned_partitions[0]: expected [topic"),
        ({"topics": [], "owned_partitions": [[1, [0]]]}, "owned_partitions[0][0]: expected str"),
        ({"topics": [], "owned_partitions": [["t", 0]]}, "owned_partitions[0][1]: expected arr"),
        ({"topics": [], "owned_partitions": [["t", [0, False]]]}, "[0][1][1]: expected int"),
        ([], "subscription: expected map"),
        ({"topics": [], b"k": 1}, "subscription: map keys must be str"),
    ],
)
def test_subscription_type_errors(value: Any, message: str) -> None:
    with pytest.raises(ConsumerProtocolError) as info:
        decode_subscription(pack(value))
    assert message in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # an empty bin is "owns nothing" for the coordinator, but not an assignment
        b"\xc1",
        pack({"assigned_partitions": []}) + b"\x00",
        b"\x81\xa1k\xd4\x01\x00",  # ext type
        b"\x81\xa2\xff\xfe\x90",  # bad UTF-8 key
        b"\x81\x01\x90",  # int key
        pack({"user_data": None}),
        pack({"assigned_partitions": [["t", [0.0]]]}),
        pack({"assigned_partitions": {"t": [0]}}),
    ],
)
def test_bad_assignments(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


def test_consumer_protocol_error_is_a_remote_protocol_error() -> None:
    assert issubclass(ConsumerProtocolError, RemoteProtocolError)


def test_encoding_what_decoding_would_refuse_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        encode_subscription(Subscription(topics=["a"], generation_id=2**31))
    with pytest.raises(LocalProtocolError):
        encode_assignment(Assignment(assigned_partitions=[("t", [True])]))


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=48), msgpack_values.map(pack)))
def test_garbage_raises_only_consumer_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ConsumerProtocolError):
        decode_subscription(data)
    with contextlib.suppress(ConsumerProtocolError):
        decode_assignment(data)
