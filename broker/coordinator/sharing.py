"""Identical values held once per coordinator: members of one group usually send the same
protocol lists, and many groups consuming one topic hand out the same assignments, so one
shared copy instead of one per member is most of a member's memory in a large group.

Kept by the :class:`~groupwire.broker.coordinator.engine.Engine`, never at module level: a
coordinator's caches die with it. Bounded; forgotten wholesale when full, which only costs
sharing, never correctness.
"""

from __future__ import annotations

import sys
from typing import Final

from groupwire.broker.coordinator.member import NO_PARTITIONS, TP, Protocols
from groupwire.protocol.consumer import ConsumerProtocolError, decode_assignment

Owned = frozenset[TP] | None
"""What an assignment owns; None: not a valid assignment (its member is opaque)."""


def decode_owned(assignment: bytes) -> Owned:
    """An empty bin owns nothing; a bin that is not a valid assignment is opaque."""
    if not assignment:
        return NO_PARTITIONS
    try:
        decoded = decode_assignment(assignment)
    except ConsumerProtocolError:
        return None
    return frozenset((topic, p) for topic, parts in decoded.assigned_partitions for p in parts)


class Sharing:
    """The canonical copies of protocol lists and assignments seen so far."""

    __slots__ = ("_protocols", "_assignments")

    PROTOCOLS_MAX: Final = 4096
    ASSIGNMENTS_MAX: Final = 8192

    def __init__(self) -> None:
        self._protocols: dict[Protocols, Protocols] = {}
        self._assignments: dict[bytes, tuple[bytes, Owned]] = {}

    def protocols(self, protocols: Protocols) -> Protocols:
        """The canonical copy of ``protocols``, its names interned."""
        shared = self._protocols.get(protocols)
        if shared is not None:
            return shared
        if len(self._protocols) >= self.PROTOCOLS_MAX:
            self._protocols.clear()
        protocols = tuple((sys.intern(name), metadata) for name, metadata in protocols)
        self._protocols[protocols] = protocols
        return protocols

    def assignment(self, assignment: bytes) -> tuple[bytes, Owned]:
        """The canonical copy of ``assignment`` and what it owns (see :func:`decode_owned`)."""
        if not assignment:
            return b"", NO_PARTITIONS
        hit = self._assignments.get(assignment)
        if hit is not None:
            return hit
        if len(self._assignments) >= self.ASSIGNMENTS_MAX:
            self._assignments.clear()
        entry = (assignment, decode_owned(assignment))
        self._assignments[assignment] = entry
        return entry
