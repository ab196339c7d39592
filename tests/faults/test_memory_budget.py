"""Partial frames across many connections stay within --queued-max-request-bytes.

Twenty connections each announce a frame of about 250 KiB and send 20 KiB of it, under a
budget of 1 MiB: the first ones have their frames reserved, the next wait unread with the
bytes they sent reserved, and the newest, whose bytes no longer fit, are closed. A group
whose members connected earlier keeps heartbeating and stays Stable throughout, and once
a frame completes the oldest waiter is read again.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import msgpack

from groupwire.broker.budget import DEFAULT_ALLOWANCE
from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse
from tests.integration.rawgroup import RawMember, create_topic, form_group

from .conftest import StartBroker

BUDGET = 1024 * 1024
MAX_FRAME = 256 * 1024
SENT = 20 * 1024
ATTACKERS = 20
API_VERSIONS = 18


def _padded_api_versions(correlation_id: int, size: int) -> bytes:
    """A whole ApiVersions frame of about ``size`` bytes (an unknown key pads it)."""
    body = {"client_software_name": "x", "pad": b"p" * size}
    payload = msgpack.packb([API_VERSIONS, 0, correlation_id, "attacker", body],
                            use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


async def _read_answer(reader: asyncio.StreamReader) -> list[object]:
    (n,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 10))
    answer = msgpack.unpackb(await asyncio.wait_for(reader.readexactly(n), 10), raw=False)
    assert isinstance(answer, list)
    return answer


async def _closed_by_broker(reader: asyncio.StreamReader) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(1), 10)
    except ConnectionResetError:
        return True
    return data == b""


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Let the broker, on this same event loop, get to a state (bounded, not timed)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def _sample(broker: Broker, name: str, **labels: str) -> float:
    return broker.metrics.registry.get_sample_value(name, labels) or 0.0


async def _group_is_stable(members: list[RawMember], conn: Connection) -> None:
    for m in members:
        assert (await m.heartbeat()).error_code == ErrorCode.NONE
    described = await conn.send(DescribeGroupsRequest(groups=["g"]),
                                response_type=DescribeGroupsResponse)
    assert described.groups[0].group_state == "Stable"


async def test_partial_frames_stay_within_the_budget_and_the_newest_are_closed(
        start_broker: StartBroker) -> None:
    broker = await start_broker(queued_max_request_bytes=BUDGET, max_frame_bytes=MAX_FRAME)
    established = [await Connection.open("127.0.0.1", broker.port) for _ in range(2)]
    await create_topic(established[0], "t", 2)
    members = [RawMember(c, "g", ["t"]) for c in established]
    await form_group(members, "t", 2)

    frame = _padded_api_versions(7, MAX_FRAME - 6 * 1024)
    assert len(frame) <= MAX_FRAME + 4
    want = len(frame) - DEFAULT_ALLOWANCE  # reserved for a frame once its header is in
    need = 4 + SENT - DEFAULT_ALLOWANCE  # reserved for the bytes sent, when it must wait
    readers = BUDGET // want
    waiters = (BUDGET - readers * want) // need
    kept = readers + waiters
    assert readers >= 2 and waiters >= 2 and kept < ATTACKERS  # the scenario's premise

    def memory_closes() -> int:
        return int(_sample(broker, "groupwire_connections_closed_total",
                           reason="memory-pressure"))

    attackers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for i in range(ATTACKERS):
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(frame[:4 + SENT])
        attackers.append((reader, writer))
        # one at a time, so each is the newest when it asks
        await _until(lambda i=i: len(broker.memory.owners()) + memory_closes() == i + 1,
                     f"attacker {i} seen by the budget")
        assert broker.memory.reserved <= BUDGET
        for m in members:  # heartbeats of the established group are answered meanwhile
            assert (await m.heartbeat()).error_code == ErrorCode.NONE

    assert len(broker.memory.owners()) == kept
    assert len(broker.memory.waiting) == waiters
    assert memory_closes() == ATTACKERS - kept
    for reader, _ in attackers[kept:]:  # the newest offenders are the ones closed
        assert await _closed_by_broker(reader)
    assert broker.memory.peak <= BUDGET
    assert _sample(broker, "groupwire_request_memory_reserved_bytes") == broker.memory.reserved
    assert _sample(broker, "groupwire_request_memory_paused_total") == waiters
    await _group_is_stable(members, established[0])

    # the oldest waiter sends the rest of its frame, unread until memory frees; the
    # oldest reader completes its frame, is answered, and the waiter is read and answered
    waiter_r, waiter_w = attackers[readers]
    waiter_w.write(frame[4 + SENT:])
    reader_r, reader_w = attackers[0]
    reader_w.write(frame[4 + SENT:])
    assert (await _read_answer(reader_r))[0] == 7
    assert (await _read_answer(waiter_r))[0] == 7
    assert broker.memory.peak <= BUDGET
    await _group_is_stable(members, established[0])

    for _, writer in attackers:
        writer.close()
    await _until(lambda: broker.memory.reserved == 0 and not broker.memory.owners(),
                 "every reservation released")
    for conn in established:
        await conn.close()
