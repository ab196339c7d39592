"""The client's security settings as the command line reads them: flags over a Kafka
``--command-config`` properties file over GROUPWIRE_* variables, the password never a
flag, and every bad value one line."""

from __future__ import annotations

import argparse
import io
import ssl
from pathlib import Path

import pytest
import trustme

from groupwire.cli.arguments import security_from_args
from groupwire.cli.errors import CliError
from groupwire.cli.main import build_parser
from groupwire.client.security import SecurityConfig, read_properties

BROKER_COMMANDS = [
    ["topics", "create", "t"], ["topics", "list"], ["topics", "describe"],
    ["topics", "delete", "t"], ["groups", "list"], ["groups", "describe", "g"],
    ["groups", "lag", "g"], ["groups", "reset-offsets", "g", "--to-earliest"],
    ["groups", "delete", "g"], ["cluster", "brokers"], ["cluster", "partitions"],
    ["cluster", "elect-leaders"], ["produce", "--topic", "t"], ["consume", "--topic", "t"],
    ["acls", "list"], ["acls", "remove", "--resource-type", "any"],
    ["acls", "add", "--allow", "--principal", "User:a", "--operation", "read", "--cluster"],
    ["users", "add", "alice", "--bootstrap", "h:1"], ["users", "list"],
    ["users", "remove", "alice"], ["health"],
]


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["topics", "list", *argv])


def _no_prompt(text: str) -> str:
    raise AssertionError(f"asked {text!r}")


@pytest.mark.parametrize("command", BROKER_COMMANDS, ids=" ".join)
def test_every_command_that_talks_to_a_broker_takes_the_security_flags(
        command: list[str]) -> None:
    args = build_parser().parse_args([
        *command, "--security-protocol", "sasl_ssl", "--sasl-mechanism", "scram-sha-512",
        "--sasl-username", "admin", "--ssl-cafile", "ca.pem", "--ssl-certfile", "c.pem",
        "--ssl-keyfile", "k.pem", "--command-config", "client.properties"])
    assert (args.security_protocol, args.sasl_mechanism, args.sasl_username,
            args.ssl_cafile, args.command_config) == (
        "SASL_SSL", "SCRAM-SHA-512", "admin", "ca.pem", "client.properties")


@pytest.mark.parametrize("argv", [
    ["--sasl-password", "hunter2"],  # never a flag: it would land in the shell's history
    ["--security-protocol", "TLS"],
    ["--sasl-mechanism", "GSSAPI"],
])
def test_no_password_flag_and_bad_names_are_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _args(*argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_default_is_plaintext_without_asking() -> None:
    config = security_from_args(_args(), environ={}, prompt=_no_prompt)
    assert config == SecurityConfig()


def test_environment_alone() -> None:
    env = {"GROUPWIRE_SECURITY_PROTOCOL": "sasl_plaintext",
           "GROUPWIRE_SASL_MECHANISM": "SCRAM-SHA-256", "GROUPWIRE_SASL_USERNAME": "env-user",
           "GROUPWIRE_SASL_PASSWORD": "env-pass"}
    config = security_from_args(_args(), environ=env, prompt=_no_prompt)
    assert (config.security_protocol, config.sasl_mechanism, config.sasl_plain_username,
            config.sasl_plain_password) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "env-user",
                                            "env-pass")


def test_flags_win_over_the_file_which_wins_over_the_environment(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# Kafka's tools' file\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism = SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
        'required \\\n    username="file-user" password="file-pass";\n')
    env = {"GROUPWIRE_SECURITY_PROTOCOL": "PLAINTEXT", "GROUPWIRE_SASL_MECHANISM": "PLAIN",
           "GROUPWIRE_SASL_USERNAME": "env-user", "GROUPWIRE_SASL_PASSWORD": "env-pass"}
    config = security_from_args(_args("--command-config", str(props)), environ=env,
                                prompt=_no_prompt)
    assert (config.security_protocol, config.sasl_mechanism, config.sasl_plain_username,
            config.sasl_plain_password) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "file-user",
                                            "file-pass")
    config = security_from_args(
        _args("--command-config", str(props), "--sasl-mechanism", "plain"), environ=env,
        prompt=_no_prompt)
    assert (config.sasl_mechanism, config.sasl_plain_username) == ("PLAIN", "file-user")


def test_a_password_is_never_used_for_another_user(tmp_path: Path) -> None:
    """The file's password is file-user's: with --sasl-username other, it is asked for."""
    props = tmp_path / "p"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.username=file-user\n"
                     "sasl.password=file-pass\n")
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return "typed"

    config = security_from_args(_args("--command-config", str(props), "--sasl-username",
                                      "other"), environ={}, prompt=prompt)
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("other", "typed")
    assert asked == ["SASL password for other: "]
    # the environment's password with the file's user name (a secret mounted as a variable)
    config = security_from_args(
        _args("--security-protocol", "SASL_PLAINTEXT", "--sasl-username", "u"),
        environ={"GROUPWIRE_SASL_PASSWORD": "from-env"}, prompt=_no_prompt)
    assert config.sasl_plain_password == "from-env"


def test_missing_password_off_a_terminal_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("secret\n"))
    args = _args("--security-protocol", "SASL_SSL", "--sasl-username", "admin")
    with pytest.raises(CliError, match="no SASL password for 'admin': set "
                                       "GROUPWIRE_SASL_PASSWORD"):
        security_from_args(args, environ={})
    with pytest.raises(CliError, match="SASL_PLAINTEXT needs a user name: --sasl-username"):
        security_from_args(_args("--security-protocol", "SASL_PLAINTEXT"), environ={})


def test_tls_files_need_a_tls_protocol_and_must_exist(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="--ssl-cafile: only used with --security-protocol SSL"):
        security_from_args(_args("--ssl-cafile", "ca.pem"), environ={})
    with pytest.raises(CliError, match=r"^TLS files: .*missing\.pem"):
        security_from_args(_args("--security-protocol", "SSL", "--ssl-cafile",
                                 str(tmp_path / "missing.pem")), environ={})
    with pytest.raises(CliError, match="--command-config: cannot read"):
        security_from_args(_args("--command-config", str(tmp_path / "nope")), environ={})


def test_tls_from_flags_and_from_the_file(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("client.example")
    ca_file, cert_file = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    config = security_from_args(_args("--security-protocol", "ssl", "--ssl-cafile",
                                      str(ca_file), "--ssl-certfile", str(cert_file)),
                                environ={}, prompt=_no_prompt)
    assert config.security_protocol == "SSL" and isinstance(config.ssl_context, ssl.SSLContext)
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert len(config.ssl_context.get_ca_certs()) == 1
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SSL\nssl.truststore.location={ca_file}\n"
                     "ssl.endpoint.identification.algorithm=\n")
    config = security_from_args(_args("--command-config", str(props)), environ={})
    assert config.ssl_context is not None and not config.ssl_context.check_hostname
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(CliError, match=r"^TLS files: "):
        security_from_args(_args("--security-protocol", "SSL", "--ssl-cafile", str(bad)),
                           environ={})


def test_properties_files_as_java_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text("# comment\n! also a comment\n\nsecurity.protocol = SASL_SSL\n"
                    "sasl.mechanism: SCRAM-SHA-256\nsasl.jaas.config=a \\\n  b \\\n  c\n"
                    "flag\n")
    assert read_properties(path) == {"security.protocol": "SASL_SSL",
                                     "sasl.mechanism": "SCRAM-SHA-256",
                                     "sasl.jaas.config": "a b c", "flag": ""}


def test_properties_into_a_security_config() -> None:
    config = SecurityConfig.from_properties({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "scram-sha-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                            'required username="alice" password="pa ss";'})
    assert (config.security_protocol, config.sasl_mechanism, config.sasl_plain_username,
            config.sasl_plain_password, config.uses_sasl, config.uses_tls) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "pa ss", True, False)
    with pytest.raises(ValueError, match="needs sasl_plain_username"):
        SecurityConfig.from_properties({"security.protocol": "SASL_SSL"})
    with pytest.raises(ValueError, match="security_protocol must be one of"):
        SecurityConfig.from_properties({"security.protocol": "TLS"})
