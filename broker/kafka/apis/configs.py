"""DescribeConfigs and AlterConfigs through the Kafka door, and the configs they describe.

groupwire has no config API and no per-topic configs: every topic follows the broker's
flags (``--log-retention-ms``, ``--segment-bytes`` ...), fixed while it runs. Kafka's
admin tools and UIs still ask for configs, so the door answers with Kafka's names for
what groupwire really does, every one read-only: a topic's ``retention.ms`` is the
broker's ``--log-retention-ms``, its ``cleanup.policy`` ``delete`` (``compact`` for
``__consumer_offsets``), its ``compression.type`` ``producer`` (batches are stored as
sent). A value comes from ``STATIC_BROKER_CONFIG`` when its flag was set to something
other than groupwire's default, else from ``DEFAULT_CONFIG``, as a Kafka broker reports
a topic without overrides.

No request is dispatched: the configs come from the broker's settings
(:class:`BrokerConfigs`, handed to translators as ``KafkaContext.configs``) and the
authorizer's question (``KafkaContext.allowed``) checks DESCRIBE_CONFIGS and
ALTER_CONFIGS as a Kafka broker does. AlterConfigs changes nothing: a resource whose
configs would stay what they are (the same values, or none: Kafka's "drop every
override") succeeds; any real change is refused with POLICY_VIOLATION naming the flag
that sets it, an unknown config with INVALID_CONFIG (Kafka's answer to a config name it
does not know).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Protocol

from groupwire.broker.config import BrokerSettings
from groupwire.broker.kafka.translate import (
    Answer,
    Body,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.broker.storage import OFFSETS_TOPIC
from groupwire.broker.topic_apis import BATCH_OVERHEAD
from groupwire.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import Response

DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33

INVALID_CONFIG: Final = 40
"""Kafka's INVALID_CONFIG: only the Kafka door sends it, so ``ErrorCode`` lacks it."""

LONG_MAX: Final = 2**63 - 1
"""Kafka's "never" for ``flush.ms`` and ``flush.messages``."""


class ConfigResource(enum.IntEnum):
    """Kafka's config resource types (``ConfigResource.Type``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Where a config's value comes from (``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """A config's value type (``DescribeConfigsResponse.ConfigType``, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs answers it."""

    name: str
    value: str | None
    type: ConfigType
    source: ConfigSource
    documentation: str
    """What groupwire does, and the flag that decides it (DescribeConfigs v3)."""
    read_only: bool = True
    """Nothing in groupwire changes at run time."""


class ConfigView(Protocol):
    """The configs translators describe (``KafkaContext.configs``)."""

    def describe(self, resource: int, name: str) -> Sequence[ConfigEntry] | None:
        """The configs of a topic (``resource`` 2) or a broker (4, by node id; ``""``:
        the cluster-wide dynamic defaults); None: no such topic, or not this broker."""
        ...

    def new_topic(self) -> Sequence[ConfigEntry]:
        """What a topic created now has (CreateTopics' ``configs`` must agree with it)."""
        ...


# --- the configs, from the broker's settings --------------------------------------------

_DEFAULTS: Final[dict[str, Any]] = {f.name: f.default for f in fields(BrokerSettings)}
_BROKER_ID: Final = re.compile(r"[0-9]{1,10}")


class BrokerConfigs:
    """:class:`ConfigView` of a broker: its settings, and which topics exist.

    ``topic_exists`` is asked per topic resource (a single broker's store, a cluster
    member's metadata image); everything else is the settings, which never change
    while the broker runs, so the lists are built once."""

    def __init__(self, settings: BrokerSettings, topic_exists: Callable[[str], bool], *,
                 listeners: Sequence[str] = (), advertised: Sequence[str] = ()) -> None:
        """``listeners`` / ``advertised``: every listener as ``NAME://HOST:PORT``, bound
        and as Metadata names it (Kafka's ``listeners`` and ``advertised.listeners``)."""
        self._topic_exists = topic_exists
        self.node_id = settings.node_id if settings.clustered else 0
        """A single broker is node 0 whatever ``--node-id`` says (docs/protocol.md §4)."""
        self._topic = _topic_configs(settings, offsets=False)
        self._offsets = _topic_configs(settings, offsets=True)
        self._broker = sorted([
            *_broker_configs(settings, self.node_id),
            _from(settings, "listeners", ",".join(listeners), ConfigType.LIST,
                  "where the broker listens, its Kafka-only listeners as KAFKA_<PROTOCOL>",
                  "listeners", "kafka_listeners"),
            _from(settings, "advertised.listeners", ",".join(advertised), ConfigType.LIST,
                  "each listener's address as Metadata names it", "advertised_listeners",
                  "kafka_advertised_listeners")], key=lambda e: e.name)

    def describe(self, resource: int, name: str) -> Sequence[ConfigEntry] | None:
        if resource == ConfigResource.TOPIC:
            if not self._topic_exists(name):
                return None
            return self._offsets if name == OFFSETS_TOPIC else self._topic
        if resource == ConfigResource.BROKER:
            if name == "":
                return []  # no dynamic cluster-wide defaults: nothing is dynamic
            return self._broker if _BROKER_ID.fullmatch(name) and int(name) == self.node_id \
                else None
        return None

    def new_topic(self) -> Sequence[ConfigEntry]:
        return self._topic


def _source(settings: BrokerSettings, *flags: str) -> ConfigSource:
    changed = any(getattr(settings, flag) != _DEFAULTS[flag] for flag in flags)
    return ConfigSource.STATIC_BROKER_CONFIG if changed else ConfigSource.DEFAULT_CONFIG


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flush(settings: BrokerSettings) -> tuple[str, str]:
    """``flush.messages`` and ``flush.ms`` for ``--fsync``: every batch, every interval,
    or left to the OS (Kafka's defaults, Long.MAX_VALUE both)."""
    if settings.fsync == "always":
        return "1", "0"
    if settings.fsync == "interval":
        return str(LONG_MAX), str(settings.flush_interval_ms)
    return str(LONG_MAX), str(LONG_MAX)


def _fixed(name: str, value: str | None, kind: ConfigType, doc: str) -> ConfigEntry:
    return ConfigEntry(name, value, kind, ConfigSource.DEFAULT_CONFIG, doc)


def _from(settings: BrokerSettings, name: str, value: str | None, kind: ConfigType,
          doc: str, *flags: str) -> ConfigEntry:
    said = ", ".join(_flag(f) for f in flags)
    return ConfigEntry(name, value, kind, _source(settings, *flags), f"{doc} ({said})")


def _topic_configs(settings: BrokerSettings, *, offsets: bool) -> list[ConfigEntry]:
    s = settings
    messages, ms = _flush(s)
    entries = [
        _fixed("compression.type", "producer", ConfigType.STRING,
               "batches are stored as their producer compressed them"),
        _from(s, "flush.messages", messages, ConfigType.LONG,
              "1: every batch is fsynced before it is acknowledged", "fsync"),
        _from(s, "flush.ms", ms, ConfigType.LONG, "how often written data is fsynced",
              "fsync", "flush_interval_ms"),
        _from(s, "max.message.bytes", str(s.max_frame_bytes - BATCH_OVERHEAD), ConfigType.INT,
              "the largest batch a Produce may carry", "max_frame_bytes"),
        _fixed("message.timestamp.type", "CreateTime", ConfigType.STRING,
               "record timestamps are the producer's, never rewritten"),
        _fixed("unclean.leader.election.enable", "false", ConfigType.BOOLEAN,
               "only an explicit ElectLeaders of type unclean elects a replica outside "
               "the ISR"),
        _from(s, "segment.bytes", str(s.segment_bytes), ConfigType.INT,
              "a log segment is rolled past this size", "segment_bytes"),
    ]
    if s.clustered:
        entries.append(_from(s, "min.insync.replicas", str(s.min_insync_replicas),
                             ConfigType.INT, "acks=all needs this many in-sync replicas",
                             "min_insync_replicas"))
    else:
        entries.append(_fixed("min.insync.replicas", "1", ConfigType.INT,
                              "a single broker is the whole ISR"))
    if offsets:
        entries += [
            _fixed("cleanup.policy", "compact", ConfigType.LIST,
                   "committed offsets are compacted, never deleted by age or size"),
            _fixed("retention.bytes", "-1", ConfigType.LONG, "compacted, never trimmed"),
            _fixed("retention.ms", "-1", ConfigType.LONG, "compacted, never trimmed"),
        ]
    else:
        entries += [
            _fixed("cleanup.policy", "delete", ConfigType.LIST,
                   "old segments are deleted by retention.ms and retention.bytes"),
            _from(s, "retention.bytes", str(s.log_retention_bytes), ConfigType.LONG,
                  "each partition's size cap, -1 none", "log_retention_bytes"),
            _from(s, "retention.ms", str(s.log_retention_ms), ConfigType.LONG,
                  "records older than this are deleted, -1 never", "log_retention_ms"),
        ]
    return sorted(entries, key=lambda e: e.name)


def _broker_configs(settings: BrokerSettings, node_id: int) -> list[ConfigEntry]:
    s = settings
    messages, ms = _flush(s)
    clustered = s.clustered

    def flag(name: str, value: object, kind: ConfigType, doc: str, *flags: str,
             ) -> ConfigEntry:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return _from(s, name, text, kind, doc, *flags)

    entries = [
        flag("auto.create.topics.enable", s.auto_create_topics, ConfigType.BOOLEAN,
             "Metadata creates the unknown topics it names", "auto_create_topics"),
        flag("broker.id", node_id, ConfigType.INT, "this broker's node id", "node_id"),
        _from(s, "broker.rack", s.rack or None, ConfigType.STRING, "this broker's rack",
              "rack"),
        _fixed("compression.type", "producer", ConfigType.STRING,
               "batches are stored as their producer compressed them"),
        flag("connections.max.idle.ms", s.connections_max_idle_ms, ConfigType.LONG,
             "idle connections are closed after this", "connections_max_idle_ms"),
        flag("group.initial.rebalance.delay.ms", s.group_initial_rebalance_delay_ms,
             ConfigType.INT, "an empty group's first rebalance waits this long",
             "group_initial_rebalance_delay_ms"),
        flag("group.max.session.timeout.ms", s.group_max_session_timeout_ms, ConfigType.INT,
             "the largest session timeout a member may ask for",
             "group_max_session_timeout_ms"),
        flag("group.max.size", s.group_max_size, ConfigType.INT,
             "the most members one group may have", "group_max_size"),
        flag("group.min.session.timeout.ms", s.group_min_session_timeout_ms, ConfigType.INT,
             "the smallest session timeout a member may ask for",
             "group_min_session_timeout_ms"),
        flag("log.dirs", s.data_dir, ConfigType.STRING, "the data directory", "data_dir"),
        flag("log.flush.interval.messages", messages, ConfigType.LONG,
             "1: every batch is fsynced before it is acknowledged", "fsync"),
        flag("log.flush.interval.ms", ms, ConfigType.LONG, "how often written data is fsynced",
             "fsync", "flush_interval_ms"),
        _fixed("log.message.timestamp.type", "CreateTime", ConfigType.STRING,
               "record timestamps are the producer's, never rewritten"),
        flag("log.retention.bytes", s.log_retention_bytes, ConfigType.LONG,
             "each partition's size cap, -1 none", "log_retention_bytes"),
        flag("log.retention.check.interval.ms", s.log_retention_check_interval_ms,
             ConfigType.LONG, "how often retention runs", "log_retention_check_interval_ms"),
        flag("log.retention.ms", s.log_retention_ms, ConfigType.LONG,
             "records older than this are deleted, -1 never", "log_retention_ms"),
        flag("log.segment.bytes", s.segment_bytes, ConfigType.INT,
             "a log segment is rolled past this size", "segment_bytes"),
        flag("max.connections", s.max_connections, ConfigType.INT,
             "connections beyond this are refused", "max_connections"),
        flag("message.max.bytes", s.max_frame_bytes - BATCH_OVERHEAD, ConfigType.INT,
             "the largest batch a Produce may carry", "max_frame_bytes"),
        flag("num.partitions", s.num_partitions, ConfigType.INT,
             "partitions of a topic created without a count", "num_partitions"),
        flag("offset.metadata.max.bytes", s.offset_metadata_max_bytes, ConfigType.INT,
             "the longest metadata string on a committed offset",
             "offset_metadata_max_bytes"),
        flag("offsets.retention.check.interval.ms", s.offsets_retention_check_interval_ms,
             ConfigType.LONG, "how often offset retention runs",
             "offsets_retention_check_interval_ms"),
        flag("offsets.retention.minutes", s.offsets_retention_minutes, ConfigType.INT,
             "committed offsets of a group empty this long are dropped",
             "offsets_retention_minutes"),
        flag("offsets.topic.num.partitions", s.offsets_topic_num_partitions, ConfigType.INT,
             "partitions of __consumer_offsets, fixed when the data dir was created",
             "offsets_topic_num_partitions"),
        flag("queued.max.request.bytes", s.queued_max_request_bytes, ConfigType.LONG,
             "bytes of requests held in memory across connections",
             "queued_max_request_bytes"),
        flag("sasl.enabled.mechanisms", ",".join(s.sasl_mechanisms()), ConfigType.LIST,
             "the SASL mechanisms SASL listeners offer", "sasl_enabled_mechanisms"),
        flag("socket.request.max.bytes", s.max_frame_bytes, ConfigType.INT,
             "the largest request frame", "max_frame_bytes"),
        _fixed("unclean.leader.election.enable", "false", ConfigType.BOOLEAN,
               "only an explicit ElectLeaders of type unclean elects a replica outside "
               "the ISR"),
    ]
    if clustered:
        entries += [
            flag("default.replication.factor", s.default_replication_factor, ConfigType.INT,
                 "replicas of a topic created without a factor",
                 "default_replication_factor"),
            flag("min.insync.replicas", s.min_insync_replicas, ConfigType.INT,
                 "acks=all needs this many in-sync replicas", "min_insync_replicas"),
            flag("offsets.topic.replication.factor", s.offsets_topic_replication_factor,
                 ConfigType.SHORT, "replicas of __consumer_offsets and __group_events",
                 "offsets_topic_replication_factor"),
            flag("replica.fetch.max.bytes", s.replica_fetch_max_bytes, ConfigType.INT,
                 "bytes a follower fetches per partition", "replica_fetch_max_bytes"),
            flag("replica.fetch.wait.max.ms", s.replica_fetch_wait_max_ms, ConfigType.INT,
                 "how long a follower's fetch waits for data", "replica_fetch_wait_max_ms"),
            flag("replica.lag.time.max.ms", s.replica_lag_time_max_ms, ConfigType.LONG,
                 "a follower this far behind leaves the ISR", "replica_lag_time_max_ms"),
        ]
    else:
        entries += [
            _fixed("default.replication.factor", "1", ConfigType.INT,
                   "a single broker holds the only replica"),
            _fixed("min.insync.replicas", "1", ConfigType.INT,
                   "a single broker is the whole ISR"),
            _fixed("offsets.topic.replication.factor", "1", ConfigType.SHORT,
                   "a single broker holds the only replica"),
        ]
    return sorted(entries, key=lambda e: e.name)


def same_value(entry: ConfigEntry, value: str | None) -> bool:
    """Whether setting ``entry`` to ``value`` leaves it as it is (None: Kafka's "back to
    the default", which is what it is: nothing is ever overridden)."""
    if value is None:
        return True
    if entry.value is None:
        return False
    asked, have = value.strip(), entry.value
    if entry.type in (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST):
        return asked.lower() == have.lower()
    return asked == have


def config_refusal(entries: Sequence[ConfigEntry], name: str, value: str | None,
                   ) -> tuple[int, str] | None:
    """Why ``name=value`` cannot be had where ``entries`` hold, or None if it can."""
    entry = next((e for e in entries if e.name == name), None)
    if entry is None:
        return INVALID_CONFIG, f"config {name!r} is not supported by groupwire"
    if same_value(entry, value):
        return None
    return (int(ErrorCode.POLICY_VIOLATION),
            f"groupwire cannot set {name} to {value!r}: it is {entry.value}, fixed while "
            f"the broker runs; {entry.documentation}")


# --- DescribeConfigs (32) ---------------------------------------------------------------


def _operation_refusal(ctx: KafkaContext, operation: AclOperation, resource: int,
                       name: str) -> tuple[int, str] | None:
    """The authorizer's answer for ``operation`` on a config resource, as Kafka words it."""
    if ctx.allowed is None:
        return None
    if resource == ConfigResource.TOPIC:
        if ctx.allowed(operation, ResourceType.TOPIC, name):
            return None
        return (int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                f"not authorized to {operation.name} topic {name!r}")
    if ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return (int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            f"not authorized to {operation.name} the cluster")


def _lookup(ctx: KafkaContext, operation: AclOperation, resource: int, name: str,
            ) -> Sequence[ConfigEntry] | tuple[int, str]:
    """A resource's configs, or the code and message it is answered with instead."""
    if resource not in (ConfigResource.TOPIC, ConfigResource.BROKER):
        return (int(ErrorCode.INVALID_REQUEST),
                f"resource type {resource}: groupwire has configs for topics (2) and "
                f"brokers (4) only")
    if resource == ConfigResource.BROKER and name != "" and not _BROKER_ID.fullmatch(name):
        return int(ErrorCode.INVALID_REQUEST), f"broker id must be an integer, got {name!r}"
    refused = _operation_refusal(ctx, operation, resource, name)
    if refused is not None:
        return refused
    if ctx.configs is None:
        return (int(ErrorCode.INVALID_REQUEST),
                "configs are not available on this listener")
    entries = ctx.configs.describe(resource, name)
    if entries is not None:
        return entries
    if resource == ConfigResource.TOPIC:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"unknown topic {name!r}"
    return (int(ErrorCode.INVALID_REQUEST),
            f"broker {name} is not this broker: ask broker {name} for its configs")


def _describe_configs_request(ctx: KafkaContext, body: Body) -> Step:
    version = ctx.api_version
    documented = version >= 3 and bool(body.get("include_documentation"))
    results = []
    for resource in body["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        found = _lookup(ctx, AclOperation.DESCRIBE_CONFIGS, kind, name)
        result: Body = {"error_code": 0, "error_message": None, "resource_type": kind,
                        "resource_name": name, "configs": []}
        if isinstance(found, tuple):
            result["error_code"], result["error_message"] = kafka_code(found[0]), found[1]
        else:
            keys = resource.get("configuration_keys")
            wanted = set(keys) if keys else None  # null or empty: every one, as Kafka
            result["configs"] = [_described(entry, version, documented) for entry in found
                                 if wanted is None or entry.name in wanted]
        results.append(result)
    return Answer({"throttle_time_ms": 0, "results": results})


def _described(entry: ConfigEntry, version: int, documented: bool) -> Body:
    config: Body = {"name": entry.name, "value": entry.value, "read_only": entry.read_only,
                    "config_source": int(entry.source), "is_sensitive": False,
                    "synonyms": []}
    if version >= 3:
        config["config_type"] = int(entry.type)
        config["documentation"] = entry.documentation if documented else None
    return config


def _answered_already(ctx: KafkaContext, body: Body, response: Response) -> Body:
    raise AssertionError("answered without dispatching anything")


# --- AlterConfigs (33) ------------------------------------------------------------------


def _alter_configs_request(ctx: KafkaContext, body: Body) -> Step:
    responses = []
    for resource in body["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        found = _lookup(ctx, AclOperation.ALTER_CONFIGS, kind, name)
        refused: tuple[int, str] | None
        if isinstance(found, tuple):
            refused = found
        elif kind == ConfigResource.BROKER and name == "":
            refused = next(((int(ErrorCode.POLICY_VIOLATION),
                             f"{c['name']}: groupwire has no cluster-wide dynamic broker "
                             f"configs, every broker config is one of its flags")
                            for c in resource["configs"] if c["value"] is not None), None)
        else:
            refused = next((r for r in (config_refusal(found, c["name"], c["value"])
                                        for c in resource["configs"]) if r is not None),
                           None)
        code, message = refused if refused is not None else (0, None)
        responses.append({"error_code": kafka_code(code), "error_message": message,
                          "resource_type": kind, "resource_name": name})
    # validate_only changes nothing, and neither does anything else: same answers
    return Answer({"throttle_time_ms": 0, "responses": responses})


CONFIG_TRANSLATORS: dict[int, Translator] = {
    DESCRIBE_CONFIGS: Simple(_describe_configs_request, _answered_already),
    ALTER_CONFIGS: Simple(_alter_configs_request, _answered_already),
}

