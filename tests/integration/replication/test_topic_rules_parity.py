"""One set of topic-admin rules in both modes (issue 24, item 4).

The same table of CreateTopics, CreatePartitions, DeleteTopics and auto-creating
Metadata requests goes to a single broker and to a one-broker cluster (in-process, on
an in-memory etcd) with the same settings; every answer must be the same, code and
message. Before the rules were shared the cluster enforced no ``--max-partitions``: a
10-partition create over a limit of 5 answered success there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    Request,
    Response,
)
from tests.integration.cluster.harness import BOUND_S, LocalCluster, controller_of, image_of
from tests.integration.conftest import fast_settings

SAME = {"max_partitions": 5, "offsets_topic_num_partitions": 1, "num_partitions": 3,
        "auto_create_topics": True, "fsync": "never"}
"""Both modes: 2 internal partitions hosted (one offsets partition, one events)."""


def _create(*topics: tuple[str, int, int]) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[
        CreatableTopic(name=n, num_partitions=p, replication_factor=rf) for n, p, rf in topics])


def _grow(*topics: tuple[str, int]) -> CreatePartitionsRequest:
    return CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=n, count=c)
                                           for n, c in topics])


TABLE: list[tuple[Request, type[Response]]] = [
    (_create(("bad name!", 1, 1), ("__mine", 1, 1), ("", 1, 1), ("zero", 0, 1),
             ("neg", -2, 1), ("huge", 10_001, 1), ("rf0", 1, 0), ("rf2", 1, 2),
             ("dup", 1, 1), ("dup", 2, 1), ("over", 10, 1)), CreateTopicsResponse),
    (_create(("ok", 2, 1)), CreateTopicsResponse),                      # 2 + 2 = 4
    (_create(("ok", 1, 1), ("more", 2, 1), ("one", 1, 1)), CreateTopicsResponse),
    (_grow(("ok", 2), ("missing", 2), ("__consumer_offsets", 3), ("one", 2),
           ("x", 2), ("x", 3)), CreatePartitionsResponse),
    (DeleteTopicsRequest(topic_names=["one", "one"]), DeleteTopicsResponse),
    (DeleteTopicsRequest(topic_names=["missing", "__consumer_offsets", "__group_events",
                                      "ok"]), DeleteTopicsResponse),
    (_create(("big", 3, 1), ("bigger", 1, 1)), CreateTopicsResponse),   # 3 + 3 > 5
]


async def _answers(send: Callable[[Request, type[Response]], Any]) -> list[object]:
    answers: list[object] = [await send(request, kind) for request, kind in TABLE]
    metadata = await send(MetadataRequest(topics=[MetadataRequestTopic(name="auto"),
                                                  MetadataRequestTopic(name="__auto")]),
                          MetadataResponse)
    answers.append([(t.name, t.error_code, t.error_message) for t in metadata.topics])
    return answers


@pytest.fixture
async def single(tmp_path: Path) -> AsyncIterator[list[object]]:
    broker = Broker(fast_settings(tmp_path / "single", **SAME))
    await broker.start()
    conn = await Connection.open("127.0.0.1", broker.port)
    try:
        yield await _answers(lambda request, kind: conn.send(request, timeout=BOUND_S,
                                                             response_type=kind))
    finally:
        await conn.close()
        await broker.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[list[object]]:
    c = LocalCluster(tmp_path / "cluster", **SAME, offsets_topic_replication_factor=1,
                     default_replication_factor=1)
    try:
        await c.start(1)
        await c.until(lambda: image_of(c, 1).controller_id is not None)
        await c.serving(1)
        node = controller_of(c)
        yield await _answers(lambda request, kind: c.send(node, request, kind))
    finally:
        await c.close()


async def test_a_single_broker_and_a_cluster_answer_every_bad_request_alike(
        single: list[object], cluster: list[object]) -> None:
    for i, (alone, clustered) in enumerate(zip(single, cluster, strict=True)):
        assert alone == clustered, f"request {i} of the table"
    first = single[0]
    assert isinstance(first, CreateTopicsResponse)
    codes = {t.name: t.error_code for t in first.topics}
    assert codes["over"] == ErrorCode.POLICY_VIOLATION  # 10 partitions over a cap of 5
    assert codes["dup"] == ErrorCode.INVALID_REQUEST
    assert codes["rf2"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert codes["huge"] == ErrorCode.INVALID_PARTITIONS
    third = single[2]
    assert isinstance(third, CreateTopicsResponse)
    assert [t.error_code for t in third.topics] == [
        ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.POLICY_VIOLATION, ErrorCode.NONE]
    assert [code for _, code, _ in single[-1]] == [  # type: ignore[attr-defined]
        ErrorCode.POLICY_VIOLATION, ErrorCode.INVALID_TOPIC_EXCEPTION]
