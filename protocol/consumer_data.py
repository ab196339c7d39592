"""The ``"consumer"`` protocol's subscription and assignment, as data: what both of its
encodings decode to (msgpack, ``protocol.consumer``; Kafka's own bytes,
``protocol.kafka.consumer_protocol``), kept apart from either so each can import them."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupwire.protocol.errors import RemoteProtocolError

__all__ = ["Assignment", "ConsumerProtocolError", "Subscription"]


class ConsumerProtocolError(RemoteProtocolError):
    """A subscription or assignment bin that does not hold what §6 says."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for: its topics, plus what it owns now (cooperative protocols)."""

    topics: list[str]
    owned_partitions: list[tuple[str, list[int]]] = field(default_factory=list)
    generation_id: int = -1
    user_data: bytes | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives a member: ``[(topic, [partition, ...]), ...]``."""

    assigned_partitions: list[tuple[str, list[int]]]
    user_data: bytes | None = None
