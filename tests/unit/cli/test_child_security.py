"""``chaos``, ``demo`` and ``report`` take the security flags and hand them to the
processes they start in the environment: a password is never on a child's command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import trustme
from rich.console import Console

from groupwire.cli import demo
from groupwire.cli import report as report_cli
from groupwire.cli.chaos import runner
from groupwire.cli.chaos.command import options_from as chaos_options
from groupwire.cli.child_security import CLIENT_PROPERTIES_ENV, child_env, security_from_env
from groupwire.cli.errors import CliError
from groupwire.cli.main import build_parser

PASSWORD = "s3cret-pw"
SASL = ["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-256",
        "--sasl-username", "alice"]


@pytest.fixture(autouse=True)
def password(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GROUPWIRE_SECURITY_PROTOCOL", "GROUPWIRE_SASL_MECHANISM",
                "GROUPWIRE_SASL_USERNAME", "GROUPWIRE_CLIENT_SSL_CAFILE",
                "GROUPWIRE_CLIENT_SSL_CERTFILE", "GROUPWIRE_CLIENT_SSL_KEYFILE",
                CLIENT_PROPERTIES_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GROUPWIRE_SASL_PASSWORD", PASSWORD)


def test_child_env_carries_what_the_protocol_uses_with_absolute_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    env = child_env({"security.protocol": "SASL_SSL", "sasl.username": "alice",
                     "sasl.password": PASSWORD, "ssl.truststore.location": "ca.pem"})
    assert json.loads(env[CLIENT_PROPERTIES_ENV])["ssl.truststore.location"] == str(
        tmp_path / "ca.pem")
    monkeypatch.chdir("/")  # the child starts elsewhere: the same file still
    config = security_from_env(env)
    assert config.uses_tls and config.ssl_context is not None
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("alice", PASSWORD)
    # a TLS file from the environment means nothing to a SASL_PLAINTEXT run
    env = child_env({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
                     "sasl.password": PASSWORD, "ssl.truststore.location": "/nope.pem"})
    assert "ssl.truststore.location" not in json.loads(env[CLIENT_PROPERTIES_ENV])
    # plaintext: an empty value, so that nothing is inherited from further up
    assert child_env({"sasl.username": "alice"}) == {CLIENT_PROPERTIES_ENV: ""}
    assert security_from_env({CLIENT_PROPERTIES_ENV: ""}).security_protocol == "PLAINTEXT"


@pytest.mark.parametrize("command", [["chaos"], ["demo"]])
def test_a_secured_protocol_needs_bootstrap(command: list[str]) -> None:
    """The run's own broker (and the demo's) listen in plaintext: one line saying so."""
    args = build_parser().parse_args([*command, *SASL])
    parse = chaos_options if command == ["chaos"] else demo.options_from
    with pytest.raises(CliError, match=r"SASL_PLAINTEXT.*--bootstrap"):
        parse(args)


def test_chaos_members_get_the_settings_in_their_environment_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = chaos_options(build_parser().parse_args(["chaos", "--bootstrap", "h:9093", *SASL]))
    assert opts.security.security_protocol == "SASL_PLAINTEXT"
    assert opts.security.sasl_plain_password == PASSWORD
    started: list[tuple[tuple[str, ...], dict[str, str]]] = []

    async def fake_start(*argv: str, stdout: int, stderr: int,
                         env: dict[str, str] | None = None) -> Any:
        started.append((argv, dict(env or {})))
        raise RuntimeError("started")  # nothing to run: the call is what is checked

    monkeypatch.setattr(runner, "start_child", fake_start)
    run = runner.Run(opts, tmp_path, Console(), topic="t", group="g", bootstrap="h:9093")
    with pytest.raises(RuntimeError, match="started"):
        asyncio.run(runner._add_member(run))
    ((argv, env),) = started
    assert argv[0] == "groupwire.cli.chaos.member" and PASSWORD not in " ".join(argv)
    member = security_from_env(env)
    assert (member.security_protocol, member.sasl_mechanism, member.sasl_plain_username,
            member.sasl_plain_password) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice",
                                            PASSWORD)


def test_demo_consumers_get_the_settings_in_their_environment_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    opts = demo.options_from(build_parser().parse_args(["demo", "--bootstrap", "h:9093",
                                                        *SASL]))
    assert opts.security.sasl_plain_password == PASSWORD
    seen: dict[str, Any] = {}

    async def fake_exec(*argv: str, **kwargs: Any) -> Any:
        seen.update(argv=argv, env=kwargs["env"])
        return object()

    monkeypatch.setattr(demo.asyncio, "create_subprocess_exec", fake_exec)
    target = demo._Target("h", 9093, "t", "g", None)
    asyncio.run(demo._spawn("consumer-1", target, opts))
    assert PASSWORD not in " ".join(seen["argv"])
    assert security_from_env(seen["env"]).sasl_plain_password == PASSWORD


def test_the_report_job_gets_the_settings_in_its_environment() -> None:
    args = build_parser().parse_args(["report", "--out", "/tmp/r", *SASL])
    assert args.sasl_username == "alice"
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
             "sasl.password": PASSWORD}
    env = report_cli.job_env(props)
    assert json.loads(env[CLIENT_PROPERTIES_ENV]) == props
    assert PASSWORD not in " ".join(report_cli.job_command("h:1", Path("/tmp/r")))
    assert report_cli.job_env()[CLIENT_PROPERTIES_ENV] == ""


def test_groupwire_report_checks_the_broker_and_runs_the_job_with_the_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    async def health(host: str, port: int, timeout: float, *, security: Any = None) -> Any:
        seen["health"] = security
        return {"ok": True}

    def job(cmd: list[str], out: Path, on_step: Any, security: Any = None) -> Any:
        seen.update(cmd=cmd, props=security)
        return 0, {"rebalances": 0, "rebalances_running": 0, "member_ids": 0,
                   "partitions": 0, "unowned_ms": 0, "html": str(out / "report.html")}

    monkeypatch.setattr(report_cli, "spark_missing", lambda: None)
    monkeypatch.setattr(report_cli, "check_health", health)
    monkeypatch.setattr(report_cli, "run_job", job)
    args = build_parser().parse_args(["report", "--bootstrap", "h:9093",
                                      "--out", str(tmp_path), *SASL])
    assert args.func(args) == 0
    assert seen["health"].sasl_plain_password == PASSWORD
    assert seen["props"]["sasl.password"] == PASSWORD and PASSWORD not in seen["cmd"]


@pytest.mark.parametrize(("code", "says"), [
    ("TOPIC_AUTHORIZATION_FAILED", "grant its user READ and DESCRIBE on the topic"),
    ("SASL_AUTHENTICATION_FAILED", "check --sasl-username, --sasl-mechanism and the password"),
])
def test_a_members_security_failure_is_explained_with_the_fix(code: str, says: str) -> None:
    from groupwire.cli.chaos.fatal import explain

    line = explain(code, "refused", member="member-01", session_timeout_ms=3000,
                   bootstrap="h:9093", group="g", consumers=2)
    assert code in line and says in line
