"""The authorizer as a connection's requests meet it: cached decisions, counted denials.

Each connection keeps the decisions it was given, keyed by operation and resource, as
long as the ACLs do not change: the authorizer's ``version`` is compared on every
question, so a changed ACL takes effect on the connection's next request. A denial is
counted every time (``groupwire_authorization_denials_total``) but logged once per
connection and resource, so a client retrying a refused request cannot flood the log.
"""

from __future__ import annotations

from typing import Final

from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.metrics import BrokerMetrics
from groupwire.broker.security.acls import Authorizer
from groupwire.broker.security.authorization import Allowed
from groupwire.protocol.acls import AclOperation, ResourceType

log = get_logger("groupwire.security")

MAX_CACHED: Final = 4096
"""Decisions kept per connection; past it the cache starts again (a client touching that
many resources pays one authorizer lookup per resource each round)."""

_Key = tuple[AclOperation, ResourceType, str]


class AccessControl:
    def __init__(self, authorizer: Authorizer, metrics: BrokerMetrics) -> None:
        self.authorizer = authorizer
        self._metrics = metrics
        self._cache: dict[int, tuple[int, dict[_Key, bool]]] = {}

    def allowed_for(self, conn: Peer) -> Allowed:
        """``guard``'s question, bound to ``conn``'s principal and host."""
        def allowed(operation: AclOperation, resource_type: ResourceType, name: str,
                    audit: bool = True) -> bool:
            return self.check(conn, operation, resource_type, name, audit)
        return allowed

    def check(self, conn: Peer, operation: AclOperation, resource_type: ResourceType,
              name: str, audit: bool = True) -> bool:
        authorizer = self.authorizer
        entry = self._cache.get(conn.conn_id)
        if entry is None or entry[0] != authorizer.version or len(entry[1]) >= MAX_CACHED:
            entry = (authorizer.version, {})
            self._cache[conn.conn_id] = entry
        decisions = entry[1]
        key = (operation, resource_type, name)
        decided = decisions.get(key)
        if decided is None:
            decided = authorizer.authorize(conn.principal, _host(conn.client_host),
                                           operation, resource_type, name)
            decisions[key] = decided
            if not decided and audit:
                log.info("authorization_denied", principal=conn.principal,
                         host=_host(conn.client_host), operation=operation.name,
                         resource=f"{resource_type.name}:{name}", conn=conn.conn_id)
        if not decided and audit:
            self._metrics.authorization_denials.labels(
                resource_type.name, operation.name).inc()
        return decided

    def forget(self, conn_id: int) -> None:
        self._cache.pop(conn_id, None)


def _host(client_host: str) -> str:
    """``/127.0.0.1`` (Kafka's way of showing a peer) as the bare address ACLs name."""
    return client_host[1:] if client_host.startswith("/") else client_host
