"""Byte for byte against kafka-python 3.0.12, an implementation nobody here wrote.

Every served API at every served version, request and response, flexible or not, twice:
once with every field set (non-default values, two elements per array, tagged fields,
non-ASCII strings) and once sparse (nulls where the version allows them, empty arrays).
Each value is encoded by us and by kafka-python's JSON-driven classes, header included,
and the bytes must be equal; then we decode theirs and must get the value back.

kafka-python's hand-written classes of 2.x (``kafka.protocol.old``) are a second oracle
that does not read Kafka's JSON at all: for the non-flexible versions they have, their
bytes must equal ours too.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from typing import Any

import pytest

from groupwire.protocol.kafka import codec
from groupwire.protocol.kafka.spec import Message
from tests.unit.protocol.kafka.conftest import (
    HAVE_KAFKA_PYTHON,
    case_id,
    expected_decoded,
    old_values,
    plain,
    sample_body,
    served_versions,
    their_message,
)

pytestmark = [
    pytest.mark.skipif(not HAVE_KAFKA_PYTHON,
                       reason="kafka-python (the dev extra) is not installed"),
    # kafka-python 3.0.12 reads its schemas with importlib.resources' legacy functions
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

CASES = [pytest.param(m, v, full, id=case_id(m, v, "full" if full else "sparse"))
         for m, v in served_versions() for full in (True, False)]


def _ours(message: Message, version: int, correlation_id: int, client_id: str | None,
          body: dict[str, Any]) -> bytes:
    if message.response:
        header = codec.RequestHeader(message.api_key, version, correlation_id, client_id)
        return codec.encode_response(header, body)
    return codec.encode_request(message.api_key, version, correlation_id, client_id, body)


@pytest.mark.parametrize(("message", "version", "full"), CASES)
def test_same_bytes_as_kafka_python_and_theirs_decode(message: Message, version: int,
                                                      full: bool) -> None:
    rng = random.Random(case_id(message, version, str(full)))
    body = sample_body(message, version, full=full, rng=rng)
    correlation_id = rng.randint(-(2**31), 2**31 - 1)
    client_id = "client-é" if full else None

    ours = _ours(message, version, correlation_id, client_id, body)
    obj = their_message(message.api_key, message.response, version, body)
    obj.with_header(correlation_id=correlation_id, client_id=client_id)
    theirs = bytes(obj.encode(header=True))
    assert ours == theirs

    expected = expected_decoded(message.fields, body)
    if message.response:
        got_id, got = codec.decode_response(message.api_key, version, theirs)
        assert got_id == correlation_id
    else:
        request = codec.decode_request(theirs)
        assert request.header == codec.RequestHeader(message.api_key, version,
                                                     correlation_id, client_id)
        got = request.body
    assert plain(got) == expected


def _old_class(message: Message, version: int) -> Any:
    import kafka.protocol.old as old

    name = message.name + ("Response" if message.response else "Request")
    for info in pkgutil.iter_modules(old.__path__):
        module = importlib.import_module(f"{old.__name__}.{info.name}")
        versions = getattr(module, name, None)
        if isinstance(versions, list):
            return versions[version] if version < len(versions) else None
    return None


OLD_SHAPES_DIFFER = {
    (3, False): "Metadata requests: topics as strings, not one-field structs",
    (37, False): "CreatePartitions requests: assignments nested another way",
    (33, True): "AlterConfigs responses: the old list names the request class at v1",
}
"""Where the hand-written classes take values of another shape (same wire format)."""

OLD_CASES = [pytest.param(m, v, id=case_id(m, v)) for m, v in served_versions()
             if not m.is_flexible(v) and (m.api_key, m.response) not in OLD_SHAPES_DIFFER]


@pytest.mark.parametrize(("message", "version"), OLD_CASES)
def test_same_bytes_as_kafka_pythons_hand_written_classes(message: Message,
                                                          version: int) -> None:
    cls = _old_class(message, version)
    if cls is None:
        pytest.skip(f"kafka.protocol.old has no {case_id(message, version)}")
    rng = random.Random(case_id(message, version, "old"))
    body = sample_body(message, version, full=True, rng=rng)
    theirs = bytes(cls(*old_values(message.fields, body, version)).encode())
    ours = _ours(message, version, 99, None, body)
    header = 4 if message.response else 10
    assert ours[header:] == theirs


def test_every_served_api_is_checked_at_its_min_and_max_version() -> None:
    covered = {(m.api_key, m.response, v) for m, v in served_versions()}
    for api_key, (lo, hi) in codec.SERVED.items():
        for response in (False, True):
            assert {(api_key, response, lo), (api_key, response, hi)} <= covered
