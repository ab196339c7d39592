"""``groupwire cluster brokers|partitions|elect-leaders`` against a single broker: a
cluster of one, node 0 the controller and every partition's only replica."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from groupwire.broker.server import Broker
from groupwire.client.admin import Admin
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode


def _groupwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "groupwire", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})


async def _run(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(_groupwire, *args, "--bootstrap",
                                   f"127.0.0.1:{broker.port}")


@pytest.fixture
async def admin(broker: Broker):  # type: ignore[no-untyped-def]
    async with Admin(f"127.0.0.1:{broker.port}", request_timeout_ms=5000) as a:
        yield a


async def test_the_sdk_elects_nothing_on_one_broker(admin: Admin) -> None:
    await admin.create_topics("orders", 2)
    results = await admin.elect_leaders([TopicPartition("orders", 1),
                                         TopicPartition("orders", 5),
                                         TopicPartition("nope", 0)])
    codes = {tp: None if e is None else e.code for tp, e in results.items()}
    assert codes == {TopicPartition("orders", 1): ErrorCode.ELECTION_NOT_NEEDED,
                     TopicPartition("orders", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     TopicPartition("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    everything = await admin.elect_leaders()
    assert TopicPartition("orders", 0) in everything
    assert TopicPartition("__consumer_offsets", 0) in everything
    desc = await admin.describe_cluster()
    assert desc.controller_id == 0
    assert [(b.node_id, b.rack, b.controller) for b in desc.brokers] == [(0, None, True)]
    parts = await admin.describe_partitions(["orders"])
    assert [(d.partition, d.leader, d.leader_epoch, d.replicas, d.isr, d.offline_replicas)
            for d in parts] == [(0, 0, 0, [0], [0], []), (1, 0, 0, [0], [0], [])]


async def test_brokers(broker: Broker) -> None:
    plain = await _run(broker, "cluster", "brokers")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[1:] == [
        "node id\taddress\track\tcontroller", f"0\t127.0.0.1:{broker.port}\t-\tyes"]
    as_json = await _run(broker, "cluster", "brokers", "--json")
    assert json.loads(as_json.stdout)["brokers"] == [
        {"node_id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None,
         "controller": True}]
    assert json.loads(as_json.stdout)["controller_id"] == 0


async def test_partitions_and_their_filters(broker: Broker, admin: Admin) -> None:
    await admin.create_topics("orders", 2)
    listed = await _run(broker, "cluster", "partitions", "--topic", "orders")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "partitions", "topic\tpartition\tleader\tepoch\treplicas\tISR\toffline",
        "orders\t0\t0\t0\t0\t0\t", "orders\t1\t0\t0\t0\t0\t"]
    everything = json.loads((await _run(broker, "cluster", "partitions", "--json")).stdout)
    assert {d["topic"] for d in everything} == {"orders", "__consumer_offsets",
                                                "__group_events"}
    for flag in ("--under-replicated", "--unavailable"):
        none = await _run(broker, "cluster", "partitions", flag, "--json")
        assert none.returncode == 0 and json.loads(none.stdout) == []
    missing = await _run(broker, "cluster", "partitions", "--topic", "nope")
    assert missing.returncode == 1
    assert missing.stderr.startswith("groupwire cluster: error: UNKNOWN_TOPIC_OR_PARTITION")
    assert "Traceback" not in missing.stderr and len(missing.stderr.splitlines()) == 1


async def test_elect_leaders(broker: Broker, admin: Admin) -> None:
    await admin.create_topics("orders", 2)
    one = await _run(broker, "cluster", "elect-leaders", "--topic", "orders",
                     "--partition", "1")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [
        "preferred leader elections", "topic\tpartition\tresult\tdetail",
        "orders\t1\tELECTION_NOT_NEEDED\torders-1 is already led by its preferred replica 0"]
    topic = json.loads((await _run(broker, "cluster", "elect-leaders", "--topic", "orders",
                                   "--json")).stdout)
    assert [(r["partition"], r["result"], r["error_code"]) for r in topic] == [
        (0, "ELECTION_NOT_NEEDED", 84), (1, "ELECTION_NOT_NEEDED", 84)]
    unknown = await _run(broker, "cluster", "elect-leaders", "--topic", "orders",
                         "--partition", "9", "--json")
    assert unknown.returncode == 0  # a partition's result, not a failed request
    assert json.loads(unknown.stdout)[0]["result"] == "UNKNOWN_TOPIC_OR_PARTITION"
    every = json.loads((await _run(broker, "cluster", "elect-leaders", "--json")).stdout)
    assert {(r["topic"], r["partition"]) for r in every} >= {("orders", 0), ("orders", 1),
                                                             ("__consumer_offsets", 0)}
    usage = await _run(broker, "cluster", "elect-leaders", "--partition", "1")
    assert usage.returncode == 2 and "--partition needs --topic" in usage.stderr


def test_every_action_has_help_lines() -> None:
    top = _groupwire("cluster", "--help")
    assert top.returncode == 0
    for action in ("brokers", "partitions", "elect-leaders"):
        assert action in top.stdout
        helped = _groupwire("cluster", action, "--help")
        assert helped.returncode == 0
        for flag in ("--bootstrap", "--timeout-ms", "--json"):
            assert flag in helped.stdout
    partitions = _groupwire("cluster", "partitions", "--help").stdout
    assert "--under-replicated" in partitions and "--unavailable" in partitions
    elect = _groupwire("cluster", "elect-leaders", "--help").stdout
    assert "--topic" in elect and "--partition" in elect
    assert "cluster" in _groupwire("--help").stdout


@pytest.mark.parametrize("action", ["brokers", "partitions", "elect-leaders"])
async def test_a_dead_broker_is_one_line_without_traceback(broker: Broker,
                                                           action: str) -> None:
    port = broker.port
    await broker.close()
    dead = await asyncio.to_thread(_groupwire, "cluster", action, "--bootstrap",
                                   f"127.0.0.1:{port}", "--timeout-ms", "1000")
    assert dead.returncode == 1
    assert dead.stderr.startswith("groupwire cluster: error: ")
    assert "Traceback" not in dead.stderr and len(dead.stderr.splitlines()) == 1
