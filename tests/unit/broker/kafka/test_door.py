"""What the Kafka door advertises, and how its APIs are named in metrics."""

from __future__ import annotations

from groupwire.broker.kafka.apis import TRANSLATORS
from groupwire.broker.kafka.door import DOOR_APIS, KafkaDoor, kafka_named
from groupwire.broker.metrics import _api_name
from groupwire.broker.security.listeners import Listener
from groupwire.protocol.kafka.codec import API_NAMES, SERVED


def test_api_versions_advertises_exactly_the_translated_apis_at_the_codecs_versions() -> None:
    door = KafkaDoor(TRANSLATORS)
    assert set(door.advertised) == (set(TRANSLATORS) | DOOR_APIS) & set(SERVED)
    assert all(door.advertised[key] == SERVED[key] for key in door.advertised)
    assert list(door.advertised) == sorted(door.advertised)
    # an API the codec serves but no translator carries is not advertised
    partial = KafkaDoor({key: t for key, t in TRANSLATORS.items() if key != 32})
    assert 32 not in partial.advertised and 32 in door.advertised


def test_kafka_only_apis_are_named_in_metrics() -> None:
    assert _api_name(32) == "DescribeConfigs" == API_NAMES[32]
    assert _api_name(11) == "JoinGroup"
    assert _api_name(9999) == "Unknown"


def test_a_kafka_listener_never_shares_a_client_listeners_name() -> None:
    plain = Listener("PLAINTEXT", "PLAINTEXT", "", 9093)
    named = kafka_named(plain)
    assert named.name == "KAFKA_PLAINTEXT" and named.security_protocol == "PLAINTEXT"
    assert (named.host, named.port) == ("", 9093)
