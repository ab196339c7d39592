"""Wire scalar types for message fields.

The codec reads these annotations to know the range an integer must fit in; at run time
they are plain ``int``. Using ``Annotated`` keeps the dataclasses readable and typed.
"""

from __future__ import annotations

from typing import Annotated, Final


class IntRange:
    """Marks an ``int`` field with the signed range the wire allows."""

    __slots__ = ("name", "lo", "hi")

    def __init__(self, name: str, bits: int) -> None:
        self.name = name
        self.lo = -(1 << (bits - 1))
        self.hi = (1 << (bits - 1)) - 1

    def __repr__(self) -> str:
        return f"IntRange({self.name})"


INT32_RANGE: Final = IntRange("int", 32)
INT64_RANGE: Final = IntRange("long", 64)

Int32 = Annotated[int, INT32_RANGE]
"""docs/protocol.md's ``int``: signed 32-bit."""

Int64 = Annotated[int, INT64_RANGE]
"""docs/protocol.md's ``long``: signed 64-bit."""

TopicPartitions = list[tuple[str, list[Int32]]]
"""``[[topic, [partition, ...]], ...]``, the compact form used by events and history."""
