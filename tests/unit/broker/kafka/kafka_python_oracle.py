"""kafka-python 3.0.12's protocol classes as the oracle for Kafka bodies.

Nobody here wrote them, so a body that they encode and decode back unchanged has
Kafka's field names, at the versions that carry them, with values the wire can hold.
``request`` makes a request body as a client sends it (encoded by kafka-python, decoded
back); ``response`` checks a translator's answer the same way and returns what a
kafka-python client would read. kafka-python names two authorized-operations fields
differently from Kafka's schema (and reads them as sets of operation codes): the
renaming is undone here, so callers speak the schema's names throughout.
"""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]

NOT_ASKED = -(2**31)

_RENAMED: dict[str, dict[tuple[str, ...], str]] = {
    "MetadataResponse": {("cluster_authorized_operations",): "authorized_operations",
                         ("topics", "topic_authorized_operations"): "authorized_operations"},
    "DescribeClusterResponse": {("cluster_authorized_operations",): "authorized_operations"},
}
"""kafka-python's names for fields the schema names otherwise, by path."""


def _bits(value: int) -> set[int] | None:
    if value == NOT_ASKED:
        return None
    return {bit for bit in range(31) if value & (1 << bit)}


def _unbits(value: set[int] | None) -> int:
    if value is None:
        return NOT_ASKED
    return sum(1 << bit for bit in value)


def _build(fields: Any, body: Body, version: int, path: tuple[str, ...], kind: str) -> Body:
    """kafka-python's constructor arguments for ``body``; every key must be a field of
    the message at ``version``."""
    renamed = _RENAMED.get(kind, {})
    out: Body = {}
    for key, value in body.items():
        where = (*path, key)
        name = renamed.get(where, key)
        field = fields.get(name)
        assert field is not None, f"{kind} v{version}: {'.'.join(where)} is not a field"
        assert field.for_version_q(version), \
            f"{kind} v{version}: {'.'.join(where)} is not in this version"
        if name != key:
            out[name] = _bits(value)
        elif field.is_struct_array():
            out[name] = None if value is None else [
                field.data_class(**_build(field.fields, item, version, where, kind))
                for item in value]
        elif field.is_struct():
            out[name] = field.data_class(**_build(field.fields, value, version, where, kind))
        else:
            out[name] = value
    return out


def _named_back(decoded: Body, path: tuple[str, ...], kind: str) -> Body:
    """kafka-python's decoded dict under the schema's names, bitfields as ints."""
    schema_names = {(where[:-1], theirs): where[-1]
                    for where, theirs in _RENAMED.get(kind, {}).items()}
    back: Body = {}
    for key, value in decoded.items():
        ours = schema_names.get((path, key))
        if ours is not None:
            back[ours] = _unbits(value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            back[key] = [_named_back(item, (*path, key), kind) for item in value]
        else:
            back[key] = value
    return back


def _round_trip(cls: Any, version: int, body: Body) -> Body:
    kind = cls.__name__
    message = cls(version=version, **_build(cls._struct.fields, body, version, (), kind))
    decoded = cls.decode(message.encode(version=version), version=version)
    return _named_back(decoded.to_dict(json=False), (), kind)


def request(cls: Any, version: int, **fields: Any) -> Body:
    """A request body as a kafka-python client sends it at ``version``."""
    return _round_trip(cls, version, fields)


def response(cls: Any, version: int, body: Body) -> Body:
    """``body`` as a kafka-python client reads it; fails on a field the message does not
    have at ``version`` or a value the wire cannot carry."""
    return _round_trip(cls, version, body)
