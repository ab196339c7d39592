"""A leader that stalls with its connections open (SIGSTOP, a long pause): the SDK drops
it after one request timeout, reads metadata from another node rather than the stalled
one, and the record goes to the partition's new leader within the delivery timeout."""

from __future__ import annotations

import asyncio

import pytest

from groupwire.client.producer import Producer
from groupwire.protocol.batches import decode_records
from groupwire.protocol.messages import (
    MetadataRequest,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
)

from .scripted_broker import ScriptedNode, cluster_of, metadata

BOUND_S = 10


async def test_a_stalled_leader_costs_one_attempt_then_the_new_leader_gets_it() -> None:
    leaders = {"t": [2]}
    stalled = asyncio.Event()  # never set: node 2 never answers once it stalls
    got: list[bytes | None] = []
    nodes: list[ScriptedNode] = []

    async def handle(node: ScriptedNode, req: Request) -> Response:
        if node.node_id == 2 and leaders["t"] == [1]:
            await stalled.wait()  # stalled: holds every request, closes nothing
        if isinstance(req, MetadataRequest):
            return metadata(nodes, leaders, controller_id=1)
        assert isinstance(req, ProduceRequest)
        part = req.topic_data[0].partition_data[0]
        if node.node_id == 2:
            leaders["t"] = [1]  # the cluster moves the leadership as node 2 stalls
            await stalled.wait()
        got.extend(r.value for r in decode_records(part.records))
        return ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[
            PartitionProduceResponse(index=0, base_offset=len(got) - 1)])])

    async with cluster_of(2, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Producer(
                started[0].address, linger_ms=0, request_timeout_ms=300,
                delivery_timeout_ms=5000, retry_backoff_ms=10) as producer:
            meta = await producer.send_and_wait("t", b"v", partition=0)
        assert (meta.partition, meta.offset) == (0, 0)
        assert got == [b"v"]
        # One attempt went to the stalled node; the metadata after it came from node 1.
        assert len(started[1].sent(ProduceRequest)) == 1
        assert len(started[0].sent(ProduceRequest)) == 1


def test_delivery_timeout_must_cover_one_attempt() -> None:
    with pytest.raises(ValueError, match="delivery_timeout_ms"):
        Producer("127.0.0.1:1", request_timeout_ms=1000, delivery_timeout_ms=500)
