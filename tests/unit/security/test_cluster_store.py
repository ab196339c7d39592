"""ACLs and SCRAM credentials in a cluster's metadata (an in-memory etcd): one key per
binding and per user, every broker's copy following them, changes written as deltas
under compare-and-swap so concurrent ones from two brokers both survive."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import acl_key, parse_key, security_prefix, user_key
from groupwire.broker.cluster.txn import KeyValue, Put, Txn, TxnResult, WatchEvent
from groupwire.broker.etcd import EtcdUnavailableError, MemoryStore
from groupwire.broker.security.acls import AccessControlEntry, AclBinding, ResourcePattern
from groupwire.broker.security.cluster_store import (
    ClusterSecurity,
    binding_id,
    encode_user,
    upsert_user,
)
from groupwire.broker.security.credentials import (
    CredentialTable,
    ScramCredential,
    credential_from_password,
    password_matches,
)
from groupwire.broker.security.state import SecurityState
from groupwire.broker.security.store import SecurityStoreError
from groupwire.protocol.acls import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)

CLUSTER = "c"
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
BOUND_S = 5.0


def acl(name: str, principal: str = "User:alice",
        permission: AclPermission = AclPermission.ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", AclOperation.READ, permission))


def cred(mechanism: ScramMechanism, password: str = "secret") -> ScramCredential:
    return credential_from_password(mechanism, password)


def state() -> SecurityState:
    return SecurityState((), CredentialTable(), (), ())


async def broker(store: MemoryStore, *, follow: bool = True,
                 ) -> tuple[ClusterSecurity, SecurityState]:
    s = state()
    cs = ClusterSecurity(store, CLUSTER, s)
    await cs.load()
    if follow:
        cs.start()
    return cs, s


async def until(cs: ClusterSecurity, check: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_S):
        await cs.until(check)


async def security_keys(store: MemoryStore) -> dict[str, bytes]:
    kvs, _ = await store.get_prefix(security_prefix(CLUSTER))
    return {kv.key: kv.value for kv in kvs}


def with_user(table: CredentialTable, user: str, *creds: ScramCredential) -> CredentialTable:
    after = CredentialTable(table.items())
    for c in creds:
        after.upsert(user, c)
    return after


# --- the keys ---------------------------------------------------------------------------


def test_security_keys_sit_under_the_cluster_and_the_image_ignores_them() -> None:
    b = acl("orders")
    keys = [acl_key(CLUSTER, binding_id(b)), user_key(CLUSTER, "alice")]
    assert keys == [f"/groupwire/c/security/acls/{binding_id(b)}",
                    "/groupwire/c/security/users/alice"]
    assert [parse_key(CLUSTER, k) for k in keys] == [None, None]
    value = encode_user("alice", [cred(SHA256)])
    image = ClusterImage.from_kvs(CLUSTER, [], 1)
    events = [WatchEvent("put", KeyValue(k, value, 2, 2, 1)) for k in keys]
    change = image.apply(events)
    assert change.empty and not image.brokers and not image.topics


def test_a_binding_id_is_stable_and_tells_bindings_apart() -> None:
    assert binding_id(acl("orders")) == binding_id(acl("orders"))
    assert binding_id(acl("orders")) != binding_id(acl("orders", "User:bob"))
    assert len(binding_id(acl("orders"))) == 32


# --- reading and following ----------------------------------------------------------------


async def test_a_change_through_one_broker_reaches_the_other() -> None:
    store = MemoryStore()
    a, sa = await broker(store)
    b, sb = await broker(store)
    alice = cred(SHA256, "correct-horse-battery")
    await a.persist([acl("orders")], with_user(CredentialTable(), "alice", alice))
    # applied on A by persist itself, before it returned
    assert sa.authorizer.bindings() == [acl("orders")]
    assert sa.credentials.get("alice", SHA256) == alice
    await until(b, lambda: len(sb.authorizer) == 1 and "alice" in sb.credentials)
    assert sb.authorizer.authorize("User:alice", "10.0.0.1", AclOperation.READ,
                                   ResourceType.TOPIC, "orders")
    assert password_matches(sb.credentials.get("alice", SHA256), "correct-horse-battery")  # type: ignore[arg-type]
    keys = await security_keys(store)
    assert sorted(keys) == [acl_key(CLUSTER, binding_id(acl("orders"))),
                            user_key(CLUSTER, "alice")]
    user_value = json.loads(keys[user_key(CLUSTER, "alice")])
    assert sorted(user_value["credentials"][0]) == [
        "iterations", "mechanism", "salt", "server_key", "stored_key"]
    assert b"correct-horse-battery" not in keys[user_key(CLUSTER, "alice")]
    # removing: the key goes, on both
    await a.persist([], CredentialTable())
    await until(b, lambda: len(sb.authorizer) == 0 and "alice" not in sb.credentials)
    assert await security_keys(store) == {}
    await a.close()
    await b.close()


async def test_a_restarted_broker_reads_them_at_start() -> None:
    store = MemoryStore()
    a, _ = await broker(store, follow=False)
    await a.persist([acl("orders"), acl("payments")],
                    with_user(CredentialTable(), "alice", cred(SHA512)))
    _, later = await broker(store, follow=False)
    assert set(later.authorizer.bindings()) == {acl("orders"), acl("payments")}
    assert later.credentials.users() == ["alice"]


async def test_a_compacted_watch_reads_everything_again() -> None:
    store = MemoryStore()
    a, _ = await broker(store, follow=False)
    b, sb = await broker(store, follow=False)  # loaded, not yet following
    await a.persist([acl("gone"), acl("kept")], CredentialTable())
    await a.persist([acl("kept")], CredentialTable())  # "gone" deleted while b missed it
    await store.compact(store.revision)
    b.start()  # its watch starts before the compaction: it must read again
    await until(b, lambda: sb.authorizer.bindings() == [acl("kept")])
    await b.close()


async def test_a_newer_own_write_is_not_undone_by_older_watch_events() -> None:
    store = MemoryStore()
    a, sa = await broker(store, follow=False)
    await a.persist([acl("x")], CredentialTable())
    await a.persist([], CredentialTable())
    version = sa.authorizer.version
    a.start()  # delivers the put and the delete of "x", both older than what a knows
    await until(a, lambda: a.revision >= store.revision)
    assert sa.authorizer.version == version and len(sa.authorizer) == 0
    await a.close()


async def test_an_unreadable_value_stops_the_start_but_not_a_running_broker() -> None:
    store = MemoryStore()
    running, s = await broker(store)
    bad = acl_key(CLUSTER, "0" * 32)
    await store.txn(Txn((), (Put(bad, b"{not json"),)))
    await store.txn(Txn((), (Put(user_key(CLUSTER, "eve"), b'{"credentials": 3}'),)))
    await running.persist([acl("orders")], CredentialTable())
    await until(running, lambda: running.revision >= store.revision)
    assert s.authorizer.bindings() == [acl("orders")]  # the bad ones are skipped
    with pytest.raises(SecurityStoreError, match="/groupwire/c/security/"):
        await broker(store, follow=False)
    # a bad user value is overwritten by the next change to that user
    await running.persist([acl("orders")], with_user(CredentialTable(), "eve", cred(SHA256)))
    assert "eve" in s.credentials
    await running.close()


# --- writing ------------------------------------------------------------------------------


async def test_stale_brokers_changing_acls_at_once_keep_both_changes() -> None:
    store = MemoryStore()
    a, sa = await broker(store, follow=False)
    b, _ = await broker(store, follow=False)
    await a.persist([acl("from-a")], CredentialTable())
    # b has not seen a's binding: its request's whole state lacks it
    await b.persist([acl("from-b")], CredentialTable())
    assert {json.loads(v)["name"] for v in (await security_keys(store)).values()} == {
        "from-a", "from-b"}
    # b removes its own binding from a view that still lacks a's: a's stays
    await b.persist([], CredentialTable())
    assert [json.loads(v)["name"] for v in (await security_keys(store)).values()] == [
        "from-a"]
    assert sa.authorizer.bindings() == [acl("from-a")]


async def test_two_brokers_setting_one_users_mechanisms_at_once_keep_both() -> None:
    store = MemoryStore()
    a, _ = await broker(store, follow=False)
    b, sb = await broker(store, follow=False)
    c256, c512 = cred(SHA256, "one"), cred(SHA512, "two")
    await a.persist([], with_user(CredentialTable(), "alice", c256))
    # b's view has no alice: its compare fails, it reads again and adds its mechanism
    await b.persist([], with_user(CredentialTable(), "alice", c512))
    fresh, s = await broker(store, follow=False)
    assert s.credentials.mechanisms_of("alice") == [c256, c512]
    assert sb.credentials.mechanisms_of("alice") == [c256, c512]  # applied by persist
    # and a deletion of one mechanism keeps the other
    await a.persist([], CredentialTable())  # a's view: alice had SHA-256 only
    _, s = await broker(store, follow=False)
    assert s.credentials.mechanisms_of("alice") == [c512]
    await fresh.close()


async def test_more_keys_than_one_txn_takes_are_written_in_batches() -> None:
    store = MemoryStore()
    a, sa = await broker(store, follow=False)
    many = [acl(f"t{i}") for i in range(300)]
    await a.persist(many, CredentialTable())
    assert len(await security_keys(store)) == 300 and len(sa.authorizer) == 300


class Interfering(MemoryStore):
    """Another writer gets in before every txn: each compare on ``key`` fails."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.txns = 0

    async def txn(self, txn: Txn) -> TxnResult:
        self.txns += 1
        await super().txn(Txn((), (Put(self.key, encode_user("alice", [cred(SHA512)])),)))
        return await super().txn(txn)


async def test_a_change_that_keeps_conflicting_raises() -> None:
    store = Interfering(user_key(CLUSTER, "alice"))
    a, _ = await broker(store, follow=False)
    with pytest.raises(SecurityStoreError, match="conflicting"):
        await a.persist([], with_user(CredentialTable(), "alice", cred(SHA256)))
    assert store.txns == 5


class LostAnswer(MemoryStore):
    """The first txn is applied but its answer is lost (the connection broke)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False

    async def txn(self, txn: Txn) -> TxnResult:
        result = await super().txn(txn)
        if not self.lost:
            self.lost = True
            raise EtcdUnavailableError("connection broke after sending; outcome unknown")
        return result


async def test_a_write_whose_outcome_is_unknown_is_read_back_not_failed() -> None:
    store = LostAnswer()
    a, sa = await broker(store, follow=False)
    await a.persist([acl("orders")], CredentialTable())
    assert store.lost and sa.authorizer.bindings() == [acl("orders")]
    assert len(await security_keys(store)) == 1


async def test_an_etcd_that_does_not_answer_fails_the_change() -> None:
    class Down(MemoryStore):
        async def txn(self, txn: Txn) -> TxnResult:
            raise EtcdUnavailableError("no etcd endpoint answered")

        async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
            raise EtcdUnavailableError("no etcd endpoint answered")

    store = Down()
    s = state()
    a = ClusterSecurity(store, CLUSTER, s)
    with pytest.raises(EtcdUnavailableError):
        await a.persist([acl("orders")], CredentialTable())
    assert len(s.authorizer) == 0


# --- offline --------------------------------------------------------------------------------


async def test_offline_upsert_adds_mechanisms_and_leaves_other_users() -> None:
    store = MemoryStore()
    await upsert_user(store, CLUSTER, "bob", [cred(SHA256)])
    first = cred(SHA256, "old")
    await upsert_user(store, CLUSTER, "admin", [first])
    c256, c512 = cred(SHA256, "new"), cred(SHA512, "new")
    await upsert_user(store, CLUSTER, "admin", [c256, c512])
    _, s = await broker(store, follow=False)
    assert s.credentials.users() == ["admin", "bob"]
    assert s.credentials.mechanisms_of("admin") == [c256, c512]


async def test_offline_upsert_refuses_to_overwrite_an_unreadable_value() -> None:
    store = MemoryStore()
    await store.txn(Txn((), (Put(user_key(CLUSTER, "admin"), b"[]"),)))
    with pytest.raises(SecurityStoreError, match="users/admin"):
        await upsert_user(store, CLUSTER, "admin", [cred(SHA256)])

