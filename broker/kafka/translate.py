"""How one Kafka API is carried through the broker: the translator contract.

A Kafka request arrives as a dict (``protocol.kafka.codec``: snake_case field names of
Kafka's message schemas, arrays as lists of dicts). Its translator turns it into the
msgpack door's request message, which the broker dispatches as it dispatches any other
(authorization, coordinator, storage); the answer comes back as the msgpack door's
response message and the translator turns it into the Kafka response body for the
version asked. Translators are pure functions of their arguments: the connection
(``broker.kafka.connection``) does the I/O.

Where the two protocols differ in shape, the translator owns the difference: Kafka places
errors per partition where groupwire answers one top-level code (spread over every entry
the request named, by each API's translator), codes of
groupwire's own (1000+) never reach a Kafka client (``kafka_code``), and a version's
missing fields take Kafka's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import Request, Response

if TYPE_CHECKING:
    from groupwire.broker.kafka.apis.configs import ConfigView
    from groupwire.broker.security.authorization import Allowed

Body = dict[str, Any]
"""A Kafka request or response body as the codec reads and writes it."""


@dataclass(frozen=True, slots=True)
class KafkaAddress:
    """Where Kafka clients reach one broker: its advertised Kafka listener."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class KafkaContext:
    """What a translator may know beyond the request: its version and the door's view of
    the cluster (brokers by their Kafka listener's advertised address)."""

    api_version: int
    client_id: str
    principal: str
    addresses: Mapping[int, KafkaAddress] = field(default_factory=dict)
    """node id -> the Kafka listener that node advertises; a node without one is absent."""
    cluster_id: str = ""
    controller_id: int = -1
    allowed: Allowed | None = None
    """The authorizer's question bound to this connection's principal and host
    (``AccessControl.allowed_for``), for what a translator answers or shapes itself:
    DescribeConfigs, AlterConfigs, validate-only creations, authorized-operation
    bitfields. None: the broker runs without ``--authorizer``, everything is allowed
    (what the broker dispatches is checked by the broker either way)."""
    configs: ConfigView | None = None
    """Topic and broker configs as Kafka names them (``broker.kafka.apis.configs``):
    DescribeConfigs and AlterConfigs answer from it, CreateTopics checks its ``configs``
    against it. None: those answer that configs are not available here."""
    heartbeat_hold_ms: int = 0
    """``--kafka-heartbeat-hold-ms``: the ``wait_ms`` a Kafka Heartbeat is dispatched with
    (0: answered at once)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A Kafka response the door gives at once, without dispatching anything (a request
    refused on its shape, or one only the door answers)."""

    body: Body


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Dispatch ``request``; its answer goes to the translator's ``response``."""

    request: Request


@dataclass(frozen=True, slots=True)
class Silent:
    """Dispatch ``request`` and send no answer at all (Produce with acks=0)."""

    request: Request


Step = Answer | Dispatch | Silent
"""What a translator makes of a request, or of an answer (``Dispatch`` again: a follow-up
request whose answer is the one the client gets, as JoinGroup below v4 re-joins with the
member id the coordinator handed out)."""


class Translator(Protocol):
    """One Kafka API: request in, step out; answer in, Kafka body (or a further step) out."""

    def request(self, ctx: KafkaContext, body: Body) -> Step: ...

    def response(self, ctx: KafkaContext, body: Body, response: Response) -> Body | Step:
        """``body`` is the Kafka request the answer belongs to."""
        ...


@dataclass(frozen=True, slots=True)
class Simple:
    """A translator from two functions, for APIs whose answer needs nothing more."""

    to_request: Callable[[KafkaContext, Body], Step]
    to_response: Callable[[KafkaContext, Body, Response], Body | Step]

    def request(self, ctx: KafkaContext, body: Body) -> Step:
        return self.to_request(ctx, body)

    def response(self, ctx: KafkaContext, body: Body, response: Response) -> Body | Step:
        return self.to_response(ctx, body, response)


_OWN_CODES: dict[int, ErrorCode] = {
    ErrorCode.PARTITION_NOT_OWNED: ErrorCode.ILLEGAL_GENERATION,
}
"""groupwire's own codes as a Kafka client is told them: the nearest Kafka code whose
client-side handling is right (a fenced member rejoins, keeping its id)."""


def kafka_code(code: int) -> int:
    """The Kafka error code for ``code``: Kafka's own pass through, groupwire's (1000+)
    become the nearest Kafka code, an unknown one UNKNOWN_SERVER_ERROR."""
    if 0 <= code < 1000 or code == -1:
        return code
    return int(_OWN_CODES.get(code, ErrorCode.UNKNOWN_SERVER_ERROR))
