"""Our codec against an independent one written only from docs/protocol.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol import messages as m
from groupwire.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.errors import MalformedRequestError

from . import independent_codec as ind
from .message_strategies import message_strategy

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REQUEST_KEYS = sorted(ind.REQUESTS)
RESPONSE_KEYS = sorted(ind.RESPONSES)


def plain(message: Any) -> Any:
    """A dataclass as the independent codec's dicts: tuples (topic, parts) become lists."""

    def lists(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: lists(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [lists(x) for x in v]
        return v

    return lists(dataclasses.asdict(message))


def test_independent_codec_shares_no_code_with_ours() -> None:
    source = Path(ind.__file__).read_text(encoding="utf-8")
    assert "import protocol" not in source and "from protocol" not in source


@pytest.mark.parametrize("key", REQUEST_KEYS)
@FUZZ
@given(data=st.data())
def test_requests_agree(key: int, data: st.DataObject) -> None:
    message = data.draw(message_strategy(m.REQUEST_TYPES[m.ApiKey(key)]))
    ours = encode_request(21, message, client_id="c")
    theirs = ind.encode_request(key, 21, "c", plain(message))
    assert ours == theirs
    assert ind.decode_request(ours) == (key, 21, "c", plain(message))
    assert decode_request(theirs).request == message


@pytest.mark.parametrize("key", RESPONSE_KEYS)
@FUZZ
@given(data=st.data())
def test_responses_agree(key: int, data: st.DataObject) -> None:
    cls = m.RESPONSE_TYPES[m.ApiKey(key)]
    message = data.draw(message_strategy(cls))
    ours = encode_response(8, message)
    theirs = ind.encode_response(key, 8, plain(message))
    assert ours == theirs
    assert ind.decode_response(key, ours) == (8, plain(message))
    assert decode_response(theirs, cls) == (8, message)


@pytest.mark.parametrize("key", RESPONSE_KEYS)
def test_independent_defaults_match_the_dataclass_defaults(key: int) -> None:
    cls = m.RESPONSE_TYPES[m.ApiKey(key)]
    payload = msgpack.packb([1, {"error_code": 0}])
    assert ind.decode_response(key, payload) == (1, plain(cls()))


def test_worked_example_join_from_the_independent_codec() -> None:
    subscription = msgpack.packb(
        {"topics": ["orders"], "owned_partitions": [], "generation_id": -1,
         "user_data": None, "rack_id": None}
    )  # fmt: skip
    payload = ind.encode_request(
        11,
        7,
        "billing-1",
        {
            "group_id": "billing",
            "member_id": "",
            "session_timeout_ms": 45000,
            "rebalance_timeout_ms": 300000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription}],
            "reason": "initial join",
        },
    )
    assert len(payload) == 237 and len(subscription) == 69
    frame = decode_request(payload)
    assert isinstance(frame.request, m.JoinGroupRequest)
    assert frame.request.protocols[0].metadata == subscription
    assert frame.request.reason == "initial join"


def test_both_reject_the_same_nested_field_with_the_same_path() -> None:
    body = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": "x"}]}]}
    payload = msgpack.packb([1, 0, 1, None, body])
    with pytest.raises(ind.Invalid, match=r"^topics\[0\]\.partitions\[0\]\.fetch_offset: "):
        ind.decode_request(payload)
    with pytest.raises(MalformedRequestError) as info:
        decode_request(payload)
    assert info.value.message == "topics[0].partitions[0].fetch_offset: expected long"
