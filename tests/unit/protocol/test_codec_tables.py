"""The codec tables write each codec on first lookup (issue 25) and hold what the tables
written at import held: the same classes, on the same side, under the same limits."""

from __future__ import annotations

import dataclasses

import pytest

from groupwire.protocol import messages as m
from groupwire.protocol.bodies import BODY_CODECS, BodyCodecs
from groupwire.protocol.codegen import FieldError
from groupwire.protocol.limits import MAX_ARRAY_ITEMS
from groupwire.protocol.types import Int32

MESSAGE_CLASSES = {cls for cls in vars(m).values()
                   if isinstance(cls, type) and dataclasses.is_dataclass(cls)
                   and cls.__module__ == m.__name__}


def _fresh() -> BodyCodecs:
    """Tables of their own, nothing looked up yet (BODY_CODECS is shared by all tests)."""
    return BodyCodecs.generate(m.REQUEST_TYPES.values(),
                               [m.Response, *m.RESPONSE_TYPES.values()])


def test_the_tables_list_every_message_and_every_class_nested_in_one() -> None:
    codecs = _fresh()
    assert set(codecs.decoders) == MESSAGE_CLASSES - {m.Request}  # no message is a bare one
    assert len(codecs.decoders) == len(MESSAGE_CLASSES) - 1
    requests, responses = set(codecs.request_encoders), set(codecs.response_encoders)
    assert requests | responses == set(codecs.decoders) and not requests & responses
    assert set(m.REQUEST_TYPES.values()) <= requests
    assert {m.Response, *m.RESPONSE_TYPES.values()} <= responses
    assert m.JoinGroupRequestProtocol in requests and m.JoinGroupResponseMember in responses


def test_a_codec_is_written_once_and_kept() -> None:
    codecs = _fresh()
    first = codecs.decoders[m.HeartbeatRequest]
    assert codecs.decoders[m.HeartbeatRequest] is first
    assert codecs.response_encoders[m.HeartbeatResponse] is codecs.response_encoders[
        m.HeartbeatResponse]


def test_classes_outside_a_table_are_not_in_it() -> None:
    codecs = _fresh()
    assert m.HeartbeatResponse not in codecs.request_encoders
    assert m.HeartbeatRequest not in codecs.response_encoders
    assert m.Request not in codecs.decoders and "HeartbeatRequest" not in codecs.decoders
    with pytest.raises(KeyError):
        codecs.request_encoders[m.HeartbeatResponse]
    with pytest.raises(KeyError):
        codecs.decoders[int]


def test_a_nested_request_class_looked_up_first_is_still_read_within_the_limits() -> None:
    codecs = _fresh()
    decode = codecs.decoders[m.OffsetCommitRequestTopic]  # before any request
    too_many = {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 0}]
                * (MAX_ARRAY_ITEMS + 1)}
    with pytest.raises(FieldError, match="over the limit"):
        decode(too_many)
    response_side = codecs.decoders[m.OffsetCommitResponseTopic]
    assert len(response_side({"name": "t", "partitions": [{}] * (MAX_ARRAY_ITEMS + 1)})
               .partitions) == MAX_ARRAY_ITEMS + 1


def test_the_tables_are_read_only() -> None:
    table: object = BODY_CODECS.decoders
    with pytest.raises(TypeError):
        table[m.HeartbeatRequest] = None  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BODY_CODECS.decoders = {}  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class _Shared:
    value: Int32 = 0


@dataclasses.dataclass(frozen=True)
class _Asks:
    shared: _Shared


@dataclasses.dataclass(frozen=True)
class _Answers:
    shared: _Shared


def test_a_class_nested_in_a_request_and_a_response_is_refused() -> None:
    """One decoder per class: it cannot be bounded for the request and not the response."""
    codecs = BodyCodecs.generate([_Asks], [_Answers])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="_Shared decoded under two array limits"):
        list(codecs.decoders)
