"""The SDK as an aiokafka user types it (issue 25): ``bootstrap_servers=``, topics given
to the Consumer's constructor, the deserializers, one bootstrap default for all three
clients; and SASL defaults that a default-configured broker accepts, with a mismatch
error that names both sides."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from groupwire import Admin, Consumer, Producer, SecurityConfig
from groupwire.client.cluster import Cluster
from groupwire.client.security import DEFAULT_SASL_MECHANISM
from groupwire.errors import UnsupportedSaslMechanismError
from groupwire.protocol.messages import MetadataRequest, MetadataResponse, Request, Response
from tests.unit.client.sasl_fake import SaslFake

USERS = {"alice": "alice-secret"}
BROKER_DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
"""broker/config.py's sasl_enabled_mechanisms default."""


def _bootstrap(client: Consumer | Producer | Admin) -> list[tuple[str, int]]:
    if isinstance(client, Consumer):
        return client._bootstrap
    return client._cluster.bootstrap


# --- bootstrap and topics ---------------------------------------------------------------


def test_consumer_takes_topics_and_bootstrap_servers_as_aiokafka_does() -> None:
    c = Consumer("orders", "refunds", bootstrap_servers="k1:9093,k2:9094", group_id="g")
    assert c.subscription() == {"orders", "refunds"}
    assert _bootstrap(c) == [("k1", 9093), ("k2", 9094)]
    listed = Consumer("orders", bootstrap_servers=["k1:1", "k2:2"], group_id="g")
    assert _bootstrap(listed) == [("k1", 1), ("k2", 2)]


def test_a_first_positional_host_port_is_still_the_bootstrap() -> None:
    c = Consumer("127.0.0.1:9999", group_id="g")
    assert _bootstrap(c) == [("127.0.0.1", 9999)] and c.subscription() == frozenset()
    both = Consumer("h:1,h:2", "orders", group_id="g")
    assert _bootstrap(both) == [("h", 1), ("h", 2)] and both.subscription() == {"orders"}
    listed = Consumer(["h:1", "[::1]:2"], "orders", group_id="g")
    assert _bootstrap(listed) == [("h", 1), ("::1", 2)]
    assert _bootstrap(Consumer(bootstrap="h:3")) == [("h", 3)]


def test_every_client_defaults_to_the_same_bootstrap_and_a_bare_host_means_9092() -> None:
    for client in (Consumer(), Producer(), Admin()):
        assert _bootstrap(client) == [("127.0.0.1", 9092)]
    for client in (Consumer(bootstrap_servers="localhost"),
                   Producer(bootstrap_servers="localhost"),
                   Admin(bootstrap_servers=["localhost"])):
        assert _bootstrap(client) == [("localhost", 9092)]
    assert _bootstrap(Producer(bootstrap_servers="[::1]")) == [("::1", 9092)]


@pytest.mark.parametrize("make", [
    lambda: Consumer(bootstrap="a:1", bootstrap_servers="b:2"),
    lambda: Consumer("a:1", bootstrap_servers="b:2"),
    lambda: Producer("a:1", bootstrap_servers="b:2"),
    lambda: Admin(bootstrap="a:1", bootstrap_servers=["b:2"]),
])
def test_the_bootstrap_given_twice_is_a_type_error_naming_both(make: object) -> None:
    with pytest.raises(TypeError, match=r"'a:1'.*bootstrap_servers=.*'b:2'"):
        make()  # type: ignore[operator]


def test_a_positional_bootstrap_and_bootstrap_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"twice.*'a:1'.*bootstrap='b:2'"):
        Consumer("a:1", bootstrap="b:2")


def test_bad_positional_arguments_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"neither a topic name .* nor a bootstrap HOST:PORT"):
        Consumer("orders and more", group_id="g")
    with pytest.raises(ValueError, match=r"'k:9092' is not a topic name.*comes first"):
        Consumer("orders", "k:9092", group_id="g")
    with pytest.raises(ValueError, match="HOST:PORT"):
        Consumer("k:port", group_id="g")
    with pytest.raises(TypeError, match="topics are strings"):
        Consumer("k:1", ["orders"], group_id="g")  # type: ignore[arg-type]


def test_topics_without_a_group_say_how_to_read_without_one() -> None:
    with pytest.raises(ValueError, match=r"needs a group_id.*assign"):
        Consumer("orders", bootstrap_servers="k:1")


def test_the_consumer_takes_aiokafkas_deserializer_names() -> None:
    params = inspect.signature(Consumer).parameters
    assert {"key_deserializer", "value_deserializer", "bootstrap_servers",
            "missing_topics"} <= params.keys()
    assert next(iter(params.values())).kind is inspect.Parameter.VAR_POSITIONAL
    Consumer(group_id="g", key_deserializer=bytes.decode, value_deserializer=bytes.decode)
    with pytest.raises(ValueError, match="missing_topics"):
        Consumer(group_id="g", missing_topics="ignore")  # type: ignore[arg-type]


# --- SASL defaults --------------------------------------------------------------------------


def test_the_default_mechanism_is_one_a_default_broker_enables() -> None:
    assert DEFAULT_SASL_MECHANISM in BROKER_DEFAULT_MECHANISMS
    assert SecurityConfig().sasl_mechanism == DEFAULT_SASL_MECHANISM
    assert SecurityConfig.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a",
         "sasl.password": "b"}).sasl_mechanism == DEFAULT_SASL_MECHANISM
    for client in (Consumer, Producer, Admin):
        default = inspect.signature(client).parameters["sasl_mechanism"].default
        assert default == DEFAULT_SASL_MECHANISM, client


def _answer(request: Request) -> Response:
    assert isinstance(request, MetadataRequest), request
    return MetadataResponse(cluster_id="fake", controller_id=-1)


@pytest.fixture
async def default_broker() -> AsyncIterator[SaslFake]:
    """A SASL listener enabling what the broker enables by default."""
    async with SaslFake(USERS, mechanisms=BROKER_DEFAULT_MECHANISMS, handler=_answer) as f:
        yield f


async def test_clients_left_at_their_defaults_log_in_to_a_default_broker(
        default_broker: SaslFake) -> None:
    async with Admin(default_broker.address, security_protocol="SASL_PLAINTEXT",
                     sasl_plain_username="alice", sasl_plain_password="alice-secret"):
        pass
    assert default_broker.authenticated == ["alice"]


async def test_a_mechanism_mismatch_names_both_sides(default_broker: SaslFake) -> None:
    cluster = Cluster(default_broker.address, request_timeout_ms=5000, retry_backoff_ms=10,
                      security=SecurityConfig(
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="alice", sasl_plain_password="alice-secret"))
    try:
        with pytest.raises(UnsupportedSaslMechanismError) as info:
            await cluster.connection()
    finally:
        await cluster.close()
    text = str(info.value)
    assert "enables SCRAM-SHA-256, SCRAM-SHA-512; this client's sasl_mechanism is PLAIN" in text
    assert "SCRAM-SHA-256 or SCRAM-SHA-512" in text  # what to set it to
