"""Listener parsing, the advertised addresses and the security settings' validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.broker.config import SettingsError, parse_settings
from groupwire.broker.security.listeners import (
    Listener,
    ListenerError,
    advertised_addresses,
    parse_listeners,
)
from groupwire.broker.security.tls import principal_of


def test_kafka_form_with_every_protocol_empty_and_ipv6_hosts() -> None:
    found = parse_listeners(
        "SASL_SSL://0.0.0.0:9093, PLAINTEXT://127.0.0.1:9092,SSL://:0,"
        "sasl_plaintext://[::1]:9094", "--listeners")
    assert found == [
        Listener("SASL_SSL", "SASL_SSL", "0.0.0.0", 9093),
        Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        Listener("SSL", "SSL", "", 0),
        Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "::1", 9094),
    ]
    assert [(x.uses_tls, x.uses_sasl) for x in found] == [
        (True, True), (False, False), (True, False), (False, True)]
    assert str(found[3]) == "SASL_PLAINTEXT://[::1]:9094"


@pytest.mark.parametrize(("text", "says"), [
    ("", "expected NAME://HOST:PORT"),
    ("127.0.0.1:9092", "expected NAME://HOST:PORT"),
    ("HTTP://127.0.0.1:9092", "must be one of PLAINTEXT, SSL"),
    ("PLAINTEXT://127.0.0.1", "has no port"),
    ("PLAINTEXT://127.0.0.1:x", "port must be a number"),
    ("PLAINTEXT://127.0.0.1:70000", "port must be 0-65535"),
    ("PLAINTEXT://::1:9092", "IPv6 host in brackets"),
    ("PLAINTEXT://[::1]9092", r"\[IPV6\]:PORT"),
    ("PLAINTEXT://a:1,PLAINTEXT://b:2", "PLAINTEXT given more than once"),
])
def test_a_bad_listener_list_names_the_flag(text: str, says: str) -> None:
    with pytest.raises(ListenerError, match=says) as caught:
        parse_listeners(text, "--listeners")
    assert str(caught.value).startswith("--listeners: ")


def test_advertised_addresses() -> None:
    listeners = parse_listeners(
        "PLAINTEXT://0.0.0.0:0,SSL://10.0.0.5:9093,SASL_SSL://:9094", "--listeners")
    bound = {"PLAINTEXT": 40001, "SSL": 9093, "SASL_SSL": 9094}
    assert advertised_addresses(listeners, [], "", bound) == {
        "PLAINTEXT": ("127.0.0.1", 40001), "SSL": ("10.0.0.5", 9093),
        "SASL_SSL": ("127.0.0.1", 9094)}
    # --advertised-host stands for every listener, as it did for the one before
    assert set(advertised_addresses(listeners, [], "b.example", bound).values()) == {
        ("b.example", 40001), ("b.example", 9093), ("b.example", 9094)}
    given = parse_listeners("SASL_SSL://public.example:19094,PLAINTEXT://inside:0",
                            "--advertised-listeners")
    assert advertised_addresses(listeners, given, "", bound) == {
        "PLAINTEXT": ("inside", 40001), "SSL": ("10.0.0.5", 9093),
        "SASL_SSL": ("public.example", 19094)}


def test_the_default_is_todays_single_plaintext_listener() -> None:
    settings = parse_settings(["--host", "0.0.0.0", "--port", "9999"], environ={})
    assert settings.listener_list() == [Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9999)]
    assert settings.sasl_mechanisms() == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert settings.ssl_client_auth == "none"


def test_listeners_come_from_the_environment_too() -> None:
    settings = parse_settings([], environ={"GROUPWIRE_LISTENERS": "SASL_PLAINTEXT://:9093"})
    assert settings.listener_list()[0].uses_sasl


@pytest.fixture
def pem(tmp_path: Path) -> str:
    path = tmp_path / "x.pem"
    path.write_text("-----\n")
    return str(path)


@pytest.mark.parametrize(("argv", "says"), [
    (["--listeners", "SSL://:0"], "--ssl-certfile and --ssl-keyfile: an SSL or SASL_SSL"),
    (["--listeners", "SASL_SSL://:0", "--ssl-certfile", "{pem}"], "--ssl-keyfile"),
    (["--listeners", "SSL://:0", "--ssl-certfile", "{pem}", "--ssl-keyfile", "/none"],
     "--ssl-keyfile: no such file"),
    (["--ssl-client-auth", "required"], "--ssl-cafile: needed"),
    (["--ssl-client-auth", "sometimes"], "--ssl-client-auth: expected one of"),
    (["--sasl-enabled-mechanisms", "PLAIN,GSSAPI"], "--sasl-enabled-mechanisms: expected"),
    (["--listeners", "SASL_PLAINTEXT://:0", "--sasl-enabled-mechanisms", " "],
     "--sasl-enabled-mechanisms: a SASL listener needs"),
    (["--listeners", "PLAINTEXT://:0", "--advertised-listeners", "SSL://x:1"],
     "--advertised-listeners: SSL is not among --listeners"),
    (["--listeners", "TCP://:0"], "--listeners: listener name"),
    (["--authentication-timeout-ms", "0"], "--authentication-timeout-ms: must be >= 1"),
    (["--ssl-handshake-timeout-ms", "0"], "--ssl-handshake-timeout-ms: must be >= 1"),
    (["--authorizer", "simple"], "--authorizer: expected one of"),
    (["--super-users", "User:admin;bob"], "--super-users: expected User:NAME"),
])
def test_security_settings_are_checked(pem: str, argv: list[str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        parse_settings([a.format(pem=pem) for a in argv], environ={})


def test_accepted_security_settings(pem: str) -> None:
    settings = parse_settings([
        "--listeners", "SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092",
        "--advertised-listeners", "SASL_SSL://broker.example:9093",
        "--ssl-certfile", pem, "--ssl-keyfile", pem, "--ssl-cafile", pem,
        "--ssl-client-auth", "requested", "--sasl-enabled-mechanisms", "plain,SCRAM-SHA-512",
        "--authorizer", "acl", "--super-users", "User:admin; User:ops"], environ={})
    assert settings.sasl_mechanisms() == ["PLAIN", "SCRAM-SHA-512"]
    assert settings.super_user_list() == ["User:admin", "User:ops"]
    assert [x.name for x in settings.advertised_listener_list()] == ["SASL_SSL"]


def test_principal_of_a_certificate_is_its_subject_cn() -> None:
    cert = {"subject": ((("organizationName", "acme"),), (("commonName", "alice"),))}
    assert principal_of(cert) == "User:alice"
    assert principal_of({"subject": ((("organizationName", "acme"),),)}) is None
    assert principal_of({}) is None
    assert principal_of(None) is None
