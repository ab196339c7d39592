"""Malformed input gets KafkaCodecError, never another exception, never a huge allocation:
every truncation of a valid frame of every served API version, huge counts and lengths,
bad UTF-8, trailing bytes, over-long varints, and random or mutated frames."""

from __future__ import annotations

import contextlib
import random
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol.kafka import codec
from groupwire.protocol.kafka.codec import (
    KafkaCodecError,
    RequestHeader,
    UnsupportedKafkaVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.kafka.spec import Message
from tests.unit.protocol.kafka.conftest import case_id, sample_body, served_versions

METADATA, PRODUCE, HEARTBEAT, DESCRIBE_SCRAM, API_VERSIONS = 3, 0, 12, 50, 18


def _frame(message: Message, version: int) -> bytes:
    body = sample_body(message, version, full=True, rng=random.Random(case_id(message, version)))
    if message.response:
        return encode_response(RequestHeader(message.api_key, version, 5, None), body)
    return encode_request(message.api_key, version, 5, "client", body)


FRAMES = [(m, v, _frame(m, v)) for m, v in served_versions()]


def _decode(message: Message, version: int, payload: Any) -> Any:
    if message.response:
        return decode_response(message.api_key, version, payload)
    return decode_request(payload)


@pytest.mark.parametrize(("message", "version", "payload"),
                         [pytest.param(*f, id=case_id(f[0], f[1])) for f in FRAMES])
def test_every_truncation_is_refused(message: Message, version: int, payload: bytes) -> None:
    _decode(message, version, payload)  # the whole frame is valid
    for cut in range(len(payload)):
        for short in (payload[:cut], memoryview(payload)[:cut]):
            with pytest.raises(KafkaCodecError) as info:
                _decode(message, version, short)
            assert not isinstance(info.value, UnsupportedKafkaVersion)
            if not message.response and cut >= 16:  # the header was whole
                assert info.value.header == RequestHeader(message.api_key, version, 5,
                                                          "client")


@pytest.mark.parametrize(("message", "version", "payload"),
                         [pytest.param(*f, id=case_id(f[0], f[1])) for f in FRAMES[::7]])
def test_trailing_bytes_are_refused_after_a_response_and_ignored_after_a_request(
        message: Message, version: int, payload: bytes) -> None:
    if message.response:
        with pytest.raises(KafkaCodecError, match="1 bytes after the body"):
            _decode(message, version, payload + b"\x00")
        return
    # Kafka's broker parses a request's body and never looks past it
    assert _decode(message, version, payload + b"\x00") == _decode(message, version, payload)


def test_a_partial_header_still_names_what_it_read() -> None:
    with pytest.raises(KafkaCodecError) as info:
        decode_request(struct.pack(">hhi", 12, 3, 99) + b"\x00")
    err = info.value
    assert err.header is None
    assert (err.api_key, err.api_version, err.correlation_id) == (12, 3, 99)
    with pytest.raises(KafkaCodecError) as info:
        decode_request(b"\x00\x0c\x00")
    assert info.value.api_key == 12 and info.value.api_version is None


def test_bad_utf8_in_the_client_id_and_in_the_body() -> None:
    with pytest.raises(KafkaCodecError, match="client id is not UTF-8") as info:
        decode_request(struct.pack(">hhih", 12, 0, 4, 2) + b"\xff\xfe" + b"rest")
    assert info.value.header is None and info.value.correlation_id == 4
    good = encode_request(HEARTBEAT, 0, 4, "c", {"group_id": "ab", "member_id": "m"})
    bad = good.replace(b"\x00\x02ab", b"\x00\x02\xc3\x28")
    with pytest.raises(KafkaCodecError, match="not UTF-8") as info:
        decode_request(bad)
    assert info.value.header == RequestHeader(HEARTBEAT, 0, 4, "c")
    with pytest.raises(KafkaCodecError, match="not UTF-8"):
        decode_request(memoryview(bad))


@pytest.mark.parametrize("count", [2**31 - 1, 10**6, 5])
def test_huge_counts_are_refused_before_anything_is_allocated(count: int) -> None:
    head = struct.pack(">hhih", METADATA, 1, 1, -1)
    with pytest.raises(KafkaCodecError, match=f"{count} items in 6 bytes"):
        decode_request(head + struct.pack(">i", count) + b"\x00\x01t" + b"\x00" * 3)
    # compact: a 5-byte varint count
    head = struct.pack(">hhih", DESCRIBE_SCRAM, 0, 1, -1) + b"\x00"
    with pytest.raises(KafkaCodecError, match="items in"):
        decode_request(head + b"\xff\xff\xff\xff\x0f" + b"\x00")


def test_huge_lengths_are_refused() -> None:
    body = {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}]}
    good = encode_request(PRODUCE, 3, 1, None, body)
    bad = good[:-7] + struct.pack(">i", 2**31 - 1) + b"abc"
    with pytest.raises(KafkaCodecError, match="length 2147483647"):
        decode_request(bad)
    with pytest.raises(KafkaCodecError, match="length 32767"):
        decode_request(struct.pack(">hhih", HEARTBEAT, 0, 1, -1) + struct.pack(">h", 32767) + b"x")


def test_overlong_varints_and_tag_counts_are_refused() -> None:
    head = struct.pack(">hhih", DESCRIBE_SCRAM, 0, 1, -1)
    with pytest.raises(KafkaCodecError, match="longer than 5 bytes"):
        decode_request(head + b"\x00" + b"\x80" * 6 + b"\x01")
    with pytest.raises(KafkaCodecError, match="tagged fields"):  # in the request header
        decode_request(head + b"\x7f" + b"\x00" * 4)


# --- random and mutated frames ------------------------------------------------------------

_SERVED_PAIRS = [(k, v) for k, (lo, hi) in codec.SERVED.items() for v in range(lo, hi + 1)]


def _only_codec_errors(fn: Any, *args: Any) -> None:
    """Decoding either succeeds or raises KafkaCodecError (anything else fails the test)."""
    with contextlib.suppress(KafkaCodecError):
        fn(*args)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=st.sampled_from(_SERVED_PAIRS), body=st.binary(max_size=64),
       view=st.booleans())
def test_random_bodies_under_a_valid_header(pair: tuple[int, int], body: bytes,
                                            view: bool) -> None:
    payload = struct.pack(">hhih", *pair, 1, 1) + b"c" + body
    _only_codec_errors(decode_request, memoryview(payload) if view else payload)
    _only_codec_errors(decode_response, *pair, struct.pack(">i", 1) + body)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(FRAMES) - 1), data=st.data())
def test_mutated_frames(index: int, data: st.DataObject) -> None:
    message, version, payload = FRAMES[index]
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        at = data.draw(st.integers(0, len(mutated)), label="at")
        kind = data.draw(st.sampled_from(["set", "insert", "delete"]), label="kind")
        value = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]), label="byte")
        if kind == "insert":
            mutated[at:at] = bytes([value])
        elif at < len(mutated):
            if kind == "set":
                mutated[at] = value
            else:
                del mutated[at]
    _only_codec_errors(_decode, message, version, bytes(mutated))
    _only_codec_errors(_decode, message, version, memoryview(mutated))
