"""The inter-broker settings: which listener brokers reach each other on (Kafka's
inter.broker.listener.name), and the SASL user they authenticate as, whose password
comes from a file or the environment, never a flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.broker.config import (
    OPTIONS,
    BrokerSettings,
    SettingsError,
    parse_settings,
    validate,
)
from groupwire.broker.replication.peer_auth import PeerSecurity

CLUSTER = ["--etcd-endpoints", "http://127.0.0.1:2379",
           "--listeners", "SASL_PLAINTEXT://:9093,PLAINTEXT://127.0.0.1:9092"]


def test_the_inter_broker_listener_defaults_to_the_first() -> None:
    settings = BrokerSettings(listeners="SSL://:1,PLAINTEXT://:2", ssl_certfile="c",
                              ssl_keyfile="k")
    assert settings.inter_broker_listener().name == "SSL"
    named = BrokerSettings(listeners="SASL_SSL://:1,PLAINTEXT://:2",
                           inter_broker_listener_name="plaintext")
    assert named.inter_broker_listener().name == "PLAINTEXT"
    assert BrokerSettings().inter_broker_listener().name == "PLAINTEXT"


def test_an_unknown_inter_broker_listener_is_refused() -> None:
    with pytest.raises(SettingsError, match="--inter-broker-listener-name: SSL is not among"):
        parse_settings(["--inter-broker-listener-name", "SSL"], {})


def test_a_sasl_inter_broker_listener_needs_a_user_and_password() -> None:
    with pytest.raises(SettingsError, match="--inter-broker-sasl-username and "
                                            "--inter-broker-sasl-password-file"):
        parse_settings([*CLUSTER, "--inter-broker-sasl-username", "broker"], {})
    # a single broker has no inter-broker connections
    parse_settings(CLUSTER[2:], {})
    # nor does a cluster reaching its brokers on PLAINTEXT
    parse_settings([*CLUSTER, "--inter-broker-listener-name", "PLAINTEXT"], {})


def test_the_password_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    env = {"GROUPWIRE_INTER_BROKER_SASL_PASSWORD": "from-env"}
    settings = parse_settings([*CLUSTER, "--inter-broker-sasl-username", "broker"], env)
    assert settings.inter_broker_sasl_password == "from-env"
    assert "from-env" not in repr(settings)
    secret = tmp_path / "password"
    secret.write_text("from-file\nignored\n")
    settings = parse_settings([*CLUSTER, "--inter-broker-sasl-username", "broker",
                               "--inter-broker-sasl-password-file", str(secret)], env)
    assert settings.inter_broker_sasl_password == "from-file"
    assert PeerSecurity.of(settings) == PeerSecurity(
        listener="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username="broker",
        password="from-file")
    with pytest.raises(SettingsError, match="--inter-broker-sasl-password-file: cannot read"):
        parse_settings(["--inter-broker-sasl-password-file", str(tmp_path / "none")], {})


def test_the_password_is_never_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert "inter_broker_sasl_password" not in {opt.name for opt in OPTIONS}
    # refused as a usage error, the value never echoed (nor taken as a file's path)
    with pytest.raises(SystemExit):
        parse_settings([*CLUSTER, "--inter-broker-sasl-password", "s3cret-value"], {})
    err = capsys.readouterr().err
    assert "a password is never a flag" in err and "s3cret-value" not in err


def test_the_mechanism_must_be_enabled() -> None:
    with pytest.raises(SettingsError, match="--inter-broker-sasl-mechanism: PLAIN is not in"):
        validate(BrokerSettings(listeners="SASL_PLAINTEXT://:1", etcd_endpoints="http://e:1",
                                inter_broker_sasl_mechanism="PLAIN",
                                inter_broker_sasl_username="b", inter_broker_sasl_password="p"))
