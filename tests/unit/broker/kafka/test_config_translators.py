"""DescribeConfigs and AlterConfigs through the Kafka door: configs named as Kafka names
them with what groupwire really does, read by kafka-python's classes and enums (the
oracle); nothing ever changes."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import errors as kerr
from kafka.admin import ConfigResourceType, ConfigSourceType, ConfigType
from kafka.protocol.admin import AlterConfigsRequest as KAlterConfigsRequest
from kafka.protocol.admin import AlterConfigsResponse as KAlterConfigsResponse
from kafka.protocol.admin import DescribeConfigsRequest as KDescribeConfigsRequest
from kafka.protocol.admin import DescribeConfigsResponse as KDescribeConfigsResponse

from groupwire.broker.config import BrokerSettings
from groupwire.broker.kafka.apis.admin import ADMIN_TRANSLATORS
from groupwire.broker.kafka.apis.configs import BrokerConfigs
from groupwire.broker.kafka.translate import Answer, Body, KafkaContext
from groupwire.protocol.acls import AclOperation, ResourceType
from tests.unit.broker.kafka import kafka_python_oracle as oracle

DESCRIBE_CONFIGS, ALTER_CONFIGS = 32, 33
TOPIC, BROKER = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
TOPICS = {"orders", "__consumer_offsets", "__group_events"}


def view(**settings: Any) -> BrokerConfigs:
    return BrokerConfigs(BrokerSettings(**settings), topic_exists=TOPICS.__contains__)


def ctx(version: int, **kw: Any) -> KafkaContext:
    kw.setdefault("configs", view())
    return KafkaContext(api_version=version, client_id="c", principal="User:a", **kw)


def answer(api_key: int, context: KafkaContext, body: Body) -> Body:
    step = ADMIN_TRANSLATORS[api_key].request(context, body)
    assert isinstance(step, Answer), step  # never dispatched: nothing to ask the broker
    return step.body


def describe(version: int, resources: list[Body], context: KafkaContext | None = None,
             **fields: Any) -> Body:
    body = oracle.request(KDescribeConfigsRequest, version, resources=resources, **fields)
    got = answer(DESCRIBE_CONFIGS, context or ctx(version), body)
    return oracle.response(KDescribeConfigsResponse, version, got)


def resource(kind: int, name: str, keys: list[str] | None = None) -> Body:
    return {"resource_type": kind, "resource_name": name, "configuration_keys": keys}


def values(result: Body) -> dict[str, str | None]:
    return {c["name"]: c["value"] for c in result["configs"]}


@pytest.mark.parametrize("version", [1, 3])
def test_describe_topic_configs_are_the_brokers_flags(version: int) -> None:
    context = ctx(version, configs=view(log_retention_ms=3_600_000, segment_bytes=1 << 20))
    got = describe(version, [resource(TOPIC, "orders")], context)
    (result,) = got["results"]
    assert (result["error_code"], result["resource_type"], result["resource_name"]) == (
        0, TOPIC, "orders")
    assert values(result) == {
        "cleanup.policy": "delete", "compression.type": "producer",
        "flush.messages": str(2**63 - 1), "flush.ms": "1000",
        "max.message.bytes": str(16 * 1024 * 1024 - 65536),
        "message.timestamp.type": "CreateTime", "min.insync.replicas": "1",
        "retention.bytes": "-1", "retention.ms": "3600000", "segment.bytes": "1048576",
        "unclean.leader.election.enable": "false"}
    by_name = {c["name"]: c for c in result["configs"]}
    assert by_name["retention.ms"]["config_source"] == ConfigSourceType.STATIC_BROKER_CONFIG
    assert by_name["retention.bytes"]["config_source"] == ConfigSourceType.DEFAULT_CONFIG
    assert all(c["read_only"] and not c["is_sensitive"] and c["synonyms"] == []
               for c in result["configs"])
    if version >= 3:
        assert by_name["retention.ms"]["config_type"] == ConfigType.LONG
        assert by_name["cleanup.policy"]["config_type"] == ConfigType.LIST
        assert all(c["documentation"] is None for c in result["configs"])  # not asked


def test_describe_keys_filter_and_empty_keys_mean_all() -> None:
    got = describe(1, [resource(TOPIC, "orders", ["segment.bytes", "no.such"]),
                       resource(TOPIC, "orders", [])])
    picked, every = got["results"]
    assert list(values(picked)) == ["segment.bytes"]
    assert len(every["configs"]) == 11


def test_describe_v3_documents_when_asked() -> None:
    got = describe(3, [resource(TOPIC, "orders", ["retention.ms"])],
                   include_synonyms=True, include_documentation=True)
    (config,) = got["results"][0]["configs"]
    assert "--log-retention-ms" in config["documentation"]
    assert config["synonyms"] == []


def test_describe_offsets_topic_is_compacted() -> None:
    got = describe(1, [resource(TOPIC, "__consumer_offsets", ["cleanup.policy",
                                                               "retention.ms"]),
                       resource(TOPIC, "__group_events", ["cleanup.policy"])])
    offsets, events = got["results"]
    assert values(offsets) == {"cleanup.policy": "compact", "retention.ms": "-1"}
    assert values(events) == {"cleanup.policy": "delete"}


@pytest.mark.parametrize(("fsync", "messages", "ms"), [
    ("always", "1", "0"), ("interval", str(2**63 - 1), "250"),
    ("never", str(2**63 - 1), str(2**63 - 1))])
def test_flush_configs_follow_fsync(fsync: str, messages: str, ms: str) -> None:
    context = ctx(1, configs=view(fsync=fsync, flush_interval_ms=250))
    got = describe(1, [resource(TOPIC, "orders", ["flush.messages", "flush.ms"])], context)
    assert values(got["results"][0]) == {"flush.messages": messages, "flush.ms": ms}


def test_cluster_mode_topic_configs() -> None:
    context = ctx(1, configs=view(etcd_endpoints="http://etcd:2379", min_insync_replicas=3))
    got = describe(1, [resource(TOPIC, "orders", ["min.insync.replicas"])], context)
    (config,) = got["results"][0]["configs"]
    assert (config["value"], config["config_source"]) == (
        "3", ConfigSourceType.STATIC_BROKER_CONFIG)


def test_describe_broker_configs() -> None:
    context = ctx(3, configs=view(num_partitions=6, auto_create_topics=True))
    got = describe(3, [resource(BROKER, "0"), resource(BROKER, "")], context)
    this, defaults = got["results"]
    assert this["error_code"] == 0
    broker = values(this)
    assert {k: broker[k] for k in ("broker.id", "num.partitions", "auto.create.topics.enable",
                                   "log.retention.ms", "message.max.bytes",
                                   "default.replication.factor", "broker.rack")} == {
        "broker.id": "0", "num.partitions": "6", "auto.create.topics.enable": "true",
        "log.retention.ms": str(7 * 24 * 3600 * 1000),
        "message.max.bytes": str(16 * 1024 * 1024 - 65536),
        "default.replication.factor": "1", "broker.rack": None}
    assert (defaults["error_code"], defaults["configs"]) == (0, [])


@pytest.mark.parametrize(("kind", "name", "code"), [
    (TOPIC, "nope", kerr.UnknownTopicOrPartitionError.errno),
    (BROKER, "7", kerr.InvalidRequestError.errno),        # another broker's
    (BROKER, "zero", kerr.InvalidRequestError.errno),     # not a broker id
    (ConfigResourceType.GROUP, "g", kerr.InvalidRequestError.errno),
    (ConfigResourceType.BROKER_LOGGER, "0", kerr.InvalidRequestError.errno),
])
def test_describe_what_is_not_here(kind: int, name: str, code: int) -> None:
    (result,) = describe(1, [resource(kind, name)])["results"]
    assert (result["error_code"], result["configs"]) == (code, [])
    assert result["error_message"]


def test_describe_answers_each_resource_on_its_own() -> None:
    got = describe(2, [resource(TOPIC, "nope"), resource(TOPIC, "orders", ["segment.bytes"])])
    assert [r["error_code"] for r in got["results"]] == [
        kerr.UnknownTopicOrPartitionError.errno, 0]


class Acl:
    def __init__(self, *grants: tuple[AclOperation, ResourceType, str]) -> None:
        self.grants = set(grants)

    def __call__(self, operation: AclOperation, resource_type: ResourceType, name: str,
                 audit: bool = True) -> bool:
        return (operation, resource_type, name) in self.grants


def test_describe_needs_describe_configs() -> None:
    acl = Acl((AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "orders"))
    got = describe(1, [resource(TOPIC, "orders", ["segment.bytes"]),
                       resource(TOPIC, "__group_events"), resource(TOPIC, "nope"),
                       resource(BROKER, "0")], ctx(1, allowed=acl))
    assert [r["error_code"] for r in got["results"]] == [
        0, kerr.TopicAuthorizationFailedError.errno,
        kerr.TopicAuthorizationFailedError.errno,  # existence is not told either
        kerr.ClusterAuthorizationFailedError.errno]


def test_describe_without_a_config_view() -> None:
    got = describe(1, [resource(TOPIC, "orders")], ctx(1, configs=None))
    assert got["results"][0]["error_code"] == kerr.InvalidRequestError.errno


# --- AlterConfigs -----------------------------------------------------------------------


def alter(version: int, resources: list[Body], context: KafkaContext | None = None,
          validate_only: bool = False) -> list[Body]:
    body = oracle.request(KAlterConfigsRequest, version, resources=resources,
                          validate_only=validate_only)
    got = answer(ALTER_CONFIGS, context or ctx(version), body)
    return oracle.response(KAlterConfigsResponse, version, got)["responses"]


def change(kind: int, name: str, **configs: str | None) -> Body:
    return {"resource_type": kind, "resource_name": name,
            "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]}


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("validate_only", [False, True])
def test_alter_to_what_it_is_changes_nothing_and_succeeds(version: int,
                                                          validate_only: bool) -> None:
    got = alter(version, [
        change(TOPIC, "orders", retention_ms=str(7 * 24 * 3600 * 1000),
               cleanup_policy="DELETE", segment_bytes=None),
        change(TOPIC, "orders"),
        change(BROKER, "0", num_partitions="1"),
        change(BROKER, "", log_retention_ms=None)], validate_only=validate_only)
    assert got == [
        {"error_code": 0, "error_message": None, "resource_type": TOPIC,
         "resource_name": "orders"},
        {"error_code": 0, "error_message": None, "resource_type": TOPIC,
         "resource_name": "orders"},
        {"error_code": 0, "error_message": None, "resource_type": BROKER,
         "resource_name": "0"},
        {"error_code": 0, "error_message": None, "resource_type": BROKER,
         "resource_name": ""}]


def test_alter_refuses_every_change() -> None:
    got = alter(1, [
        change(TOPIC, "orders", retention_ms="1000"),
        change(TOPIC, "orders", segment_ms="1000"),
        change(BROKER, "0", log_retention_ms="1"),
        change(BROKER, "", log_retention_ms="1"),
        change(TOPIC, "nope", retention_ms="1"),
        change(BROKER, "3", num_partitions="1")])
    assert [r["error_code"] for r in got] == [
        kerr.PolicyViolationError.errno, kerr.InvalidConfigurationError.errno,
        kerr.PolicyViolationError.errno, kerr.PolicyViolationError.errno,
        kerr.UnknownTopicOrPartitionError.errno, kerr.InvalidRequestError.errno]
    assert "--log-retention-ms" in got[0]["error_message"]
    assert "segment.ms" in got[1]["error_message"]


def test_alter_needs_alter_configs() -> None:
    acl = Acl((AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "orders"),
              (AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "__group_events"))
    got = alter(0, [change(TOPIC, "orders"), change(TOPIC, "__group_events"),
                    change(BROKER, "0")], ctx(0, allowed=acl))
    assert [r["error_code"] for r in got] == [
        kerr.TopicAuthorizationFailedError.errno, 0,
        kerr.ClusterAuthorizationFailedError.errno]
