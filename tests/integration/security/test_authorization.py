"""The ACL authorizer over real SASL connections: ACL APIs, per-API refusals, a changed
ACL taking effect on the next request, member ownership, durability across restart, and
the transactional APIs (Kafka's TRANSACTIONAL_ID resource, idempotent producers)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire import Producer
from groupwire.broker.server import Broker
from groupwire.errors import TransactionalIdAuthorizationFailedError
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



# --- transactions: Kafka's TRANSACTIONAL_ID resource and the transactional APIs --------------

TRANSACTIONAL_ID, IDEMPOTENT_WRITE, CLUSTER_ACTION = 5, 12, 9
TXN_DENIED = 53
RETRIABLE = (14, 15, 51)  # loading, __transaction_state being made, concurrent


async def init_producer(conn: WireConn, transactional_id: str | None) -> dict[str, Any]:
    """InitProducerId, asked again while the answer is retriable (the first transactional
    one waits for ``__transaction_state`` to be made)."""
    async with asyncio.timeout(10):
        while True:
            body = await call(conn, Api.INIT_PRODUCER_ID, {
                "transactional_id": transactional_id, "transaction_timeout_ms": 60_000})
            if body["error_code"] not in RETRIABLE:
                return body
            await asyncio.sleep(0.02)


def _producer(broker: Broker, user: str, transactional_id: str) -> Producer:
    return Producer(f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}",
                    transactional_id=transactional_id, linger_ms=1, request_timeout_ms=5000,
                    retry_backoff_ms=20, security_protocol="SASL_PLAINTEXT",
                    sasl_plain_username=user, sasl_plain_password=USERS[user])


async def test_a_transactional_producer_needs_write_on_its_transactional_id(
        start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice, bob = await as_user("admin"), await as_user("alice"), await as_user("bob")
    await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": "t"}]})
    await grant(admin, acl(TOPIC, "t", "User:alice", WRITE))
    refused = await init_producer(alice, "app-1")
    assert (refused["error_code"], refused.get("producer_id", -1)) == (TXN_DENIED, -1)
    assert "transactional id 'app-1'" in refused["error_message"]
    found = await call(alice, Api.FIND_COORDINATOR, {"key": "app-1", "key_type": 1})
    assert found["error_code"] == TXN_DENIED
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        async with _producer(broker, "alice", "app-1") as p:
            await p.begin_transaction()
    assert sample(broker, DENIALS, resource_type="TRANSACTIONAL_ID", operation="WRITE") >= 1

    # WRITE on the id (a prefix here) and on the topic: the transaction commits
    await grant(admin, acl(TRANSACTIONAL_ID, "app-", "User:alice", WRITE, pattern=PREFIXED))
    async with _producer(broker, "alice", "app-1") as p, p.transaction():
        await p.send_and_wait("t", b"a", partition=0)
        await p.send_and_wait("t", b"b", partition=0)
    fetch = {"max_wait_ms": 0, "isolation_level": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0}]}]}
    async with asyncio.timeout(10):  # the markers are written after EndTxn is answered
        while (part := (await call(admin, Api.FETCH, fetch))["responses"][0]["partitions"][0]
               )["last_stable_offset"] < 3:
            await asyncio.sleep(0.02)
    assert (part["high_watermark"], part["last_stable_offset"]) == (3, 3)  # a, b, marker

    # another principal may neither end nor describe alice's transactions
    bob_end = await call(bob, Api.END_TXN, {"transactional_id": "app-1", "producer_id": 0,
                                            "producer_epoch": 0, "committed": False})
    assert bob_end["error_code"] == TXN_DENIED
    described = await call(bob, Api.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["app-1"]})
    assert [(s["transactional_id"], s["error_code"]) for s in
            described["transaction_states"]] == [("app-1", TXN_DENIED)]
    assert (await call(bob, Api.LIST_TRANSACTIONS, {})).get("transaction_states", []) == []
    listed = await call(alice, Api.LIST_TRANSACTIONS, {})  # WRITE implies DESCRIBE
    assert [t["transactional_id"] for t in listed["transaction_states"]] == ["app-1"]


async def test_an_idempotent_producer_needs_write_on_some_topic_or_idempotent_write(
        start: Start, login: Any) -> None:
    """Kafka 3.0+'s rule (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any
    topic, which a producer needs anyway to produce anything."""
    broker = await start()
    as_user = login(broker)
    admin, alice, bob = await as_user("admin"), await as_user("alice"), await as_user("bob")
    for conn in (alice, bob):
        assert (await init_producer(conn, None))["error_code"] == 31
    assert sample(broker, DENIALS, resource_type="TOPIC", operation="WRITE") == 2
    await grant(admin, acl(TOPIC, "ord", "User:alice", WRITE, pattern=PREFIXED),
                acl(CLUSTER, "kafka-cluster", "User:bob", IDEMPOTENT_WRITE))
    for conn in (alice, bob):
        body = await init_producer(conn, None)
        assert body["error_code"] == 0 and body["producer_id"] >= 0
    # a DENY that covers alice's one ALLOW whole leaves her nothing to write
    await grant(admin, acl(TOPIC, "o", "User:alice", WRITE, pattern=PREFIXED, permission=2))
    assert (await init_producer(alice, None))["error_code"] == 31


async def test_write_txn_markers_are_for_brokers_only(start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice = await as_user("admin"), await as_user("alice")
    await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": "t"}]})
    await grant(admin, acl(TOPIC, "t", "User:alice", WRITE),
                acl(TRANSACTIONAL_ID, "*", "User:alice", WRITE))
    markers = {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                            "coordinator_epoch": 0, "topics": [{"name": "t",
                                                                "partitions": [0]}]}]}
    refused = await call(alice, Api.WRITE_TXN_MARKERS, markers)
    assert (refused["error_code"], refused.get("markers", [])) == (31, [])
    ends = await call(admin, Api.LIST_OFFSETS, {"topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert ends["topics"][0]["partitions"][0]["offset"] == 0  # no marker was written
    await grant(admin, acl(CLUSTER, "kafka-cluster", "User:alice", CLUSTER_ACTION))
    assert (await call(alice, Api.WRITE_TXN_MARKERS, markers))["error_code"] == 0


async def test_transactional_offsets_need_read_on_the_group(start: Start, login: Any) -> None:
    broker = await start()
    as_user = login(broker)
    admin, alice = await as_user("admin"), await as_user("alice")
    await call(admin, Api.CREATE_TOPICS, {"topics": [{"name": "in"}, {"name": "secret"}]})
    await grant(admin, acl(TRANSACTIONAL_ID, "etl", "User:alice", WRITE),
                acl(TOPIC, "in", "User:alice", READ))
    producer = await init_producer(alice, "etl")
    assert producer["error_code"] == 0
    ids = {"transactional_id": "etl", "producer_id": producer["producer_id"],
           "producer_epoch": producer["producer_epoch"]}
    offsets = {**ids, "group_id": "g", "topics": [
        {"name": n, "partitions": [{"partition_index": 0, "committed_offset": 5}]}
        for n in ("in", "secret")]}
    assert (await call(alice, Api.ADD_OFFSETS_TO_TXN, {**ids, "group_id": "g"})
            )["error_code"] == 30
    refused = await call(alice, Api.TXN_OFFSET_COMMIT, offsets)
    assert (refused["error_code"], refused.get("topics", [])) == (30, [])
    assert "READ group 'g'" in refused["error_message"]

    await grant(admin, acl(GROUP, "g", "User:alice", READ))
    assert (await call(alice, Api.ADD_OFFSETS_TO_TXN, {**ids, "group_id": "g"})
            )["error_code"] == 0
    body = await call(alice, Api.TXN_OFFSET_COMMIT, offsets)
    assert body["error_code"] == 0
    assert {t["name"]: [p["error_code"] for p in t["results"]] for t in body["topics"]} == {
        "in": [0], "secret": [29]}
    assert (await call(alice, Api.END_TXN, {**ids, "committed": True}))["error_code"] == 0
    fetch = {"group_id": "g", "topics": [{"name": "in", "partition_indexes": [0]}]}
    async with asyncio.timeout(10):  # the offsets are the group's once the marker is written
        while (await call(admin, Api.OFFSET_FETCH, fetch)
               )["topics"][0]["partitions"][0]["committed_offset"] != 5:
            await asyncio.sleep(0.02)
