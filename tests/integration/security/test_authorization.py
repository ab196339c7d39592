"""The ACL authorizer over real SASL connections: ACL APIs, per-API refusals, a changed
ACL taking effect on the next request, member ownership, durability across restart."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.protocol.batches import BatchRecord, encode_batch
from tests.conformance.wire import Api, Member, WireConn, assignment

from .conftest import Open, StartBroker, call, plain_auth, sample, scram_auth, write_users

SASL = "SASL_PLAINTEXT://127.0.0.1:0"
USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPIC, GROUP, CLUSTER, ANY = 2, 3, 4, 1
READ, WRITE, CREATE, DESCRIBE, ALTER = 3, 4, 5, 8, 7
ALLOW, LITERAL, PREFIXED = 3, 3, 4
DENIALS = "groupwire_authorization_denials_total"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "authz"
    write_users(d, USERS)
    return d


Start = Callable[..., Awaitable[Broker]]


@pytest.fixture
def start(start_broker: StartBroker, data_dir: Path) -> Start:
    def go(**more: Any) -> Awaitable[Broker]:
        return start_broker(data_dir=data_dir, listeners=SASL, authorizer="acl",
                            super_users="User:admin",
                            sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256", **more)
    return go


Login = Callable[[str], Awaitable[WireConn]]


@pytest.fixture
def login(open_conn: Open) -> Callable[[Broker], Login]:
    def on(broker: Broker) -> Login:
        async def as_user(user: str) -> WireConn:
            conn = await open_conn(broker.listener_ports["SASL_PLAINTEXT"])
            body = await scram_auth(conn, user=user, password=USERS[user])
            assert body["error_code"] == 0, body
            return conn
        return as_user
    return on


def acl(resource_type: int, name: str, principal: str, operation: int, *,
        pattern: int = LITERAL, host: str = "*", permission: int = ALLOW) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name,
            "resource_pattern_type": pattern, "principal": principal, "host": host,
            "operation": operation, "permission_type": permission}


async def grant(admin: WireConn, *creations: dict[str, Any]) -> None:
    body = await call(admin, Api.CREATE_ACLS, {"creations": list(creations)})
    assert [r["error_code"] for r in body["results"]] == [0] * len(creations), body


def every_acl() -> dict[str, Any]:
    return {"resource_type_filter": ANY, "pattern_type_filter": ANY, "operation": ANY,
            "permission_type": ANY}


async def test_acl_apis_answer_security_disabled_without_an_authorizer(
        start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker()
    conn = await open_conn(broker.port)
    described = await call(conn, Api.DESCRIBE_ACLS, every_acl())
    assert described["error_code"] == 54
    created = await call(conn, Api.CREATE_ACLS, {"creations": [
        acl(TOPIC, "t", "User:a", READ)]})
    assert [r["error_code"] for r in created["results"]] == [54]


async def test_only_the_cluster_alterer_manages_acls(start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    alice = await as_user("alice")
    body = await call(alice, Api.CREATE_ACLS, {"creations": [acl(TOPIC, "t", "User:alice",
                                                                 WRITE)]})
    assert [r["error_code"] for r in body["results"]] == [31]
    assert (await call(alice, Api.DESCRIBE_ACLS, every_acl()))["error_code"] == 31
    admin = await as_user("admin")  # a super user: no ACL needed
    await grant(admin, acl(CLUSTER, "kafka-cluster", "User:alice", ALTER))
    body = await call(alice, Api.CREATE_ACLS, {"creations": [
        acl(TOPIC, "t", "User:alice", WRITE), acl(TOPIC, "t", "User:alice", 1)]})
    assert [r["error_code"] for r in body["results"]] == [0, 42]  # ANY is a filter's
    listed = await call(admin, Api.DESCRIBE_ACLS, {**every_acl(), "resource_type_filter":
                                                   TOPIC})
    assert listed["resources"] == [{"resource_type": TOPIC, "resource_name": "t",
                                    "pattern_type": LITERAL, "acls": [
                                        {"principal": "User:alice", "host": "*",
                                         "operation": WRITE, "permission_type": ALLOW}]}]
    assert sample(broker, DENIALS, resource_type="CLUSTER", operation="ALTER") == 1


async def test_topics_need_their_acl_and_a_change_applies_to_the_next_request(
        start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice = await as_user("admin"), await as_user("alice")
    body = await call(admin, Api.CREATE_TOPICS, {"topics": [
        {"name": "orders", "num_partitions": 2}, {"name": "secret", "num_partitions": 1}]})
    assert [t["error_code"] for t in body["topics"]] == [0, 0]
    denied = await call(alice, Api.PRODUCE, {"topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": b""}]}]})
    assert denied["responses"][0]["partition_responses"][0]["error_code"] == 29
    await grant(admin, acl(TOPIC, "ord", "User:alice", WRITE, pattern=PREFIXED))
    md = await call(alice, Api.METADATA, {"topics": None, "allow_auto_topic_creation": False})
    assert [t["name"] for t in md["topics"]] == ["orders"]  # secret is left out
    named = await call(alice, Api.METADATA, {"topics": [{"name": "secret"}],
                                             "allow_auto_topic_creation": False})
    assert named["topics"][0]["error_code"] == 29
    fetch = await call(alice, Api.FETCH, {"max_wait_ms": 0, "topics": [
        {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    assert fetch["responses"][0]["partitions"][0]["error_code"] == 29  # WRITE is not READ
    create = await call(alice, Api.CREATE_TOPICS, {"topics": [{"name": "mine"}]})
    assert create["topics"][0]["error_code"] == 29


async def test_produce_with_some_topics_refused_stores_the_rest(
        start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice = await as_user("admin"), await as_user("alice")
    for name in ("a", "b"):
        await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": name}]})
    await grant(admin, acl(TOPIC, "a", "User:alice", WRITE))
    batch = encode_batch([BatchRecord(value=b"v", timestamp_ms=1)])
    body = await call(alice, Api.PRODUCE, {"topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": batch}]},
        {"name": "b", "partition_data": [{"index": 0, "records": batch}]}]})
    codes = {t["name"]: t["partition_responses"][0]["error_code"] for t in body["responses"]}
    assert codes == {"a": 0, "b": 29}
    ends = await call(admin, Api.LIST_OFFSETS, {"topics": [
        {"name": n, "partitions": [{"partition_index": 0, "timestamp": -1}]}
        for n in ("a", "b")]})
    assert {t["name"]: t["partitions"][0]["offset"] for t in ends["topics"]} == {"a": 1, "b": 0}


async def test_groups_need_read_and_list_groups_shows_only_describable_ones(
        start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice = await as_user("admin"), await as_user("alice")
    await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": "t"}]})
    mine = Member(alice, "mine", ["t"])
    refused = await call(alice, Api.JOIN_GROUP, mine.join_body())
    assert refused["error_code"] == 30
    await grant(admin, acl(GROUP, "mine", "User:alice", READ),
                acl(TOPIC, "t", "User:alice", READ))
    await mine.join()
    assert (await mine.sync({mine.member_id: assignment([("t", [0])])}))["error_code"] == 0
    assert (await mine.heartbeat())["error_code"] == 0
    theirs = Member(admin, "theirs", ["t"])
    await theirs.join()
    listed = await call(alice, Api.LIST_GROUPS, {})
    assert [g["group_id"] for g in listed["groups"]] == ["mine"]
    everything = await call(admin, Api.LIST_GROUPS, {})
    assert sorted(g["group_id"] for g in everything["groups"]) == ["mine", "theirs"]
    described = await call(alice, Api.DESCRIBE_GROUPS, {"groups": ["mine", "theirs"]})
    assert [(g["group_id"], g["error_code"]) for g in described["groups"]] == [
        ("mine", 0), ("theirs", 30)]
    commit = await mine.commit("t", {0: 1})
    assert commit["topics"][0]["partitions"][0]["error_code"] == 0
    # revoking READ on the group stops the member's next heartbeat, fast path or not
    deleted = await call(admin, Api.DELETE_ACLS, {"filters": [
        {"resource_type_filter": GROUP, "resource_name_filter": "mine",
         "pattern_type_filter": LITERAL, "operation": READ, "permission_type": ALLOW}]})
    assert len(deleted["filter_results"][0]["matching_acls"]) == 1
    assert (await mine.heartbeat())["error_code"] == 30


async def test_a_member_belongs_to_the_principal_that_joined(
        start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice, bob = await as_user("admin"), await as_user("alice"), await as_user("bob")
    await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": "t"}]})
    await grant(admin, *(acl(GROUP, "shared", f"User:{u}", READ) for u in ("alice", "bob")))
    member = Member(alice, "shared", ["t"])
    await member.join()
    await member.sync({member.member_id: assignment([("t", [0])])})
    impostor = Member(bob, "shared", ["t"], member_id=member.member_id,
                      generation_id=member.generation_id)
    assert (await impostor.heartbeat())["error_code"] == 30
    left = await impostor.leave()
    assert [m["error_code"] for m in left["members"]] == [30]
    assert (await member.heartbeat())["error_code"] == 0  # still there
    kicked = await call(admin, Api.LEAVE_GROUP, {"group_id": "shared", "members": [
        {"member_id": member.member_id}]})
    assert [m["error_code"] for m in kicked["members"]] == [0]  # a super user may


async def test_acls_and_credentials_survive_a_restart(
        start: Start, login: Any, open_conn: Open) -> None:
    broker = await start()
    admin = await login(broker)("admin")
    await grant(admin, acl(TOPIC, "t", "User:carol", READ))
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha256", b"carol-pw", salt, 4096)
    body = await call(admin, Api.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [
        {"name": "carol", "mechanism": 1, "iterations": 4096, "salt": salt,
         "salted_password": salted}]})
    assert [(r["user"], r["error_code"]) for r in body["results"]] == [("carol", 0)]
    await broker.close()

    again = await start()
    conn = await open_conn(again.listener_ports["SASL_PLAINTEXT"])
    assert (await plain_auth(conn, "carol", "carol-pw"))["error_code"] == 0
    admin = await login(again)("admin")
    listed = await call(admin, Api.DESCRIBE_ACLS, every_acl())
    assert [(r["resource_name"], [a["principal"] for a in r["acls"]])
            for r in listed["resources"]] == [("t", ["User:carol"])]
    creds = await call(admin, Api.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [
        {"name": "carol"}, {"name": "nobody"}]})
    assert [(r["user"], r["error_code"], r["credential_infos"]) for r in creds["results"]] == [
        ("carol", 0, [{"mechanism": 1, "iterations": 4096}]), ("nobody", 91, [])]


async def test_credential_alterations_are_checked_per_user(start: Start, login: Any) -> None:
    broker = await start()
    admin = await login(broker)("admin")
    body = await call(admin, Api.ALTER_USER_SCRAM_CREDENTIALS, {
        "deletions": [{"name": "dup", "mechanism": 1}, {"name": "ghost", "mechanism": 2},
                      {"name": "odd", "mechanism": 7}],
        "upsertions": [{"name": "dup", "mechanism": 1, "iterations": 4096,
                        "salt": b"s" * 16, "salted_password": b"p" * 32},
                       {"name": "weak", "mechanism": 1, "iterations": 100,
                        "salt": b"s" * 16, "salted_password": b"p" * 32}]})
    assert [(r["user"], r["error_code"]) for r in body["results"]] == [
        ("dup", 92), ("ghost", 91), ("odd", 33), ("weak", 93)]

