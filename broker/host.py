"""What a client connection needs from the broker that accepted it, as an interface.

``broker.connection`` depends on this, ``broker.server`` implements it: the two modules
no longer import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from groupwire.broker.budget import Verdict
from groupwire.broker.coordinator import Renewal
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.messages import ApiVersionsResponse, Request, Response

if TYPE_CHECKING:  # names in annotations only: no import cycle at run time
    from groupwire.broker.config import BrokerSettings
    from groupwire.broker.metrics import BrokerMetrics
    from groupwire.broker.security.listeners import Listener
    from groupwire.broker.security.state import SecurityState


class Peer(Protocol):
    """The connection as the broker sees it: who it is, and where answers go."""

    @property
    def conn_id(self) -> int: ...

    @property
    def client_host(self) -> str: ...

    @property
    def close_reason(self) -> str: ...

    @property
    def listener(self) -> Listener:
        """The listener the connection came in on (Metadata answers its address)."""
        ...

    @property
    def kafka(self) -> bool:
        """It speaks Kafka's protocol (``broker.kafka``): what it reads is served as
        Kafka batches, converted by its door."""
        ...

    @property
    def principal(self) -> str:
        """Who the connection authenticated as: ``User:name`` (``User:ANONYMOUS`` on a
        listener without SASL or a client certificate)."""
        ...

    def reply(self, correlation_id: int, response: Response) -> None: ...

    def finish_answer(self, correlation_id: int,
                      finish: Callable[[Response], Response]) -> None:
        """Pass the request's answer through ``finish`` before it is sent, whichever
        path sends it (the authorizer puts refused resources back into it); finishes
        given for one request run in the order given."""
        ...

    def answer_is_long(self, correlation_id: int) -> None:
        """The request's work spans loop turns: encode its answer off the loop."""
        ...

    def hold(self) -> Callable[[], None]:
        """Take no further request of this connection until the returned function is
        called (a request answered later must still take effect before the next)."""
        ...


class ConnectionHost(Protocol):
    """The broker as a connection sees it."""

    settings: BrokerSettings
    metrics: BrokerMetrics
    monotonic: Callable[[], int]
    """The clock of deadlines, in ms (the heartbeat fast path renews sessions on it)."""
    renew_heartbeat: Callable[[int, HeartbeatFields, int], Renewal | None]
    security: SecurityState
    """Users, ACLs and the SASL servers connections authenticate with."""

    def dispatch(self, conn: Peer, correlation_id: int, client_id: str,
                 request: Request) -> None: ...

    def unsupported_api_versions(self, version: int) -> ApiVersionsResponse: ...

    def connection_made(self, conn: Peer) -> None:
        """The connection is open (its TLS handshake done): counted from now on, and
        refused (``refuse``) if the broker is full or closing."""
        ...

    def connection_switched(self, old: Peer, new: Peer) -> None:
        """``new`` took ``old``'s socket over (the other door, docs/protocol.md §13.1)."""
        ...

    def connection_lost(self, conn: Peer) -> None: ...

    def request_memory(self, conn_id: int, held: int, wanted: int) -> Verdict:
        """Ask the broker-wide request memory budget (``broker.budget``); the broker
        resumes or closes the other connections its answer names."""
        ...
