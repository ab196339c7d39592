"""Deadlines are on the monotonic clock: an NTP step of the wall clock, forward or back,
expires no session early and stalls none (issue 24, item 3). The broker's wall clock is
a fake the test steps; members long-poll their heartbeats meanwhile (the broker paces
them, no sleeps), and what users read still carries the wall clock's time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from groupwire.broker.coordinator.parking import HEARTBEAT
from groupwire.broker.server import Broker, wall_clock_ms
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse
from tests.integration.conftest import fast_settings
from tests.integration.rawgroup import RawMember, create_topic, form_group

SESSION_MS = 300
POLL_MS = 60
PARKED_MS = 100
STEP_MS = 60_000


class SteppedWallClock:
    """The wall clock, plus whatever the test stepped it by."""

    def __init__(self) -> None:
        self.step_ms = 0

    def __call__(self) -> int:
        return wall_clock_ms() + self.step_ms


def _expirations(broker: Broker) -> float:
    return broker.metrics.registry.get_sample_value(
        "groupwire_member_expirations_total", {"kind": "session-expired"}) or 0.0


async def _parked(broker: Broker, count: int) -> None:
    """Until ``count`` long polls of group g are parked (the broker runs on this loop)."""
    assert broker.coordinator is not None
    view = broker.coordinator.view
    for _ in range(10_000):
        if len(view.parked(HEARTBEAT, "g")) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError("the long polls were not parked")


async def _heartbeat_through(members: list[RawMember], sessions: int) -> None:
    """Every member long-polls until ``sessions`` session timeouts have passed on the
    loop's clock, each heartbeat answered NONE: nobody expired, nothing rebalanced."""
    loop = asyncio.get_running_loop()
    until = loop.time() + sessions * SESSION_MS / 1000

    async def keep_alive(m: RawMember) -> None:
        while loop.time() < until:
            hb = await m.heartbeat(wait_ms=POLL_MS)
            assert hb.error_code == ErrorCode.NONE, (m.member_id, hb)
    await asyncio.gather(*(keep_alive(m) for m in members))


async def test_a_wall_clock_step_expires_nothing_and_stalls_nothing(tmp_path: Path) -> None:
    wall = SteppedWallClock()
    broker = Broker(fast_settings(tmp_path / "data"), clock=wall)
    await broker.start()
    try:
        conns = [await Connection.open("127.0.0.1", broker.port) for _ in range(2)]
        await create_topic(conns[0], "t", 2)
        a, b = (RawMember(c, "g", ["t"], session_timeout_ms=SESSION_MS) for c in conns)
        await form_group([a, b], "t", 2)

        assert _expirations(broker) == 0
        # forward, while both long polls are parked: their timers fire on the old clock
        # and, on the wall clock, would find every session due at once
        polls = [asyncio.ensure_future(m.heartbeat(wait_ms=PARKED_MS)) for m in (a, b)]
        await _parked(broker, 2)
        wall.step_ms = STEP_MS
        assert [p.error_code for p in await asyncio.gather(*polls)] == [ErrorCode.NONE] * 2
        await _heartbeat_through([a, b], sessions=2)
        assert _expirations(broker) == 0

        # b goes silent, then the clock steps back past where it started: b's session
        # still ends on time (on the wall clock it would wait two minutes more)
        poll = asyncio.ensure_future(b.heartbeat(wait_ms=PARKED_MS))
        await _parked(broker, 1)
        wall.step_ms = -STEP_MS
        assert (await poll).error_code == ErrorCode.NONE

        async def until_rebalance() -> None:
            while (hb := await a.heartbeat(wait_ms=POLL_MS)).error_code == ErrorCode.NONE:
                pass
            assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS, hb
        await asyncio.wait_for(until_rebalance(), 10 * SESSION_MS / 1000)
        assert _expirations(broker) == 1  # b's, and only once it went silent

        # what users read is on the wall clock as stepped: a's last heartbeat
        described = await conns[0].send(DescribeGroupsRequest(groups=["g"]),
                                        response_type=DescribeGroupsResponse)
        (member,) = described.groups[0].members
        assert member.last_heartbeat_ms is not None
        assert abs(member.last_heartbeat_ms - wall()) < STEP_MS // 2
    finally:
        for c in conns:
            await c.close()
        await broker.close()
