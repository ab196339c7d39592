"""Value types the SDK hands to applications (familiar to aiokafka users)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of a topic; prints as ``orders[3]`` (listener callbacks print sets
    of these, where the long ``TopicPartition(topic=..., partition=...)`` drowns them)."""

    topic: str
    partition: int

    def __repr__(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def __str__(self) -> str:  # an assignment would make a NamedTuple field of it
        return f"{self.topic}[{self.partition}]"


@dataclass(slots=True)
class Record:
    """One consumed record; ``timestamp_ms`` is the producer's create time.

    Treat it as read-only. It is not a frozen dataclass only because that makes building
    one several times slower, and a consumer builds one per record.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the offset of the *next* record to read, as in Kafka."""

    offset: int
    metadata: str = ""


@dataclass(slots=True, unsafe_hash=True)
class RecordMetadata:
    """Where a produced record landed (read-only by convention; not frozen, for speed)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int = -1


def parse_bootstrap(bootstrap: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or a list of ``"host:port"`` -> ``[(host, port), ...]``."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[tuple[str, int]] = []
    for item in items:
        text = item.strip()
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap: expected HOST:PORT, got {text!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("bootstrap: no address given")
    return out
