"""A broker under a small open files limit: partitions are not bounded by descriptors.

The broker runs as its own process with RLIMIT_NOFILE lowered to (128, 256) before it
starts, so it must raise its soft limit itself, size its file pool from 256, and serve
far more partitions than two descriptors each would allow, under ``--fsync always``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

SOFT, HARD = 128, 256
PARTITIONS = 300
"""Two descriptors each (segment log and index) would be 600: more than the hard limit."""
MAX_PARTITIONS = 400
STARTUP_TIMEOUT_S = 60


class LimitedBroker:
    """``groupwire broker`` in a child process whose RLIMIT_NOFILE is lowered first."""

    def __init__(self, data_dir: Path) -> None:
        def limit() -> None:  # runs in the child between fork and exec
            resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))

        cmd = [sys.executable, "-m", "groupwire", "broker", "--host", "127.0.0.1",
               "--port", "0", "--data-dir", str(data_dir), "--metrics-port", "-1",
               "--log-format", "json", "--fsync", "always",
               "--offsets-topic-num-partitions", "2", "--max-partitions",
               str(MAX_PARTITIONS)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, preexec_fn=limit,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.events: list[dict[str, object]] = []
        self.port = -1
        started = threading.Event()

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                self.events.append(event)
                if event.get("event") == "broker_started":
                    self.port = int(event["port"])  # type: ignore[call-overload]
                    started.set()
            started.set()

        threading.Thread(target=pump, daemon=True).start()
        if not started.wait(STARTUP_TIMEOUT_S) or self.port < 0:
            self.stop()
            raise RuntimeError(f"broker did not start: {self.events[-5:]}")

    def open_descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def event(self, name: str) -> dict[str, object]:
        return next(e for e in self.events if e.get("event") == name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitedBroker]:
    proc = LimitedBroker(tmp_path_factory.mktemp("open-files") / "data")
    yield proc
    proc.stop()


def _produce_all(topic: str, partitions: int, value: bytes) -> ProduceRequest:
    batch = encode_batch([BatchRecord(value=value, key=None, timestamp_ms=1_700_000_000_000)])
    return ProduceRequest(topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=p, records=batch) for p in range(partitions)])])


def test_the_broker_raises_its_soft_limit_and_logs_the_limit_and_pool(
        broker: LimitedBroker) -> None:
    event = broker.event("open_files_limit")
    assert event["limit"] == HARD and event["raised_from"] == SOFT
    assert event["max_open_files"] == (HARD - 64) // 2
    assert event["max_partitions"] == MAX_PARTITIONS
    assert event["level"] == "info"


async def test_many_partitions_under_fsync_always_stay_within_the_limit(
        broker: LimitedBroker) -> None:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="open-files")
    try:
        created = await conn.send(CreateTopicsRequest(topics=[
            CreatableTopic(name="fd0", num_partitions=PARTITIONS)]),
            response_type=CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE, created
        for round_ in range(3):
            resp = await conn.send(_produce_all("fd0", PARTITIONS, b"r%d" % round_),
                                   response_type=ProduceResponse)
            answers = resp.responses[0].partition_responses
            assert [a for a in answers if a.error_code != ErrorCode.NONE] == []
            assert {a.base_offset for a in answers} == {round_}
            assert broker.open_descriptors() < HARD
        assert broker.proc.poll() is None
    finally:
        await conn.close()


async def test_creating_past_the_partition_cap_is_refused_naming_the_limit(
        broker: LimitedBroker) -> None:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="open-files")
    try:
        await conn.send(CreateTopicsRequest(topics=[CreatableTopic(name="small",
                                                                   num_partitions=1)]))
        meta = await conn.send(MetadataRequest(topics=None), response_type=MetadataResponse)
        hosted = sum(len(t.partitions) for t in meta.topics)  # internal ones included
        too_many = MAX_PARTITIONS - hosted + 1
        refused = await conn.send(CreateTopicsRequest(topics=[
            CreatableTopic(name="big", num_partitions=too_many)]),
            response_type=CreateTopicsResponse)
        topic = refused.topics[0]
        assert topic.error_code == ErrorCode.POLICY_VIOLATION
        assert "--max-partitions" in topic.error_message
        assert f"limit of {MAX_PARTITIONS}" in topic.error_message
        assert f"hosts {hosted}" in topic.error_message
        grown = await conn.send(CreatePartitionsRequest(topics=[
            CreatePartitionsTopic(name="small", count=too_many + 1)]),
            response_type=CreatePartitionsResponse)
        assert grown.results[0].error_code == ErrorCode.POLICY_VIOLATION
        assert f"limit of {MAX_PARTITIONS}" in grown.results[0].error_message
        fits = await conn.send(CreateTopicsRequest(topics=[
            CreatableTopic(name="big", num_partitions=too_many - 1)]),
            response_type=CreateTopicsResponse)
        assert fits.topics[0].error_code == ErrorCode.NONE  # up to the cap is served
    finally:
        await conn.close()


def test_a_pool_larger_than_the_limit_allows_is_refused_at_start(tmp_path: Path) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))

    result = subprocess.run(
        [sys.executable, "-m", "groupwire", "broker", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--metrics-port", "-1", "--log-format", "json",
         "--max-open-files", "1000"],
        capture_output=True, text=True, preexec_fn=limit, timeout=STARTUP_TIMEOUT_S)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "--max-open-files 1000" in lines[0] and f"RLIMIT_NOFILE {HARD}" in lines[0]
