"""ACLs and credentials on disk: round trip, crash leftovers, corruption, the offline tool."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from groupwire.broker.security.acls import AccessControlEntry, AclBinding, ResourcePattern
from groupwire.broker.security.credentials import (
    CredentialTable,
    credential_from_password,
    password_matches,
)
from groupwire.broker.security.store import (
    SECURITY_FILE,
    SecurityStoreError,
    load_security,
    offline_upsert,
    save_security,
)
from groupwire.broker.storage import TopicStore
from groupwire.protocol.acls import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512

BINDINGS = [
    AclBinding(ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
               AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermission.ALLOW)),
    AclBinding(ResourcePattern(ResourceType.GROUP, "team.", PatternType.PREFIXED),
               AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermission.DENY)),
]


def _table() -> CredentialTable:
    table = CredentialTable()
    table.upsert("alice", credential_from_password(SHA256, "pw-alice"))
    table.upsert("alice", credential_from_password(SHA512, "pw-alice", 8192))
    table.upsert("bob", credential_from_password(SHA512, "pw-bob"))
    return table


def test_absent_file_is_empty(tmp_path: Path) -> None:
    bindings, table = load_security(tmp_path)
    assert bindings == [] and table.users() == []


def test_round_trip_never_stores_a_password(tmp_path: Path) -> None:
    table = _table()
    save_security(tmp_path, BINDINGS, table)
    path = tmp_path / SECURITY_FILE
    text = path.read_text()
    assert "pw-alice" not in text and "pw-bob" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(text)
    assert doc["version"] == 1 and set(doc) == {"version", "acls", "credentials"}
    assert doc["credentials"]["alice"][0]["mechanism"] == "SCRAM-SHA-256"
    bindings, loaded = load_security(tmp_path)
    assert bindings == BINDINGS
    assert list(loaded.items()) == list(table.items())
    cred = loaded.get("alice", SHA512)
    assert cred is not None and cred.iterations == 8192 and password_matches(cred, "pw-alice")


def test_save_replaces_and_leftover_tmp_is_ignored(tmp_path: Path) -> None:
    save_security(tmp_path, BINDINGS, _table())
    # a crash during the next save leaves a partial temporary file next to the old one
    (tmp_path / (SECURITY_FILE + ".tmp")).write_text('{"version": 1, "acls": [')
    bindings, table = load_security(tmp_path)
    assert bindings == BINDINGS and table.users() == ["alice", "bob"]
    save_security(tmp_path, BINDINGS[:1], CredentialTable())
    bindings, table = load_security(tmp_path)
    assert bindings == BINDINGS[:1] and table.users() == []
    assert not (tmp_path / (SECURITY_FILE + ".tmp")).exists()


@pytest.mark.parametrize("content", [
    "{not json",
    "[]",
    '{"version": 2, "acls": [], "credentials": {}}',
    '{"version": 1, "credentials": {}}',
    '{"version": 1, "acls": [{"resource_type": "TOPIC"}], "credentials": {}}',
    '{"version": 1, "acls": [{"resource_type": "BOGUS", "name": "x", "pattern_type": '
    '"LITERAL", "principal": "User:a", "host": "*", "operation": "READ", '
    '"permission": "ALLOW"}], "credentials": {}}',
    '{"version": 1, "acls": [{"resource_type": "TOPIC", "name": "x", "pattern_type": '
    '"MATCH", "principal": "User:a", "host": "*", "operation": "READ", '
    '"permission": "ALLOW"}], "credentials": {}}',
    '{"version": 1, "acls": [], "credentials": {"a": [{"mechanism": "SCRAM-SHA-1", '
    '"salt": "AAAA", "stored_key": "AAAA", "server_key": "AAAA", "iterations": 4096}]}}',
    '{"version": 1, "acls": [], "credentials": {"a": [{"mechanism": "SCRAM-SHA-256", '
    '"salt": "!!", "stored_key": "AAAA", "server_key": "AAAA", "iterations": 4096}]}}',
    '{"version": 1, "acls": [], "credentials": {"a": [{"mechanism": "SCRAM-SHA-256", '
    '"salt": "AAAA", "stored_key": "AAAA", "server_key": "AAAA", "iterations": 4096}]}}',
    '{"version": 1, "acls": [], "credentials": {"a": [{"mechanism": "SCRAM-SHA-256", '
    '"salt": "AAAA", "stored_key": "AAAA", "server_key": "AAAA", "iterations": "4096"}]}}',
    "\x00\x00\x00",
])
def test_corrupt_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    (tmp_path / SECURITY_FILE).write_text(content)
    with pytest.raises(SecurityStoreError) as info:
        load_security(tmp_path)
    message = str(info.value)
    assert str(tmp_path / SECURITY_FILE) in message and "\n" not in message


def test_offline_upsert_creates_the_data_dir_and_keeps_acls(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    offline_upsert(data_dir, "admin", [credential_from_password(SHA256, "pw")])
    _, table = load_security(data_dir)
    assert table.users() == ["admin"]
    save_security(data_dir, BINDINGS, table)
    offline_upsert(data_dir, "admin", [credential_from_password(SHA512, "pw2")])
    bindings, table = load_security(data_dir)
    assert bindings == BINDINGS
    assert [c.mechanism for c in table.mechanisms_of("admin")] == [SHA256, SHA512]


def test_offline_upsert_refuses_while_a_broker_holds_the_dir(tmp_path: Path) -> None:
    store = TopicStore(tmp_path)
    try:
        with pytest.raises(SecurityStoreError, match="a broker is running on"):
            offline_upsert(tmp_path, "admin", [credential_from_password(SHA256, "pw")])
    finally:
        store.close()
    assert not (tmp_path / SECURITY_FILE).exists()
    offline_upsert(tmp_path, "admin", [credential_from_password(SHA256, "pw")])
    assert load_security(tmp_path)[1].users() == ["admin"]


def test_the_topic_store_leaves_the_file_alone(tmp_path: Path) -> None:
    offline_upsert(tmp_path, "admin", [credential_from_password(SHA256, "pw")])
    save_security(tmp_path, BINDINGS, load_security(tmp_path)[1])
    before = (tmp_path / SECURITY_FILE).read_bytes()
    for _ in range(2):  # the second open has a meta.json, so it looks for strays
        store = TopicStore(tmp_path)
        store.close()
    (tmp_path / "logs" / "stray-0").mkdir()
    TopicStore(tmp_path).close()
    assert not (tmp_path / "logs" / "stray-0").exists()
    assert (tmp_path / SECURITY_FILE).read_bytes() == before
    assert os.listdir(tmp_path).count(SECURITY_FILE) == 1
