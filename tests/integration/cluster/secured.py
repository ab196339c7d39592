"""A LocalCluster whose brokers listen on a SASL listener (first, so the inter-broker
one) and a PLAINTEXT one, with ``--authorizer acl``: the brokers' own user and the
test's admin are super users, written into the cluster's metadata before any broker
starts (as ``groupwire users add --etcd-endpoints`` does); anonymous PLAINTEXT clients
may DESCRIBE groups (so FindCoordinator answers them) and nothing else."""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path
from typing import Any

from groupwire.broker.cluster.keys import acl_key
from groupwire.broker.cluster.txn import Put, Txn
from groupwire.broker.config import BrokerSettings
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.security import (
    AccessControlEntry,
    AclBinding,
    ResourcePattern,
    credential_from_password,
)
from groupwire.broker.security.cluster_store import binding_id, encode_binding, upsert_user
from groupwire.client.connection import Connection
from groupwire.client.sasl import authenticate
from groupwire.client.security import SecurityConfig
from groupwire.protocol.acls import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)
from groupwire.protocol.messages import Request
from tests.integration.cluster.harness import BOUND_S, LocalCluster, R

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SASL_LISTENERS = "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"


async def provision(store: MemoryStore, cluster: str) -> None:
    """The users and ACLs an operator creates before the brokers first start."""
    for user, password in ((BROKER_USER, BROKER_PASSWORD), (ADMIN, ADMIN_PASSWORD)):
        await upsert_user(store, cluster, user, [
            credential_from_password(mechanism, password)
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)])
    anyone_describes_groups = AclBinding(
        ResourcePattern(ResourceType.GROUP, "*", PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", "*", AclOperation.DESCRIBE, AclPermission.ALLOW))
    await store.txn(Txn((), (Put(acl_key(cluster, binding_id(anyone_describes_groups)),
                                 encode_binding(anyone_describes_groups)),)))


class SecuredCluster(LocalCluster):
    def __init__(self, root: Path, *, client_listener: str = "SASL_PLAINTEXT",
                 client_ssl: ssl.SSLContext | None = None,
                 per_node: dict[int, dict[str, Any]] | None = None,
                 **overrides: object) -> None:
        """``per_node``: settings that differ on some brokers (a wrong password)."""
        values: dict[str, object] = {
            "listeners": SASL_LISTENERS, "authorizer": "acl",
            "super_users": f"User:{BROKER_USER};User:{ADMIN}",
            "inter_broker_sasl_username": BROKER_USER,
            "inter_broker_sasl_password": BROKER_PASSWORD,
        }
        values.update(overrides)
        super().__init__(root, **values)
        self.per_node = per_node or {}
        self.client_listener = client_listener
        self.client_ssl = client_ssl
        self._provisioned = False

    def settings(self, node_id: int) -> BrokerSettings:
        return dataclasses.replace(super().settings(node_id), **self.per_node.get(node_id, {}))

    async def start(self, *node_ids: int) -> None:
        if not self._provisioned:
            await provision(self.store, self.settings(node_ids[0]).cluster_name)
            self._provisioned = True
        await super().start(*node_ids)

    @property
    def client_security(self) -> SecurityConfig:
        """The admin, over the client listener (its name is its protocol)."""
        return SecurityConfig(security_protocol=self.client_listener,
                              ssl_context=self.client_ssl, sasl_mechanism="SCRAM-SHA-512",
                              sasl_plain_username=ADMIN, sasl_plain_password=ADMIN_PASSWORD)

    async def send(self, node_id: int, request: Request, response_type: type[R]) -> R:
        """As the admin, over the client listener."""
        conn = self._conns.get(node_id)
        if conn is None or conn.closed:
            conn = await self.open(node_id, self.client_listener, self.client_ssl)
            await authenticate(conn, self.client_security, BOUND_S)
            self._conns[node_id] = conn
        return await conn.send(request, timeout=BOUND_S, response_type=response_type)

    async def open(self, node_id: int, listener: str,
                   ssl_context: ssl.SSLContext | None = None) -> Connection:
        port = self.brokers[node_id].listener_ports[listener]
        return await Connection.open("127.0.0.1", port, ssl_context=ssl_context)

    async def send_anonymous(self, node_id: int, request: Request,
                             response_type: type[R]) -> R:
        """Over the PLAINTEXT listener, as User:ANONYMOUS."""
        conn = await self.open(node_id, "PLAINTEXT")
        try:
            return await conn.send(request, timeout=BOUND_S, response_type=response_type)
        finally:
            await conn.close()
