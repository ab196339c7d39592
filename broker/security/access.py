"""The authorizer as a connection's requests meet it: cached decisions, counted denials.

Each connection keeps the decisions it was given, keyed by operation and resource (or
resource type, for "some resource of the type"), as long as the ACLs do not change: the
authorizer's ``version`` is compared on every question, so a changed ACL takes effect on
the connection's next request. A denial is counted every time
(``groupwire_authorization_denials_total``) but logged once per connection and resource,
so a client retrying a refused request cannot flood the log.
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

_Key = tuple[AclOperation, ResourceType, str | None]
"""A decision's key; a name of None: some resource of the type (``Allowed.on_any``)."""


class AccessControl:
    def __init__(self, authorizer: Authorizer, metrics: BrokerMetrics) -> None:
        self.authorizer = authorizer
        self._metrics = metrics
        self._cache: dict[int, tuple[int, dict[_Key, bool]]] = {}

    def allowed_for(self, conn: Peer) -> Allowed:
        """``guard``'s question, bound to ``conn``'s principal and host."""
        return _Caller(self, conn)

    def check(self, conn: Peer, operation: AclOperation, resource_type: ResourceType,
              name: str, audit: bool = True) -> bool:
        return self._decide(conn, (operation, resource_type, name), audit)

    def check_any(self, conn: Peer, operation: AclOperation, resource_type: ResourceType,
                  audit: bool = True) -> bool:
        """Whether some resource of ``resource_type`` allows ``operation`` to ``conn``."""
        return self._decide(conn, (operation, resource_type, None), audit)

    def _decide(self, conn: Peer, key: _Key, audit: bool) -> bool:
        authorizer = self.authorizer
        entry = self._cache.get(conn.conn_id)
        if entry is None or entry[0] != authorizer.version or len(entry[1]) >= MAX_CACHED:
            entry = (authorizer.version, {})
            self._cache[conn.conn_id] = entry
        decisions = entry[1]
        operation, resource_type, name = key
        decided = decisions.get(key)
        if decided is None:
            host = _host(conn.client_host)
            if name is None:
                decided = authorizer.authorize_any(conn.principal, host, operation,
                                                   resource_type)
            else:
                decided = authorizer.authorize(conn.principal, host, operation,
                                               resource_type, name)
            decisions[key] = decided
            if not decided and audit:
                log.info("authorization_denied", principal=conn.principal, host=host,
                         operation=operation.name,
                         resource=f"{resource_type.name}:{'(any)' if name is None else name}",
                         conn=conn.conn_id)
        if not decided and audit:
            self._metrics.authorization_denials.labels(
                resource_type.name, operation.name).inc()
        return decided

    def forget(self, conn_id: int) -> None:
        self._cache.pop(conn_id, None)


class _Caller:
    """:class:`Allowed` for one connection."""

    __slots__ = ("_access", "_conn")

    def __init__(self, access: AccessControl, conn: Peer) -> None:
        self._access = access
        self._conn = conn

    def __call__(self, operation: AclOperation, resource_type: ResourceType, name: str,
                 audit: bool = True) -> bool:
        return self._access.check(self._conn, operation, resource_type, name, audit)

    def on_any(self, operation: AclOperation, resource_type: ResourceType,
               audit: bool = True) -> bool:
        return self._access.check_any(self._conn, operation, resource_type, audit)


def _host(client_host: str) -> str:
    """``/127.0.0.1`` (Kafka's way of showing a peer) as the bare address ACLs name."""
    return client_host[1:] if client_host.startswith("/") else client_host
