"""What a client connection needs from the broker that accepted it, as an interface.

``broker.connection`` depends on this, ``broker.server`` implements it: the two modules
no longer import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from groupwire.broker.budget import Verdict
from groupwire.broker.config import BrokerSettings
from groupwire.broker.coordinator import Renewal
from groupwire.broker.metrics import BrokerMetrics
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.messages import ApiVersionsResponse, Request, Response


class Peer(Protocol):
    """The connection as the broker sees it: who it is, and where answers go."""

    @property
    def conn_id(self) -> int: ...

    @property
    def client_host(self) -> str: ...

    @property
    def close_reason(self) -> str: ...

    def reply(self, correlation_id: int, response: Response) -> None: ...

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
    clock: Callable[[], int]
    renew_heartbeat: Callable[[int, HeartbeatFields, int], Renewal | None]

    def dispatch(self, conn: Peer, correlation_id: int, client_id: str,
                 request: Request) -> None: ...

    def unsupported_api_versions(self, version: int) -> ApiVersionsResponse: ...

    def connection_lost(self, conn: Peer) -> None: ...

    def request_memory(self, conn_id: int, held: int, wanted: int) -> Verdict:
        """Ask the broker-wide request memory budget (``broker.budget``); the broker
        resumes or closes the other connections its answer names."""
        ...
