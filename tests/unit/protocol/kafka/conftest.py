"""Shared by the Kafka codec's tests: sample bodies for every served API version, read off
the schema table, and a bridge to kafka-python's protocol classes (the oracle)."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator
from typing import Any

from groupwire.protocol.kafka import schema
from groupwire.protocol.kafka.spec import Field, Message

HAVE_KAFKA_PYTHON = importlib.util.find_spec("kafka") is not None


def served_versions() -> Iterator[tuple[Message, int]]:
    """Every served (message, version), requests and responses."""
    for table in (schema.REQUESTS, schema.RESPONSES):
        for message in table.values():
            for version in range(message.versions[0], message.versions[1] + 1):
                yield message, version


def case_id(message: Message, version: int, *extra: str) -> str:
    direction = "response" if message.response else "request"
    return "-".join([message.name, f"v{version}", direction, *extra])


# --- sample values ------------------------------------------------------------------------

_INT_RANGES = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(2**31), 2**31 - 1),
               "int64": (-(2**63), 2**63 - 1), "uint16": (0, 65535)}


def _scalar(f: Field, version: int, full: bool, rng: random.Random) -> Any:
    kind = f.type
    if kind in _INT_RANGES:
        if f.name.endswith("authorized_operations"):  # kafka-python reads these as bit sets
            return rng.randrange(0, 2**31 - 1)
        lo, hi = _INT_RANGES[kind]
        return rng.choice([lo, hi, -1, 0, rng.randint(lo, hi)]) if full else 0
    if kind == "bool":
        return full
    if kind == "float64":
        return rng.random() * 1000 if full else 0.0
    if kind == "uuid":
        return rng.randbytes(16)
    nullable = f.is_nullable(version)
    if not full and nullable:
        return None
    if kind == "string":
        return f"{f.name}-{rng.randint(0, 999)}-é✓" if full else ""
    if kind in ("bytes", "records"):
        return rng.randbytes(rng.randint(1, 40)) if full else b""
    raise AssertionError(kind)


def sample_value(f: Field, version: int, full: bool, rng: random.Random) -> Any:
    if f.array:
        if not full and f.is_nullable(version):
            return None
        count = (3 if f.type != "struct" else 2) if full else 0
        return [_element(f, version, full, rng) for _ in range(count)]
    return _element(f, version, full, rng)


def _element(f: Field, version: int, full: bool, rng: random.Random) -> Any:
    if f.type == "struct":
        if not f.array and not full and f.is_nullable(version):
            return None
        return sample_body(f.fields, version, full=full, rng=rng)
    return _scalar(f, version, full, rng)


def sample_body(fields: tuple[Field, ...] | Message, version: int, *, full: bool,
                rng: random.Random) -> dict[str, Any]:
    """Every field the version carries, with a value: ``full`` picks non-default values
    (two elements per array, tagged fields set), otherwise nulls where nullable, empty
    arrays and no tagged fields."""
    if isinstance(fields, Message):
        fields = fields.fields
    body = {}
    for f in fields:
        if not f.present(version) or (f.is_tagged(version) and not full):
            continue
        body[f.name] = sample_value(f, version, full, rng)
    return body


def default_of(f: Field) -> Any:
    """What the decoder gives for a field the wire did not carry."""
    if f.array:
        return None if f.default is None else []
    if f.type == "struct":
        return None if f.default is None else {g.name: default_of(g) for g in f.fields}
    return f.default


def expected_decoded(fields: tuple[Field, ...], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the decoder gives it back: every field, defaults where not given."""
    out = {}
    for f in fields:
        if f.name not in body:
            out[f.name] = default_of(f)
            continue
        value = body[f.name]
        if f.type == "struct" and value is not None:
            value = ([expected_decoded(f.fields, e) for e in value] if f.array
                     else expected_decoded(f.fields, value))
        out[f.name] = value
    return out


def plain(value: Any) -> Any:
    """memoryviews as bytes, recursively, to compare decoded bodies."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# --- kafka-python -------------------------------------------------------------------------

_RENAMED = {"cluster_authorized_operations": "authorized_operations",
            "topic_authorized_operations": "authorized_operations"}
"""kafka-python patches Metadata's two authorized-operations fields to one name."""


def their_class(api_key: int, response: bool) -> Any:
    """kafka-python's JSON-driven class for the API (3.x's ``kafka.protocol`` packages)."""
    import kafka.protocol.admin as admin
    import kafka.protocol.consumer as consumer
    import kafka.protocol.metadata as metadata
    import kafka.protocol.producer as producer
    from kafka.protocol import sasl

    name = schema.API_NAMES[api_key] + ("Response" if response else "Request")
    for module in (admin, consumer, metadata, producer, sasl):
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise LookupError(name)


def _their_value(field: Any, value: Any, version: int) -> Any:
    if value is None:
        return None
    if field.is_struct_array():
        return [their_struct(field, e, version) for e in value]
    if field.is_struct():
        return their_struct(field, value, version)
    if field.type_str == "bitfield":
        return {bit for bit in range(32) if value >> bit & 1}
    return value


def their_struct(struct: Any, body: dict[str, Any], version: int) -> Any:
    """``body`` as an instance of kafka-python's data class for ``struct``."""
    kwargs = {}
    for name, value in body.items():
        theirs = struct.fields.get(name) or struct.fields[_RENAMED[name]]
        kwargs[theirs.name] = _their_value(theirs, value, version)
    return struct.data_class(version=version, **kwargs)


def their_message(api_key: int, response: bool, version: int, body: dict[str, Any]) -> Any:
    cls = their_class(api_key, response)
    return their_struct(cls._struct, body, version)


def old_values(fields: tuple[Field, ...], body: dict[str, Any], version: int) -> tuple[Any, ...]:
    """``body`` as the positional tuple kafka-python's hand-written (``kafka.protocol.old``)
    classes take: the version's fields in wire order, nested alike."""
    out = []
    for f in fields:
        if not f.present(version):
            continue
        value = body[f.name]
        if f.type == "struct" and value is not None:
            value = ([old_values(f.fields, e, version) for e in value] if f.array
                     else old_values(f.fields, value, version))
        elif f.name.endswith("authorized_operations"):
            value = {bit for bit in range(32) if value >> bit & 1}
        out.append(value)
    return tuple(out)
