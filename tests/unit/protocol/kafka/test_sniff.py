"""Five bytes tell a Kafka request from a msgpack one (docs/protocol.md §13.1)."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from groupwire.protocol.codec import encode_request
from groupwire.protocol.framing import frame
from groupwire.protocol.kafka.codec import SERVED, with_size
from groupwire.protocol.kafka.codec import encode_request as encode_kafka
from groupwire.protocol.kafka.sniff import DECIDING_BYTES, is_kafka_frame, refused_by_length
from groupwire.protocol.messages import ApiVersionsRequest, HeartbeatRequest, MetadataRequest


def test_every_kafka_request_served_opens_as_kafka() -> None:
    for api_key, (low, _) in SERVED.items():
        data = with_size(encode_kafka(api_key, low, 1, "c", {}))
        assert is_kafka_frame(data[:DECIDING_BYTES]), api_key


def test_msgpack_requests_open_as_msgpack() -> None:
    for request in (ApiVersionsRequest(), MetadataRequest(topics=None),
                    HeartbeatRequest(group_id="g", generation_id=1, member_id="m")):
        data = frame(encode_request(7, request, "client"))
        assert not is_kafka_frame(data[:DECIDING_BYTES])


@given(st.one_of(st.lists(st.integers(-(1 << 63), (1 << 64) - 1)),
                 st.dictionaries(st.text(), st.booleans())))
def test_no_msgpack_array_or_map_starts_with_a_zero_byte(value: object) -> None:
    payload = msgpack.packb(value)
    assert payload[0] != 0


def test_a_length_both_doors_refuse_decides_without_a_fifth_byte() -> None:
    assert refused_by_length(b"\x00\x00\x00\x00", 1024)
    assert refused_by_length((1025).to_bytes(4, "big"), 1024)
    assert not refused_by_length((1024).to_bytes(4, "big"), 1024)
    assert not refused_by_length(b"\x00\x00\x00", 1024)
    assert not is_kafka_frame(b"\x00\x00\x00\x00")
