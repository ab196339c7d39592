"""A Kafka client's Heartbeat held by the door (``--kafka-heartbeat-hold-ms``), with raw
Kafka frames: a rebalance is told at once, and any other request on the connection
releases the hold, so nothing queues behind it (answers leave in request order).

The hold is set far beyond the reads' 10 s timeout: a heartbeat answered in these tests
was answered by the event the test caused, not by its hold running out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.protocol.consumer_data import Assignment, Subscription
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.consumer_protocol import (
    encode_kafka_assignment,
    encode_kafka_subscription,
)
from tests.integration.kafka_door.test_connection import RawKafka

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT, CREATE_TOPICS = 11, 14, 12, 8, 19
API_VERSIONS = 18
HOLD_MS = 120_000
SESSION_MS = 60_000
"""The coordinator holds at most half the session: 30 s, past every read's timeout."""


@pytest.fixture
async def broker(start_broker: Callable[..., Awaitable[Broker]]) -> Broker:
    return await start_broker(kafka_heartbeat_hold_ms=HOLD_MS,
                              group_initial_rebalance_delay_ms=0,
                              group_max_session_timeout_ms=SESSION_MS)


@pytest.fixture
async def raw(broker: Broker) -> AsyncIterator[Callable[[], Awaitable[RawKafka]]]:
    opened: list[RawKafka] = []

    async def open_one() -> RawKafka:
        client = await RawKafka.open(broker.port)
        opened.append(client)
        return client

    yield open_one
    for client in opened:
        client.writer.close()


def _join_body(member_id: str) -> dict[str, Any]:
    return {"group_id": "g", "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 10_000, "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range",
                           "metadata": encode_kafka_subscription(Subscription(["t"]))}]}


async def _stable_member(client: RawKafka) -> tuple[str, int]:
    """Join group ``g`` alone and sync: (member id, generation)."""
    joined = await client.call(JOIN_GROUP, 3, _join_body(""))  # below v4: no MEMBER_ID_REQUIRED
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    assignment = encode_kafka_assignment(Assignment([("t", [0, 1])]))
    synced = await client.call(SYNC_GROUP, 3, {
        "group_id": "g", "generation_id": generation, "member_id": member,
        "group_instance_id": None,
        "assignments": [{"member_id": member, "assignment": assignment}]})
    assert synced["error_code"] == 0, synced
    return member, generation


def _heartbeat(client: RawKafka, member: str, generation: int) -> int:
    return client.send(HEARTBEAT, 3, {"group_id": "g", "generation_id": generation,
                                      "member_id": member, "group_instance_id": None})


async def _topic(client: RawKafka) -> None:
    made = await client.call(CREATE_TOPICS, 4, {
        "topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    assert made["topics"][0]["error_code"] == 0, made


async def test_a_request_behind_a_held_heartbeat_releases_it_and_both_answer_in_order(
        raw: Callable[[], Awaitable[RawKafka]]) -> None:
    client = await raw()
    await _topic(client)
    member, generation = await _stable_member(client)
    beat = _heartbeat(client, member, generation)
    commit = client.send(OFFSET_COMMIT, 7, {
        "group_id": "g", "generation_id_or_member_epoch": generation, "member_id": member,
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    got, answer = await client.receive(HEARTBEAT, 3)
    assert (got, answer["error_code"]) == (beat, ErrorCode.NONE)
    got, answer = await client.receive(OFFSET_COMMIT, 7)
    assert got == commit
    assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    # the release's own answer is nobody's: the next request is the next one answered
    versions = await client.call(API_VERSIONS, 3, {"client_software_name": "raw",
                                                   "client_software_version": "1"})
    assert versions["error_code"] == ErrorCode.NONE


async def test_a_held_heartbeat_is_told_of_a_rebalance_when_it_starts(
        raw: Callable[[], Awaitable[RawKafka]]) -> None:
    first, second = await raw(), await raw()
    await _topic(first)
    member, generation = await _stable_member(first)
    beat = _heartbeat(first, member, generation)
    second.send(JOIN_GROUP, 3, _join_body(""))  # parked until the first rejoins
    got, answer = await first.receive(HEARTBEAT, 3)
    assert (got, answer["error_code"]) == (beat, ErrorCode.REBALANCE_IN_PROGRESS)


async def test_without_a_hold_a_heartbeat_is_answered_at_once(
        start_broker: Callable[..., Awaitable[Broker]]) -> None:
    quick = await start_broker(kafka_heartbeat_hold_ms=0, group_initial_rebalance_delay_ms=0,
                               group_max_session_timeout_ms=SESSION_MS)
    client = await RawKafka.open(quick.port)
    try:
        await _topic(client)
        member, generation = await _stable_member(client)
        beat = _heartbeat(client, member, generation)
        got, answer = await client.receive(HEARTBEAT, 3)
        assert (got, answer["error_code"]) == (beat, ErrorCode.NONE)
    finally:
        client.writer.close()
