"""The Kafka door as connections see it: its translators, what it advertises, its view of
the cluster.

What ApiVersions advertises is exactly what is served end to end: an API appears only
with a translator, and only over the versions the codec serves (``protocol.kafka.codec``).
Addresses are per listener name, as Kafka's are: a client that connected to a broker's
``SASL_SSL`` listener is told every broker's ``SASL_SSL`` listener. A ``--kafka-listeners``
entry is named ``KAFKA_`` + its security protocol, so it never shares a name with a client
listener, and the broker resolves, advertises and (in a cluster) registers its address as
it does any listener's: the msgpack door's Metadata and FindCoordinator answers already
carry the Kafka address a Kafka client must be told.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from groupwire.broker.kafka.translate import Body, KafkaAddress, KafkaContext, Translator
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.codec import SERVED, RequestHeader

if TYPE_CHECKING:
    from groupwire.broker.host import Peer
    from groupwire.broker.kafka.apis.configs import ConfigView
    from groupwire.broker.security.access import AccessControl
    from groupwire.broker.security.listeners import Listener

API_VERSIONS: Final = 18
DOOR_APIS: Final = frozenset({API_VERSIONS})
"""Answered by the connection itself, not through a translator."""


class KafkaDoor:
    """Shared by every connection of the broker's Kafka listeners."""

    def __init__(self, translators: Mapping[int, Translator]) -> None:
        self.translators = translators
        self.configs: ConfigView | None = None
        """Set at start: what DescribeConfigs answers (``broker.kafka.apis.configs``)."""
        self.addresses: Callable[[str], Mapping[int, KafkaAddress]] | None = None
        """Set at start on a single broker: its own address on each listener, by name
        (a translator that must know the brokers, such as a CreateTopics naming replicas,
        asks; in a cluster the broker's own answers name them)."""
        self.heartbeat_hold_ms = 0
        """Set at start: ``--kafka-heartbeat-hold-ms``."""
        self.access: AccessControl | None = None
        """Set at start with ``--authorizer acl``: what the door answers itself is
        checked with it."""
        self.advertised: dict[int, tuple[int, int]] = {
            key: versions for key, versions in sorted(SERVED.items())
            if key in translators or key in DOOR_APIS}
        """api key -> (min, max) version, as ApiVersions tells clients."""

    def context(self, conn: Peer, header: RequestHeader) -> KafkaContext:
        return KafkaContext(
            api_version=header.api_version, client_id=header.client_id or "",
            principal=conn.principal,
            addresses={} if self.addresses is None else self.addresses(conn.listener.name),
            allowed=None if self.access is None else self.access.allowed_for(conn),
            configs=self.configs, heartbeat_hold_ms=self.heartbeat_hold_ms)

    def api_versions(self, version: int) -> Body:
        """The ApiVersions answer at a served version (an unserved one gets the codec's
        v0-shaped fallback, KIP-511)."""
        return {"error_code": int(ErrorCode.NONE), "throttle_time_ms": 0, "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in self.advertised.items()]}


KAFKA_LISTENER_PREFIX: Final = "KAFKA_"


def kafka_named(listener: Listener) -> Listener:
    """A ``--kafka-listeners`` entry under its own name (see the module docstring)."""
    return dataclasses.replace(listener, name=KAFKA_LISTENER_PREFIX + listener.name)
