"""The cluster security follower is a supervised service (issue 24): a crash in its
watch is logged and counted, and the service comes back reading every key afresh, so
an ACL revoked meanwhile is enforced; an empty batch (the store saying the watch is
current) changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog

from groupwire.broker.cluster.keys import security_prefix
from groupwire.broker.cluster.txn import WatchEvent
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.security.acls import AccessControlEntry, AclBinding, ResourcePattern
from groupwire.broker.security.cluster_store import ClusterSecurity
from groupwire.broker.security.credentials import CredentialTable
from groupwire.broker.security.state import SecurityState
from groupwire.broker.supervisor import Supervisor
from groupwire.protocol.acls import AclOperation, AclPermission, PatternType, ResourceType

CLUSTER = "c"
BOUND_S = 5.0


def acl(name: str) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", AclOperation.READ,
                                         AclPermission.ALLOW))


class WatchCrashesOnce(MemoryStore):
    """The first security watch dies of a bug once released; later ones work."""

    def __init__(self) -> None:
        super().__init__(progress_interval_s=0.01)
        self.release = asyncio.Event()
        self.watches = 0

    async def _crashing(self) -> AsyncIterator[list[WatchEvent]]:
        yield []
        await self.release.wait()
        raise RuntimeError("a bug in the security watch")

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        if prefix == security_prefix(CLUSTER):
            self.watches += 1
            if self.watches == 1:
                return self._crashing()
        return super().watch(prefix, start_revision)


async def test_a_crashed_security_watch_restarts_and_rereads() -> None:
    store = WatchCrashesOnce()
    writer = ClusterSecurity(store, CLUSTER, SecurityState((), CredentialTable(), (), ()))
    await writer.load()
    await writer.persist([acl("orders")], CredentialTable())

    failures: list[str] = []
    supervisor = Supervisor(on_failure=failures.append)
    state = SecurityState((), CredentialTable(), (), ())
    follower = ClusterSecurity(store, CLUSTER, state, supervisor=supervisor)
    await follower.load()
    follower.start()
    assert state.authorizer.bindings() == [acl("orders")]
    # Revoked elsewhere while the follower's watch is stuck, then its watch crashes.
    await writer.persist([], CredentialTable())
    with structlog.testing.capture_logs() as logs:
        store.release.set()
        async with asyncio.timeout(BOUND_S):
            await follower.until(lambda: len(state.authorizer) == 0)
    assert failures == ["security-watch"]
    assert any(e["event"] == "background_task_failed" for e in logs)
    assert follower.service is not None and follower.service.failures == 1
    assert store.watches >= 2
    await follower.close()
    await writer.close()
    await store.close()
