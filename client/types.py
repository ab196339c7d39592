"""Value types the SDK hands to applications (familiar to aiokafka users), and the
bootstrap arguments the clients take."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple

if TYPE_CHECKING:
    from typing_extensions import TypeVar
elif sys.version_info >= (3, 13):
    from typing import TypeVar
else:
    import typing

    def TypeVar(name: str, *constraints: Any, default: Any = None,
                **kwargs: Any) -> Any:
        """``typing.TypeVar`` before 3.13 takes no ``default`` (PEP 696); type checkers
        read the default from typing_extensions, which is not needed at run time."""
        return typing.TypeVar(name, *constraints, **kwargs)

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_PORT",
    "KeyT",
    "OffsetAndMetadata",
    "Record",
    "RecordMetadata",
    "TopicPartition",
    "ValueT",
    "choose_bootstrap",
    "is_topic_name",
    "parse_bootstrap",
]

K = TypeVar("K", default=bytes | None)
V = TypeVar("V", default=bytes | None)
KeyT = TypeVar("KeyT", default=bytes)
ValueT = TypeVar("ValueT", default=bytes)
"""What a consumer's ``key_deserializer`` / ``value_deserializer`` return (bytes without
one): its records are ``Record[KeyT | None, ValueT | None]``."""

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
"""Where Consumer, Producer and Admin connect when given no bootstrap address."""
DEFAULT_PORT: Final = 9092
"""The port of a bootstrap host given without one (``bootstrap_servers="localhost"``, as
aiokafka takes it)."""

_TOPIC_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""Kafka's legal topic names, as the broker checks them (broker/topics/rules.py): never
a ':', so a positional ``"host:port"`` is never a topic."""


def is_topic_name(text: str) -> bool:
    """Whether ``text`` is a name the broker would accept for a topic."""
    return _TOPIC_NAME.fullmatch(text) is not None and text not in (".", "..")


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
class Record(Generic[K, V]):
    """One consumed record; ``timestamp_ms`` is the producer's create time.

    ``key`` and ``value`` are the bytes stored (None when absent), or what the consumer's
    ``key_deserializer`` / ``value_deserializer`` made of them: ``Record`` alone means
    ``Record[bytes | None, bytes | None]``, and a consumer with deserializers hands out
    ``Record[K | None, V | None]`` (a None is never deserialized).

    Treat it as read-only. It is not a frozen dataclass only because that makes building
    one several times slower, and a consumer builds one per record.
    """

    topic: str
    partition: int
    offset: int
    key: K
    value: V
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


def parse_bootstrap(bootstrap: str | Sequence[str], *, default_port: int | None = None,
                    ) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or a list of ``"host:port"`` -> ``[(host, port), ...]``.

    With ``default_port``, a host without a port (``"localhost"``, ``"[::1]"``) takes it,
    as aiokafka's ``bootstrap_servers`` does; without, every entry needs its port."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[tuple[str, int]] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"bootstrap: expected HOST:PORT strings, got {item!r}")
        text = item.strip()
        host, sep, port = text.rpartition(":")
        if default_port is not None and text and (not sep or text.endswith("]")):
            host, sep, port = text, ":", str(default_port)
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap: expected HOST:PORT, got {text!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("bootstrap: no address given")
    return out


def choose_bootstrap(client: str, bootstrap: str | Sequence[str] | None,
                     bootstrap_servers: str | Sequence[str] | None, *,
                     given_as: str = "bootstrap=") -> list[str]:
    """The ``"host:port"`` addresses a client constructor was given: ``bootstrap``
    (groupwire's name) or ``bootstrap_servers`` (aiokafka's), :data:`DEFAULT_BOOTSTRAP`
    if neither, a host without a port taking :data:`DEFAULT_PORT`. Both is a TypeError
    naming both (``given_as`` says how ``bootstrap`` came); a bad address a ValueError."""
    if bootstrap is not None and bootstrap_servers is not None:
        raise TypeError(f"{client}() got the bootstrap address twice, as {given_as}"
                        f"{_show(bootstrap)} and bootstrap_servers={_show(bootstrap_servers)}: "
                        f"give one (bootstrap_servers is aiokafka's name for bootstrap)")
    chosen = bootstrap if bootstrap is not None else bootstrap_servers
    addresses = parse_bootstrap(DEFAULT_BOOTSTRAP if chosen is None else chosen,
                                default_port=DEFAULT_PORT)
    return [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses]


def _show(value: object) -> str:
    return repr(list(value) if isinstance(value, tuple) else value)
