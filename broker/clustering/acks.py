"""A produce with acks=all in cluster mode: answered once the in-sync replicas have it.

The batch is appended and durable here first (``broker.topic_handlers``); this waits for
the partition's high watermark to pass it, as Kafka's leader does, and says why in
each partition's answer when it did not.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any

from groupwire.broker.host import Peer
from groupwire.broker.replication.leader import LeaderStates
from groupwire.protocol.batches import MIN_BATCH_SIZE
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import PartitionProduceResponse, ProduceRequest, ProduceResponse
from groupwire.protocol.stored_batches import read_any_header


async def reply_when_replicated(leaders: LeaderStates, conn: Peer, cid: int,
                                request: ProduceRequest, response: ProduceResponse) -> None:
    """An acks=all answer: each appended batch waits for the high watermark to pass
    it, at most the request's ``timeout_ms`` (REQUEST_TIMED_OUT then; the records
    may still become visible)."""
    counts = {(t.name, p.index): read_any_header(p.records).offset_count
              for t in request.topic_data for p in t.partition_data
              if len(p.records) >= MIN_BATCH_SIZE}
    waits: list[tuple[PartitionProduceResponse, Coroutine[Any, Any, ErrorCode]]] = []
    for topic in response.responses:
        for part in topic.partition_responses:
            if part.error_code == ErrorCode.NONE:
                end = part.base_offset + counts.get((topic.name, part.index), 1)
                waits.append((part, leaders.acked((topic.name, part.index), end,
                                                  max(request.timeout_ms, 0))))
    codes = await asyncio.gather(*(w for _, w in waits))
    failed = {id(part): code for (part, _), code in zip(waits, codes, strict=True)
              if code != ErrorCode.NONE}
    if failed:
        response = dataclasses.replace(response, responses=[
            dataclasses.replace(topic, partition_responses=[
                part if id(part) not in failed else dataclasses.replace(
                    part, error_code=failed[id(part)], base_offset=-1,
                    error_message=ack_failure(failed[id(part)], request.timeout_ms))
                for part in topic.partition_responses])
            for topic in response.responses])
    conn.reply(cid, response)


def ack_failure(code: ErrorCode, timeout_ms: int) -> str:
    """Why an acks=all batch was not acknowledged, for the partition's error message."""
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return (f"the in-sync replicas did not all have the batch within timeout_ms "
                f"({timeout_ms}); it may still become visible")
    if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return "appended, but the ISR shrank below --min-insync-replicas before it was copied"
    return "this broker stopped leading the partition before the batch was copied"
