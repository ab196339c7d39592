"""ACLs and SCRAM users in cluster mode (in-process brokers, an in-memory etcd): they live
in the cluster's metadata, so a change made through one broker is enforced by the
others, concurrent changes through two brokers both survive, a restarted broker has
them, and a user written offline before any broker started can log in everywhere.

Each broker has a PLAINTEXT listener, whose anonymous principal is a super user (it
stands for the operator, and for the brokers' own replica connections), and a
SASL_PLAINTEXT one where users log in and the ACLs apply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import scramp

from groupwire.broker.cluster.keys import security_prefix
from groupwire.broker.security import CredentialTable, credential_from_password, save_security
from groupwire.broker.security.cluster_store import upsert_user
from groupwire.broker.security.credentials import salted_password
from groupwire.broker.security.store import SECURITY_FILE
from groupwire.broker.server import Broker
from groupwire.protocol.acls import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AclCreation,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    ScramCredentialUpsertion,
)
from tests.conformance.wire import Api, WireConn
from tests.integration.cluster.harness import BOUND_S, LocalCluster

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
ALICE, ALICE_PW = "alice", "alice-secret"
CLUSTER = "test"  # LocalCluster's cluster name


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(tmp_path, listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                     authorizer="acl", super_users="User:ANONYMOUS")
    # the offline path: straight into the cluster's metadata, before any broker runs
    await upsert_user(c.store, CLUSTER, ALICE,
                      [credential_from_password(m, ALICE_PW) for m in (SHA256, SHA512)])
    opened: list[WireConn] = []
    c.opened = opened  # type: ignore[attr-defined]
    try:
        await c.start(1, 2)
        yield c
    finally:
        for conn in opened:
            await conn.close()
        await c.close()


async def login(c: LocalCluster, node_id: int, user: str, password: str,
                mechanism: str = "SCRAM-SHA-256") -> tuple[WireConn, int]:
    """A connection to the broker's SASL listener and the error code of its SCRAM
    exchange (0: logged in)."""
    port = c.brokers[node_id].listener_ports["SASL_PLAINTEXT"]
    async with asyncio.timeout(BOUND_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = WireConn(reader, writer, "cluster-security")
    c.opened.append(conn)  # type: ignore[attr-defined]
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": mechanism})
    assert body["error_code"] == 0, body
    client = scramp.ScramClient([mechanism], user, password)
    body = await call(conn, Api.SASL_AUTHENTICATE,
                      {"auth_bytes": client.get_client_first().encode()})
    if body["error_code"] == 0:
        client.set_server_first(body["auth_bytes"].decode())
        body = await call(conn, Api.SASL_AUTHENTICATE,
                          {"auth_bytes": client.get_client_final().encode()})
    return conn, body["error_code"]


async def call(conn: WireConn, api: int, body: dict[str, Any]) -> dict[str, Any]:
    async with asyncio.timeout(BOUND_S):
        return await conn.send(api, body)


async def describe_acls(conn: WireConn) -> dict[str, Any]:
    return await call(conn, Api.DESCRIBE_ACLS, {
        "resource_type_filter": ResourceType.ANY, "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY, "principal_filter": None,
        "host_filter": None, "operation": AclOperation.ANY,
        "permission_type": AclPermission.ANY})


def allow(principal: str, operation: AclOperation,
          resource_type: ResourceType = ResourceType.CLUSTER,
          name: str = CLUSTER_NAME) -> AclCreation:
    return AclCreation(resource_type=resource_type, resource_name=name,
                       resource_pattern_type=PatternType.LITERAL, principal=principal,
                       host="*", operation=operation, permission_type=AclPermission.ALLOW)


async def create_acls(c: LocalCluster, node_id: int, *creations: AclCreation) -> None:
    answer = await c.send(node_id, CreateAclsRequest(creations=list(creations)),
                          CreateAclsResponse)
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * len(creations), answer


def upsertion(user: str, password: str, mechanism: ScramMechanism) -> ScramCredentialUpsertion:
    salt = b"0123456789abcdef"
    return ScramCredentialUpsertion(
        name=user, mechanism=mechanism, iterations=4096, salt=salt,
        salted_password=salted_password(mechanism, password, salt, 4096))


async def alter_users(c: LocalCluster, node_id: int, *ups: ScramCredentialUpsertion) -> None:
    answer = await c.send(node_id, AlterUserScramCredentialsRequest(upsertions=list(ups)),
                          AlterUserScramCredentialsResponse)
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * len(ups), answer


async def seen_by(broker: Broker, check: Callable[[Broker], bool]) -> None:
    """Wait for ``broker``'s copy of the security keys to satisfy ``check``."""
    assert broker.cluster_security is not None
    async with asyncio.timeout(BOUND_S):
        await broker.cluster_security.until(lambda: check(broker))


async def test_a_user_written_offline_logs_in_on_every_broker(cluster: LocalCluster) -> None:
    for node_id in (1, 2):
        _, code = await login(cluster, node_id, ALICE, ALICE_PW)
        assert code == ErrorCode.NONE
        _, code = await login(cluster, node_id, ALICE, ALICE_PW, "SCRAM-SHA-512")
        assert code == ErrorCode.NONE
        _, code = await login(cluster, node_id, ALICE, "wrong")
        assert code == ErrorCode.SASL_AUTHENTICATION_FAILED


async def test_an_acl_created_on_one_broker_is_enforced_on_the_other(
        cluster: LocalCluster) -> None:
    conn, code = await login(cluster, 2, ALICE, ALICE_PW)
    assert code == ErrorCode.NONE
    denied = await describe_acls(conn)
    assert denied["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await create_acls(cluster, 1, allow(f"User:{ALICE}", AclOperation.DESCRIBE))
    await seen_by(cluster.brokers[2], lambda b: len(b.security.authorizer) == 1)
    allowed = await describe_acls(conn)  # the same connection: its cached "no" is stale
    assert allowed["error_code"] == ErrorCode.NONE
    assert [a["principal"] for r in allowed["resources"] for a in r["acls"]] == [
        f"User:{ALICE}"]
    # stored in etcd, not in the data dir
    assert not (cluster.root / "b1" / SECURITY_FILE).exists()
    kvs, _ = await cluster.store.get_prefix(security_prefix(CLUSTER) + "acls/")
    assert len(kvs) == 1


async def test_a_credential_created_on_one_broker_logs_in_on_the_other(
        cluster: LocalCluster) -> None:
    _, code = await login(cluster, 2, "bob", "bob-secret")
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED
    await alter_users(cluster, 1, upsertion("bob", "bob-secret", SHA256))
    await seen_by(cluster.brokers[2], lambda b: "bob" in b.security.credentials)
    _, code = await login(cluster, 2, "bob", "bob-secret")
    assert code == ErrorCode.NONE


async def test_changes_made_at_once_through_two_brokers_both_survive(
        cluster: LocalCluster) -> None:
    await asyncio.gather(
        create_acls(cluster, 1, allow("User:one", AclOperation.DESCRIBE)),
        create_acls(cluster, 2, allow("User:two", AclOperation.ALTER)),
        alter_users(cluster, 1, upsertion("carol", "c-pw", SHA256)),
        alter_users(cluster, 2, upsertion("carol", "c-pw", SHA512)))

    def both(b: Broker) -> bool:
        principals = {x.entry.principal for x in b.security.authorizer.bindings()}
        mechanisms = [c.mechanism for c in b.security.credentials.mechanisms_of("carol")]
        return principals == {"User:one", "User:two"} and mechanisms == [SHA256, SHA512]

    for broker in cluster.brokers.values():
        await seen_by(broker, both)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        _, code = await login(cluster, 1, "carol", "c-pw", mechanism)
        assert code == ErrorCode.NONE


async def test_a_restarted_broker_has_them_and_ignores_its_data_dirs_file(
        cluster: LocalCluster) -> None:
    await create_acls(cluster, 1, allow(f"User:{ALICE}", AclOperation.DESCRIBE))
    await alter_users(cluster, 1, upsertion("bob", "bob-secret", SHA512))
    await cluster.stop(2)
    # a single broker's file left in the data dir: cluster mode does not read it
    save_security(cluster.root / "b2", [], CredentialTable(
        [("ghost", credential_from_password(SHA256, "boo"))]))
    await cluster.start(2)
    security = cluster.brokers[2].security  # read at start, before it listened
    assert [b.entry.principal for b in security.authorizer.bindings()] == [f"User:{ALICE}"]
    assert security.credentials.users() == [ALICE, "bob"]
    conn, code = await login(cluster, 2, "bob", "bob-secret", "SCRAM-SHA-512")
    assert code == ErrorCode.NONE
    _, code = await login(cluster, 2, "ghost", "boo")
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED
    conn, _ = await login(cluster, 2, ALICE, ALICE_PW)
    assert (await describe_acls(conn))["error_code"] == ErrorCode.NONE
