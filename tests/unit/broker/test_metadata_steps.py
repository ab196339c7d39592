"""A Metadata answer is built a step per topic, and per METADATA_STEP partitions of a
large one: a 10 000-partition topic took ~14 ms of the event loop in one piece."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.broker.topic_apis import METADATA_STEP, TopicApis
from groupwire.protocol.messages import MetadataRequest, MetadataRequestTopic
from tests.steps import steps_taken


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TopicStore]:
    s = TopicStore(tmp_path / "data", StorageConfig(offsets_partitions=1))
    yield s
    s.close(sync=False)


def test_a_large_topic_is_described_over_several_steps(store: TopicStore,
                                                        tmp_path: Path) -> None:
    store.create_topic("big", 2 * METADATA_STEP + 1)
    store.create_topic("small", 2)
    apis = TopicApis(BrokerSettings(data_dir=tmp_path / "data"), store, port=lambda: 0,
                     on_append=lambda topic, partition: None)
    request = MetadataRequest(topics=[MetadataRequestTopic(name="big"),
                                      MetadataRequestTopic(name="small")],
                              allow_auto_topic_creation=False)
    steps, response = steps_taken(apis.metadata_steps(request))
    assert steps == 3 + 1
    big, small = response.topics
    assert [p.partition_index for p in big.partitions] == list(range(2 * METADATA_STEP + 1))
    assert [p.partition_index for p in small.partitions] == [0, 1]
    assert apis.metadata(request) == response
