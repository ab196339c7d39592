"""The admin translators on the codec's own dicts: a request kafka-python frames is decoded
by ``protocol.kafka.codec``, translated, answered, and the answer encoded by the codec is
read back by kafka-python, at the lowest and highest version served. What the translator
unit tests check field by field, this checks end to end once per API and version."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol import admin as kadmin
from kafka.protocol import metadata as kmetadata
from kafka.protocol import producer as kproducer

from groupwire.broker.config import BrokerSettings
from groupwire.broker.kafka.apis.admin import ADMIN_TRANSLATORS
from groupwire.broker.kafka.apis.configs import BrokerConfigs
from groupwire.broker.kafka.translate import Answer, Dispatch, KafkaAddress, KafkaContext
from groupwire.protocol.kafka.codec import SERVED, decode_request, encode_response
from groupwire.protocol.messages import (
    AclCreationResult,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreatableTopicResult,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteAclsFilterResult,
    DeleteAclsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeUserScramCredentialsResponse,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
    Response,
)

_FILTER = {"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
_METADATA = MetadataResponse(
    brokers=[MetadataBroker(node_id=0, host="gw", port=9092)], cluster_id="c",
    controller_id=0, topics=[MetadataTopic(name="t", partitions=[MetadataPartition(
        partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0],
        isr_nodes=[0])])])

Read = Callable[[dict[str, Any]], Any]

CASES: list[tuple[Any, Any, dict[str, Any], Response | None, Read, Any]] = [
    (kmetadata.MetadataRequest, kmetadata.MetadataResponse, {"topics": [{"name": "t"}]},
     _METADATA, lambda r: (r["brokers"][0]["port"], r["topics"][0]["name"]), (19092, "t")),
    (kadmin.CreateTopicsRequest, kadmin.CreateTopicsResponse, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "cleanup.policy", "value": "delete"}]}],
      "timeout_ms": 1000, "validate_only": False},
     CreateTopicsResponse(topics=[CreatableTopicResult(name="t")]),
     lambda r: r["topics"], [{"name": "t", "error_code": 0, "error_message": None}]),
    (kadmin.DeleteTopicsRequest, kadmin.DeleteTopicsResponse,
     {"topic_names": ["t"], "timeout_ms": 1000},
     DeleteTopicsResponse(responses=[DeletableTopicResult(name="t")]),
     lambda r: r["responses"], [{"name": "t", "error_code": 0}]),
    (kadmin.CreatePartitionsRequest, kadmin.CreatePartitionsResponse,
     {"topics": [{"name": "t", "count": 2, "assignments": None}], "timeout_ms": 1,
      "validate_only": False},
     CreatePartitionsResponse(results=[CreatePartitionsTopicResult(name="t")]),
     lambda r: r["results"], [{"name": "t", "error_code": 0, "error_message": None}]),
    (kproducer.InitProducerIdRequest, kproducer.InitProducerIdResponse,
     {"transactional_id": None, "transaction_timeout_ms": 1000},
     InitProducerIdResponse(producer_id=5, producer_epoch=0),
     lambda r: (r["producer_id"], r["producer_epoch"]), (5, 0)),
    (kadmin.DescribeAclsRequest, kadmin.DescribeAclsResponse, _FILTER,
     DescribeAclsResponse(), lambda r: r["resources"], []),
    (kadmin.CreateAclsRequest, kadmin.CreateAclsResponse, {"creations": [
        {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
         "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]},
     CreateAclsResponse(results=[AclCreationResult()]), lambda r: r["results"],
     [{"error_code": 0, "error_message": None}]),
    (kadmin.DeleteAclsRequest, kadmin.DeleteAclsResponse, {"filters": [_FILTER]},
     DeleteAclsResponse(filter_results=[DeleteAclsFilterResult()]),
     lambda r: r["filter_results"], [{"error_code": 0, "error_message": None,
                                      "matching_acls": []}]),
    (kadmin.DescribeUserScramCredentialsRequest, kadmin.DescribeUserScramCredentialsResponse,
     {"users": None}, DescribeUserScramCredentialsResponse(), lambda r: r["results"], []),
    (kadmin.AlterUserScramCredentialsRequest, kadmin.AlterUserScramCredentialsResponse,
     {"deletions": [], "upsertions": [{"name": "a", "mechanism": 1, "iterations": 4096,
                                       "salt": b"s" * 16, "salted_password": b"p" * 32}]},
     AlterUserScramCredentialsResponse(results=[AlterUserScramCredentialsResult(user="a")]),
     lambda r: r["results"], [{"user": "a", "error_code": 0, "error_message": None}]),
    (kadmin.DescribeClusterRequest, kadmin.DescribeClusterResponse,
     {"include_cluster_authorized_operations": True}, _METADATA,
     lambda r: (r["cluster_id"], r["brokers"][0]["port"], 8 in r["authorized_operations"]),
     ("c", 19092, True)),
    (kadmin.DescribeConfigsRequest, kadmin.DescribeConfigsResponse, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
        "include_synonyms": True}, None,
     lambda r: {c["name"]: c["value"] for c in r["results"][0]["configs"]}["cleanup.policy"],
     "delete"),
    (kadmin.AlterConfigsRequest, kadmin.AlterConfigsResponse, {"resources": [
        {"resource_type": 2, "resource_name": "t",
         "configs": [{"name": "retention.ms", "value": "1"}]}], "validate_only": True},
     None, lambda r: r["responses"][0]["error_code"], 44),
]


def _build(fields: Any, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        field = fields[key]
        if field.is_struct_array() and value is not None:
            out[key] = [field.data_class(**_build(field.fields, v)) for v in value]
        else:
            out[key] = value
    return out


def _versions() -> list[tuple[Any, ...]]:
    found = []
    for request_cls, response_cls, fields, answer, read, expected in CASES:
        low, high = SERVED[request_cls.API_KEY]
        for version in sorted({low, high}):
            found.append((request_cls, response_cls, fields, answer, read, expected, version))
    return found


@pytest.mark.parametrize(("request_cls", "response_cls", "fields", "answer", "read",
                          "expected", "version"),
                         _versions(),
                         ids=lambda v: getattr(v, "__name__", None) if isinstance(v, type)
                         else None)
def test_through_the_codec(request_cls: Any, response_cls: Any, fields: dict[str, Any],
                           answer: Response | None, read: Read, expected: Any,
                           version: int) -> None:
    message = request_cls(version=version, **_build(request_cls._struct.fields, fields))
    message.with_header(correlation_id=41, client_id="kafka-python")
    decoded = decode_request(message.encode(version=version, header=True))
    assert decoded.header.api_key == request_cls.API_KEY
    context = KafkaContext(
        api_version=version, client_id="kafka-python", principal="User:a",
        addresses={0: KafkaAddress(0, "k", 19092)},
        configs=BrokerConfigs(BrokerSettings(), topic_exists=lambda n: n == "t"))
    translator = ADMIN_TRANSLATORS[request_cls.API_KEY]
    step = translator.request(context, decoded.body)
    if answer is None:
        assert isinstance(step, Answer)
        body = step.body
    else:
        assert isinstance(step, Dispatch)
        translated = translator.response(context, decoded.body, answer)
        assert isinstance(translated, dict)
        body = translated
    payload = encode_response(decoded.header, body)
    decoded_answer = response_cls.decode(payload, version=version, header=True)
    assert decoded_answer.header.correlation_id == 41
    got = decoded_answer.to_dict(json=False)
    assert got.get("error_code", 0) == 0
    assert got.get("throttle_time_ms", 0) == 0
    assert read(got) == expected


def test_every_admin_translator_is_served_by_the_codec_and_tested_here() -> None:
    keys = {case[0].API_KEY for case in CASES}
    assert set(ADMIN_TRANSLATORS) == keys == {3, 19, 20, 22, 29, 30, 31, 32, 33, 37, 50, 51, 60}
    assert keys <= set(SERVED)
