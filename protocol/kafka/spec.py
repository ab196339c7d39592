"""The shape ``schema.py`` is written in: Kafka's message schemas, reduced to what a codec
needs and restricted to the versions groupwire serves.

Kafka describes each message once for all its versions: a field says in which versions
it exists, may be null, or travels as a tagged field. ``schemagen`` keeps exactly that
(no docs, no entity types, nothing outside the served range), and ``compiler`` reads it
to write one decoder and one encoder per version.
"""

from __future__ import annotations

from dataclasses import dataclass

Versions = tuple[int, int]
"""An inclusive range of API versions, ``(lo, hi)``."""

Default = bool | int | float | str | bytes | tuple[()] | None
"""A field's value when the wire does not carry it (see :attr:`Field.default`)."""

PRIMITIVES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint16", "float64",
    "string", "bytes", "records", "uuid",
})
"""Every type a field may have besides ``struct``."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or of a struct inside it."""

    name: str
    """snake_case of Kafka's name: ``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    type: str
    """One of :data:`PRIMITIVES`, or ``struct`` (then :attr:`fields` lists its fields)."""
    versions: Versions
    """The versions that carry the field (clipped to the served range)."""
    array: bool = False
    """An array of ``type``."""
    nullable: Versions | None = None
    """The versions in which it may be null, if any."""
    tag: int | None = None
    """Its tag, for the versions in :attr:`tagged`."""
    tagged: Versions | None = None
    """The versions in which it travels in the tagged-fields section."""
    default: Default = None
    """Kafka's default, as its generator resolves it: the schema's ``default`` or the
    type's zero (0, False, "", b"", the zero UUID). For arrays and structs ``()`` means
    "empty array" / "a struct of its fields' defaults", None means null; for ``records``
    it is None."""
    fields: tuple[Field, ...] = ()

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def is_nullable(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def is_tagged(self, version: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= version <= self.tagged[1]


@dataclass(frozen=True, slots=True)
class Message:
    """One direction of one API: its request or its response."""

    api_key: int
    name: str
    """Kafka's API name without the direction: ``Produce``."""
    response: bool
    versions: Versions
    """The versions groupwire serves."""
    flexible: int | None
    """The first flexible version (compact strings and arrays, tagged fields), as Kafka's
    schema has it even when outside :attr:`versions`; None if the API has none."""
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version >= self.flexible
