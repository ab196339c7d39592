"""``groupwire acls`` and ``groupwire users`` without a broker: what the flags parse to,
what each command asks the Admin (a stand-in here), the dry run of ``acls remove``, and
passwords from a prompt or stdin. ``users add --data-dir`` writes the real store."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.security.credentials import password_matches
from groupwire.broker.security.store import load_security
from groupwire.broker.storage.topic_store import LOCK_FILE, _lock
from groupwire.cli.acls import bindings_to_add
from groupwire.cli.errors import CliError
from groupwire.cli.main import build_parser, main
from groupwire.cli.users import read_new_password
from groupwire.client.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)
from groupwire.client.admin import Admin, ScramCredentialInfo
from groupwire.client.errors import SecurityDisabledError, error_for


class Calls:
    """What the commands asked the stand-in Admin, and what it answers."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.bindings: list[AclBinding] = []
        self.create_error: int | None = None
        self.users: dict[str, list[ScramCredentialInfo]] = {}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    state = Calls()

    async def nothing(self: Admin) -> None:
        pass

    async def describe_acls(self: Admin, f: AclBindingFilter | None = None,
                            ) -> list[AclBinding]:
        state.log.append(("describe_acls", f))
        return [b for b in state.bindings if f is None or f.matches(b)]

    async def delete_acls(self: Admin, filters: list[AclBindingFilter],
                          ) -> list[list[AclBinding]]:
        state.log.append(("delete_acls", filters))
        out = [[b for b in state.bindings if f.matches(b)] for f in filters]
        state.bindings = [b for b in state.bindings if not any(f.matches(b) for f in filters)]
        return out

    async def create_acls(self: Admin, bindings: list[AclBinding]) -> dict[AclBinding, Any]:
        state.log.append(("create_acls", bindings))
        if state.create_error is not None:
            return {b: error_for(state.create_error, "no authorizer") for b in bindings}
        state.bindings.extend(bindings)
        return dict.fromkeys(bindings)

    async def upsert(self: Admin, user: str, password: str, mechanism: ScramMechanism,
                     iterations: int) -> None:
        state.log.append(("upsert", (user, password, mechanism, iterations)))

    async def describe_users(self: Admin, users: list[str] | None = None,
                             ) -> dict[str, list[ScramCredentialInfo]]:
        state.log.append(("describe_users", users))
        return {u: c for u, c in state.users.items() if users is None or u in users}

    async def delete_user(self: Admin, user: str, mechanism: ScramMechanism) -> None:
        state.log.append(("delete_user", (user, mechanism)))

    for name, fake in [("start", nothing), ("close", nothing),
                       ("describe_acls", describe_acls), ("delete_acls", delete_acls),
                       ("create_acls", create_acls), ("upsert_user_scram_credential", upsert),
                       ("describe_user_scram_credentials", describe_users),
                       ("delete_user_scram_credential", delete_user)]:
        monkeypatch.setattr(Admin, name, fake)
    for var in ("GROUPWIRE_SECURITY_PROTOCOL", "GROUPWIRE_SASL_USERNAME",
                "GROUPWIRE_SASL_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "240")
    yield state


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_acls_add_parses_names_in_any_case() -> None:
    args = build_parser().parse_args([
        "acls", "add", "--allow", "--principal", "User:alice", "--operation", "Read",
        "--operation", "DESCRIBE", "--operation", "read", "--topic", "orders-",
        "--prefixed"])
    assert bindings_to_add(args) == [
        AclBinding.allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders-",
                         pattern=PatternType.PREFIXED),
        AclBinding.allow("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders-",
                         pattern=PatternType.PREFIXED)]
    args = build_parser().parse_args([
        "acls", "add", "--deny", "--principal", "User:*", "--host", "10.0.0.9",
        "--operation", "alter", "--cluster"])
    (b,) = bindings_to_add(args)
    assert (b.permission, b.resource_type, b.resource_name, b.host) == (
        AclPermission.DENY, ResourceType.CLUSTER, "kafka-cluster", "10.0.0.9")
    with pytest.raises(CliError, match="--prefixed: the cluster has one name"):
        bindings_to_add(build_parser().parse_args([
            "acls", "add", "--deny", "--principal", "User:a", "--operation", "alter",
            "--cluster", "--prefixed"]))


def test_acls_add_list_and_remove_name_a_transactional_id(
        calls: Calls, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([
        "acls", "add", "--allow", "--principal", "User:etl", "--operation", "write",
        "--transactional-id", "etl-", "--prefixed"])
    assert bindings_to_add(args) == [AclBinding.allow(
        "User:etl", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "etl-",
        pattern=PatternType.PREFIXED)]
    args = build_parser().parse_args([
        "acls", "add", "--allow", "--principal", "User:etl", "--operation",
        "idempotent-write", "--cluster"])
    assert [b.operation for b in bindings_to_add(args)] == [AclOperation.IDEMPOTENT_WRITE]
    mine = AclBinding.allow("User:etl", "write", "transactional-id", "etl-app")
    calls.bindings = [mine, AclBinding.allow("User:etl", "write", "topic", "etl-app")]
    code, out, _ = _run(capsys, "acls", "list", "--transactional-id", "etl-app", "--json")
    assert code == 0 and [b["resource_type"] for b in json.loads(out)] == ["TRANSACTIONAL_ID"]
    assert calls.log[-1] == ("describe_acls", AclBindingFilter(
        resource_type=ResourceType.TRANSACTIONAL_ID, resource_name="etl-app"))
    code, _, _ = _run(capsys, "acls", "remove", "--transactional-id", "etl-app", "--execute")
    assert code == 0 and mine not in calls.bindings and len(calls.bindings) == 1
    code, _, err = _run(capsys, "acls", "list", "--transactional-id", "a",
                        "--resource-type", "topic")
    assert code == 1 and "--transactional-id names the resource" in err


@pytest.mark.parametrize("argv", [
    ["acls", "add", "--principal", "User:a", "--operation", "read", "--topic", "t"],
    ["acls", "add", "--allow", "--deny", "--principal", "User:a", "--operation", "read",
     "--topic", "t"],
    ["acls", "add", "--allow", "--principal", "alice", "--operation", "read", "--topic", "t"],
    ["acls", "add", "--allow", "--principal", "User:a", "--operation", "any", "--topic", "t"],
    ["acls", "add", "--allow", "--principal", "User:a", "--operation", "read"],
    ["acls", "add", "--allow", "--principal", "User:a", "--operation", "read", "--topic",
     "t", "--group", "g"],
    ["acls", "add", "--allow", "--principal", "User:a", "--operation", "write",
     "--transactional-id", "x", "--cluster"],
    ["acls", "list", "--resource-type", "queue"],
    ["acls", "remove", "--operation", "reed"],
    ["users", "add", "alice"],
    ["users", "add", "alice", "--bootstrap", "h:1", "--data-dir", "d"],
    ["users", "add", "alice", "--data-dir", "d", "--mechanism", "SCRAM-SHA-1"],
    ["users", "add", "alice", "--data-dir", "d", "--iterations", "0"],
])
def test_bad_acl_and_user_flags_are_one_line_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_acls_list_filters_and_prints(calls: Calls, capsys: pytest.CaptureFixture[str]) -> None:
    calls.bindings = [AclBinding.allow("User:a", "read", "topic", "orders"),
                      AclBinding.deny("User:b", "write", "group", "g")]
    code, out, _ = _run(capsys, "acls", "list", "--resource-type", "Topic", "--json")
    assert code == 0
    assert json.loads(out) == [{"resource_type": "TOPIC", "resource_name": "orders",
                                "pattern_type": "LITERAL", "principal": "User:a", "host": "*",
                                "operation": "READ", "permission": "ALLOW"}]
    assert calls.log == [("describe_acls", AclBindingFilter(resource_type=ResourceType.TOPIC))]
    code, out, _ = _run(capsys, "acls", "list")
    assert code == 0 and out.splitlines()[0] == "ACL bindings"  # piped: tab-separated
    assert out.splitlines()[1:] == [
        "resource type\tresource name\tpattern\tprincipal\thost\toperation\tpermission",
        "TOPIC\torders\tLITERAL\tUser:a\t*\tREAD\tALLOW",
        "GROUP\tg\tLITERAL\tUser:b\t*\tWRITE\tDENY"]


def test_acls_remove_is_a_dry_run_unless_executed(calls: Calls,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    keep = AclBinding.allow("User:a", "read", "group", "g")
    gone = AclBinding.allow("User:b", "read", "topic", "t")
    calls.bindings = [keep, gone]
    code, out, err = _run(capsys, "acls", "remove", "--principal", "User:b")
    assert code == 0 and [c for c, _ in calls.log] == ["describe_acls"]
    assert "dry run" in out and "User:b" in out and "User:a" not in out
    assert "dry run: run again with --execute to remove these 1 binding(s)" in err
    assert calls.bindings == [keep, gone]
    code, out, _ = _run(capsys, "acls", "remove", "--principal", "User:b", "--execute",
                        "--json")
    assert code == 0 and json.loads(out)["executed"] is True
    assert [b["principal"] for b in json.loads(out)["bindings"]] == ["User:b"]
    assert calls.bindings == [keep]
    code, out, _ = _run(capsys, "acls", "remove", "--principal", "User:b", "--execute")
    assert code == 0 and "no ACL binding matches (principal=User:b): nothing removed" in out


def test_acls_remove_needs_a_filter(calls: Calls, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "acls", "remove", "--execute")
    assert code == 1 and err.count("\n") == 1 and "give at least one filter" in err
    assert calls.log == []


def test_acls_add_reports_a_refusal_once(calls: Calls,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["acls", "add", "--allow", "--principal", "User:a", "--operation", "read",
            "--operation", "describe", "--group", "g"]
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and out.count("added") == 3  # the title and one per binding
    calls.create_error = int(SecurityDisabledError.code)
    code, _, err = _run(capsys, *argv)
    assert code == 1 and err.count("\n") == 1 and "SECURITY_DISABLED" in err


def test_users_add_reads_the_password_from_stdin(calls: Calls, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret pass\nignored\n"))
    code, out, _ = _run(capsys, "users", "add", "alice", "--bootstrap", "h:1")
    assert code == 0 and "SCRAM-SHA-256, SCRAM-SHA-512" in out
    assert calls.log == [
        ("upsert", ("alice", "s3cret pass", ScramMechanism.SCRAM_SHA_256, 4096)),
        ("upsert", ("alice", "s3cret pass", ScramMechanism.SCRAM_SHA_512, 4096))]
    calls.log.clear()
    monkeypatch.setattr("sys.stdin", io.StringIO("pw\n"))
    code, _, _ = _run(capsys, "users", "add", "bob", "--bootstrap", "h:1", "--mechanism",
                      "scram-sha-512", "--iterations", "8192")
    assert code == 0
    assert calls.log == [("upsert", ("bob", "pw", ScramMechanism.SCRAM_SHA_512, 8192))]


@pytest.mark.parametrize("stdin", ["", "\n", "\r\n"])
def test_an_empty_password_is_refused(stdin: str, calls: Calls,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code, _, err = _run(capsys, "users", "add", "alice", "--bootstrap", "h:1")
    assert code == 1 and err == "groupwire users: error: empty password refused\n"
    assert calls.log == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_password_is_asked_twice() -> None:
    answers = iter(["one", "one"])
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return next(answers)

    assert read_new_password("alice", stdin=_Terminal(), prompt=prompt) == "one"
    assert asked == ["password for alice: ", "password for alice (again): "]
    answers = iter(["one", "two"])
    with pytest.raises(CliError, match="the two passwords differ"):
        read_new_password("alice", stdin=_Terminal(), prompt=lambda _: next(answers))
    with pytest.raises(CliError, match="empty password refused"):
        read_new_password("alice", stdin=_Terminal(), prompt=lambda _: "")


def test_users_list_and_remove(calls: Calls, capsys: pytest.CaptureFixture[str]) -> None:
    calls.users = {"alice": [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                             ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)]}
    code, out, _ = _run(capsys, "users", "list", "--json")
    assert code == 0 and json.loads(out) == [{"user": "alice", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
    code, out, _ = _run(capsys, "users", "remove", "alice")
    assert code == 0 and "SCRAM-SHA-256, SCRAM-SHA-512 credentials removed" in out
    assert calls.log[-2:] == [("delete_user", ("alice", ScramMechanism.SCRAM_SHA_256)),
                              ("delete_user", ("alice", ScramMechanism.SCRAM_SHA_512))]
    code, _, _ = _run(capsys, "users", "remove", "alice", "--mechanism", "SCRAM-SHA-512")
    assert code == 0 and calls.log[-1] == ("delete_user",
                                           ("alice", ScramMechanism.SCRAM_SHA_512))
    code, _, err = _run(capsys, "users", "remove", "nobody")
    assert code == 1 and "user 'nobody' has no SCRAM credentials" in err


def test_users_add_offline_writes_the_data_dir(tmp_path: Path, calls: Calls,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "new" / "data"  # created if absent
    monkeypatch.setattr("sys.stdin", io.StringIO("admin-secret\n"))
    code, out, _ = _run(capsys, "users", "add", "admin", "--data-dir", str(data_dir))
    assert code == 0 and "offline into" in out and calls.log == []  # no broker asked
    _, table = load_security(data_dir)
    creds = table.mechanisms_of("admin")
    assert [c.mechanism for c in creds] == [ScramMechanism.SCRAM_SHA_256,
                                            ScramMechanism.SCRAM_SHA_512]
    assert all(password_matches(c, "admin-secret") for c in creds)
    assert not password_matches(creds[0], "admin-secreT")
    assert "admin-secret" not in (data_dir / "security.json").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO("x\n"))
    code, _, err = _run(capsys, "users", "add", "admin", "--data-dir", str(data_dir),
                        "--iterations", "100")
    assert code == 1 and "--iterations: must be 4096-16384, got 100" in err


def test_users_add_offline_refuses_while_a_broker_holds_the_data_dir(
        tmp_path: Path, calls: Calls, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fd = _lock(tmp_path / LOCK_FILE)  # as a running broker holds it
    try:
        monkeypatch.setattr("sys.stdin", io.StringIO("pw\n"))
        code, _, err = _run(capsys, "users", "add", "admin", "--data-dir", str(tmp_path))
    finally:
        os.close(fd)
    assert code == 1 and err.count("\n") == 1
    assert "a broker is running on" in err and "--bootstrap" in err
    assert not (tmp_path / "security.json").exists()
