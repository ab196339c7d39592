"""kcat (Debian's, on librdkafka 2.0) against the Kafka door: metadata, produce from
stdin, consume to the end, and a consumer group, as a shell user runs them.

Topics are made and groups inspected through groupwire's own SDK (the msgpack door):
kcat can do neither, and that keeps this module free of the other Kafka clients.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from typing import Any

import pytest

from groupwire import Admin
from groupwire.protocol.hashing import partition_for_key

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (Debian: apt-get install kcat)")

TIMEOUT_S = 60
# Kafka's murmur2 on keys, as groupwire's SDK places them; kcat's librdkafka defaults to
# CRC32 (consistent_random)
MURMUR2 = ("-X", "topic.partitioner=murmur2_random")
FORMAT = r"%k|%s|%p|%o|%h\n"


def _kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    assert KCAT is not None
    done = subprocess.run([KCAT, "-b", bootstrap, *args], input=stdin, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}:\n" \
                                 f"{done.stderr[-2000:]}"
    assert "ERROR" not in done.stderr, done.stderr
    return done.stdout


def _admin(bootstrap: str, call: str, *args: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        admin = Admin(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await getattr(admin, call)(*args, **kwargs)
        finally:
            await admin.close()

    return asyncio.run(run())


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    _admin(bootstrap, "create_topics", topic, num_partitions=partitions, replication_factor=1)


def _produce(bootstrap: str, topic: str, lines: list[str], *headers: str) -> None:
    header_args = [arg for header in headers for arg in ("-H", header)]
    _kcat(bootstrap, "-P", "-t", topic, "-K:", *header_args, *MURMUR2,
          stdin="".join(line + "\n" for line in lines))


def _parse(output: str) -> list[tuple[str, str, int, int, str]]:
    rows = []
    for line in output.splitlines():
        key, value, partition, offset, headers = line.split("|")
        rows.append((key, value, int(partition), int(offset), headers))
    return rows


def test_metadata_as_json_names_the_broker_and_every_partition(bootstrap: str,
                                                                name: str) -> None:
    _create(bootstrap, name, 3)
    metadata = json.loads(_kcat(bootstrap, "-L", "-J", "-t", name))
    [broker] = metadata["brokers"]
    assert broker["name"] == bootstrap
    assert metadata["controllerid"] == broker["id"]
    [topic] = metadata["topics"]
    assert topic["topic"] == name
    assert "error" not in topic, topic
    partitions = sorted(topic["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for partition in partitions:
        assert partition["leader"] == broker["id"]
        assert partition["replicas"] == [{"id": broker["id"]}]
        assert partition["isrs"] == [{"id": broker["id"]}]


def test_metadata_lists_every_topic(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, 2)
    metadata = json.loads(_kcat(bootstrap, "-L", "-J"))
    assert name in {t["topic"] for t in metadata["topics"]}


def test_produce_keys_and_headers_then_consume_to_the_end(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, 3)
    lines = [f"key-{i}:value {i}" for i in range(40)]
    _produce(bootstrap, name, lines, "source=kcat", "run=1")
    rows = _parse(_kcat(bootstrap, "-C", "-t", name, "-o", "beginning", "-e", "-f", FORMAT))
    assert sorted((k, v) for k, v, *_ in rows) == sorted(
        tuple(line.split(":", 1)) for line in lines)
    for key, _, partition, _, headers in rows:
        assert partition == partition_for_key(key.encode(), 3), key
        assert headers == "source=kcat,run=1"
    for p in range(3):
        offsets = [offset for _, _, partition, offset, _ in rows if partition == p]
        assert offsets == list(range(len(offsets)))


def test_consume_one_partition_from_an_offset(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, 1)
    _kcat(bootstrap, "-P", "-t", name, "-p", "0", stdin="".join(f"m{i}\n" for i in range(20)))
    out = _kcat(bootstrap, "-C", "-t", name, "-p", "0", "-o", "15", "-e", "-f", r"%o:%s\n")
    assert out.splitlines() == [f"{i}:m{i}" for i in range(15, 20)]


def test_a_consumer_group_reads_everything_once_and_commits(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, 3)
    group = f"g-{name}"
    _produce(bootstrap, name, [f"k{i}:v{i}" for i in range(30)])
    # not -o: in -G mode kcat would seek every assigned partition there, over the commits
    group_args = ("-G", group, "-X", "auto.offset.reset=earliest", "-e", "-f", FORMAT)
    rows = _parse(_kcat(bootstrap, *group_args, name))
    assert sorted(v for _, v, *_ in rows) == sorted(f"v{i}" for i in range(30))

    # kcat commits what it read when it closes (enable.auto.commit), then leaves
    committed = _admin(bootstrap, "list_consumer_group_offsets", group)
    ends: dict[int, int] = {}
    for _, _, partition, offset, _ in rows:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    assert {tp.partition: meta.offset for tp, meta in committed.items()} == ends
    [described] = _admin(bootstrap, "describe_groups", group)
    assert described.state == "Empty"
    assert described.protocol_type == "consumer"

    # the next run resumes from the commits: only what came after
    _produce(bootstrap, name, [f"k{i}:late{i}" for i in range(5)])
    rows = _parse(_kcat(bootstrap, *group_args, name))
    assert sorted(v for _, v, *_ in rows) == sorted(f"late{i}" for i in range(5))
