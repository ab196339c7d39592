"""The SDK's Admin and the ``acls``/``users`` commands against a broker run with
``--authorizer acl``: bindings and SCRAM users added, listed and removed over SASL as a
super user, and refused to anyone else."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.cli.main import main
from groupwire.client.acls import AclBinding, AclBindingFilter, ScramMechanism
from groupwire.client.admin import Admin, ScramCredentialInfo, TopicSpec
from groupwire.client.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    ResourceNotFoundError,
    SecurityDisabledError,
    UnacceptableCredentialError,
)

from .conftest import StartBroker, write_user

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture
async def acl_broker(start_broker: StartBroker, tmp_path: Path) -> Broker:
    data_dir = tmp_path / "acl"
    write_user(data_dir, ADMIN, ADMIN_PASSWORD)
    return await start_broker(
        data_dir=data_dir, authorizer="acl", super_users=f"User:{ADMIN}",
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")


def _sasl(broker: Broker) -> str:
    return f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}"


def _admin(broker: Broker, user: str = ADMIN, password: str = ADMIN_PASSWORD,
           mechanism: str = "SCRAM-SHA-256") -> Admin:
    return Admin(_sasl(broker), request_timeout_ms=5000, security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism=mechanism, sasl_plain_username=user,
                 sasl_plain_password=password)


async def test_acls_added_listed_and_removed(acl_broker: Broker) -> None:
    read = AclBinding.allow("User:alice", "read", "topic", "orders")
    describe = AclBinding.allow("User:alice", "describe", "group", "team-", pattern="prefixed")
    deny = AclBinding.deny("User:*", "write", "topic", "*", host="10.0.0.1")
    async with _admin(acl_broker) as admin:
        assert await admin.describe_acls() == []
        assert await admin.create_acls([read, describe, deny]) == dict.fromkeys(
            [read, describe, deny])
        assert await admin.create_acls(read) == {read: None}  # again: no error, no copy
        assert await admin.describe_acls() == sorted([read, describe, deny])
        assert await admin.describe_acls(AclBindingFilter.of(
            resource_type="topic", resource_name="orders", pattern_type="match")) == [
            deny, read]  # sorted by resource: '*' before 'orders'
        assert await admin.describe_acls(AclBindingFilter.of(principal="User:alice")) == [
            read, describe]
        removed = await admin.delete_acls([AclBindingFilter.of(permission="deny"),
                                           AclBindingFilter.of(resource_type="group")])
        assert removed == [[deny], [describe]]
        assert await admin.delete_acls(AclBindingFilter.of(permission="deny")) == [[]]
        assert await admin.describe_acls() == [read]


async def test_users_managed_through_the_broker(acl_broker: Broker) -> None:
    async with _admin(acl_broker) as admin:
        await admin.upsert_user_scram_credential("bob", "bob-secret")
        await admin.upsert_user_scram_credential("bob", "bob-secret", "SCRAM-SHA-512", 8192)
        assert await admin.describe_user_scram_credentials() == {
            ADMIN: [ScramCredentialInfo(SHA256, 4096), ScramCredentialInfo(SHA512, 4096)],
            "bob": [ScramCredentialInfo(SHA256, 4096), ScramCredentialInfo(SHA512, 8192)]}
        with pytest.raises(UnacceptableCredentialError, match="iterations 100"):
            await admin.upsert_user_scram_credential("bob", "x", SHA256, 100)
        with pytest.raises(ResourceNotFoundError, match="'carol'"):
            await admin.describe_user_scram_credentials("carol")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        async with _admin(acl_broker, "bob", "bob-secret", mechanism) as bob:
            with pytest.raises(ClusterAuthorizationFailedError):  # no ACL lets bob DESCRIBE
                await bob.describe_acls()
    async with _admin(acl_broker) as admin:
        await admin.delete_user_scram_credential("bob", SHA256)
        with pytest.raises(ResourceNotFoundError):
            await admin.delete_user_scram_credential("bob", SHA256)
        assert (await admin.describe_user_scram_credentials("bob")) == {
            "bob": [ScramCredentialInfo(SHA512, 8192)]}
    with pytest.raises(AuthenticationFailedError):
        async with _admin(acl_broker, "bob", "bob-secret", "SCRAM-SHA-256"):
            pass


async def test_acl_apis_refused_to_other_principals(acl_broker: Broker) -> None:
    plaintext = f"127.0.0.1:{acl_broker.listener_ports['PLAINTEXT']}"
    async with Admin(plaintext, request_timeout_ms=5000) as anonymous:
        with pytest.raises(ClusterAuthorizationFailedError):
            await anonymous.describe_acls()
        with pytest.raises(ClusterAuthorizationFailedError, match="ALTER the cluster"):
            await anonymous.create_acls(AclBinding.allow("User:ANONYMOUS", "all", "cluster"))
        with pytest.raises(ClusterAuthorizationFailedError):
            await anonymous.upsert_user_scram_credential("mallory", "pw")


async def test_acl_apis_without_an_authorizer(broker: Broker) -> None:
    async with Admin(f"127.0.0.1:{broker.port}", request_timeout_ms=5000) as admin:
        with pytest.raises(SecurityDisabledError):
            await admin.describe_acls()
        with pytest.raises(SecurityDisabledError):
            await admin.create_acls(AclBinding.allow("User:a", "read", "topic", "t"))


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    own = "".join(line + "\n" for line in err.splitlines() if line.startswith(("groupwire ",
                                                                              "dry run")))
    return code, out, own


def _json(out: str) -> Any:
    """The command's one JSON line (the in-process broker logs to the same stdout first)."""
    return json.loads(out.strip().splitlines()[-1])


async def test_the_commands_against_a_secured_broker(
        acl_broker: Broker, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                     f' required username="{ADMIN}" password="{ADMIN_PASSWORD}";\n')
    conn = ("--bootstrap", _sasl(acl_broker), "--command-config", str(props))
    code, out, err = await _cli(capsys, "acls", "add", "--allow", "--principal", "User:carol",
                                "--operation", "read", "--operation", "Describe", "--topic",
                                "orders", *conn)
    assert code == 0, err
    code, out, _ = await _cli(capsys, "acls", "list", "--principal", "User:carol", "--json",
                              *conn)
    assert code == 0
    assert [(b["operation"], b["resource_name"]) for b in _json(out)] == [
        ("READ", "orders"), ("DESCRIBE", "orders")]
    code, out, err = await _cli(capsys, "acls", "remove", "--operation", "read", *conn)
    assert code == 0 and "dry run: run again with --execute" in err
    code, out, _ = await _cli(capsys, "acls", "remove", "--operation", "READ", "--execute",
                              "--json", *conn)
    assert code == 0 and [b["operation"] for b in _json(out)["bindings"]] == ["READ"]
    monkeypatch.setattr("sys.stdin", io.StringIO("carol-secret\n"))
    code, out, err = await _cli(capsys, "users", "add", "carol", *conn)
    assert code == 0, err
    # carol authenticates with the password that never travelled
    monkeypatch.setenv("GROUPWIRE_SASL_PASSWORD", "carol-secret")
    code, out, err = await _cli(capsys, "topics", "list", "--bootstrap", _sasl(acl_broker),
                                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism",
                                "SCRAM-SHA-256", "--sasl-username", "carol")
    assert code == 0, err
    code, out, _ = await _cli(capsys, "users", "list", "--json", *conn)
    assert code == 0 and [u["user"] for u in _json(out)] == [ADMIN, "carol"]
    code, out, err = await _cli(capsys, "users", "remove", "carol", *conn)
    assert code == 0, err
    code, _, err = await _cli(capsys, "topics", "list", "--bootstrap", _sasl(acl_broker),
                              "--security-protocol", "SASL_PLAINTEXT", "--sasl-username",
                              "carol", "--sasl-mechanism", "SCRAM-SHA-256")
    assert code == 1 and err.count("\n") == 1 and "SASL_AUTHENTICATION_FAILED" in err


async def test_consume_names_a_topic_the_user_may_not_describe(
        acl_broker: Broker, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with _admin(acl_broker) as admin:
        await admin.create_topics([TopicSpec("orders", 1)])
        await admin.upsert_user_scram_credential("dave", "dave-secret")
    monkeypatch.setenv("GROUPWIRE_SASL_PASSWORD", "dave-secret")
    code, _, err = await _cli(capsys, "consume", "--topic", "orders", "--bootstrap",
                              _sasl(acl_broker),
                              "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism",
                              "SCRAM-SHA-256", "--sasl-username", "dave",
                              "--max-messages", "1", "--idle-timeout-ms", "100")
    assert code == 1, err
    assert "TOPIC_AUTHORIZATION_FAILED" in err and "unknown topic" not in err
