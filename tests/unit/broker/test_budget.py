"""The request memory budget: reserve, release, and who waits or is closed, in which order.

Owners are connection ids (older = smaller). Sizes are in KiB over an allowance of 1 KiB,
so a request of ``held``/``wanted`` reserves ``held - 1``/``wanted - 1`` KiB.
"""

from __future__ import annotations

import random
import struct

import pytest

from groupwire.broker.budget import Decision, MemoryBudget, Verdict
from groupwire.broker.config import BrokerSettings, SettingsError, parse_settings
from groupwire.protocol.framing import FrameDecoder

K = 1024
READ, WAIT, CLOSE = Verdict.READ, Verdict.WAIT, Verdict.CLOSE


def budget(total_k: int = 100) -> MemoryBudget:
    return MemoryBudget(total_k * K, allowance=1 * K)


def ask(b: MemoryBudget, owner: int, held_k: float, wanted_k: float) -> Decision:
    return b.request(owner, int(held_k * K), int(wanted_k * K))


def test_small_frames_use_the_allowance_and_reserve_nothing() -> None:
    b = budget()
    assert ask(b, 1, 0.5, 1) == Decision(READ)
    assert b.reserved == 0 and b.owners() == ()


def test_a_frame_reserves_its_announced_size_and_gives_it_back() -> None:
    b = budget()
    assert ask(b, 1, 0.1, 41) == Decision(READ)  # header in: the whole frame is reserved
    assert b.held_by(1) == 40 * K
    assert ask(b, 1, 20, 41) == Decision(READ)  # more of the same frame: nothing changes
    assert b.reserved == 40 * K
    assert ask(b, 1, 0, 0) == Decision(READ)  # the frame completed
    assert b.reserved == 0 and b.owners() == ()


def test_a_frame_that_does_not_fit_waits_with_the_bytes_in_hand_reserved() -> None:
    b = budget()
    assert ask(b, 1, 1, 81).verdict is READ  # 80 reserved
    assert ask(b, 2, 11, 51) == Decision(WAIT)  # 50 do not fit; the 10 in hand do
    assert b.held_by(2) == 10 * K and b.waiting == (2,)
    assert b.reserved <= b.total
    # the first frame completes: the waiter gets its whole frame and reads on
    assert ask(b, 1, 0, 0) == Decision(READ, resume=(2,))
    assert b.held_by(2) == 50 * K and b.waiting == ()


def test_bytes_in_hand_that_do_not_fit_close_the_newest_waiters_first() -> None:
    b = budget()
    ask(b, 1, 1, 71)  # 70 reading
    assert ask(b, 5, 11, 61).verdict is WAIT  # 10 in hand
    assert ask(b, 6, 11, 61).verdict is WAIT  # 10 in hand
    assert ask(b, 7, 6, 61).verdict is WAIT  # 5 in hand; 5 free
    # an older connection brings 15 in hand: 5 free, so waiters 7 then 6 are closed
    decision = ask(b, 3, 16, 31)
    assert decision == Decision(WAIT, close=(7, 6))
    assert b.waiting == (3, 5) and b.owners() == (1, 5, 3)
    assert b.peak <= b.total


def test_the_newest_asker_is_closed_itself_when_only_older_ones_hold_memory() -> None:
    b = budget()
    ask(b, 1, 1, 91)  # 90 reading
    assert ask(b, 2, 6, 31).verdict is WAIT  # 5 in hand
    assert ask(b, 3, 11, 31) == Decision(CLOSE)  # 10 in hand, 5 free, nothing newer
    assert b.owners() == (1, 2) and b.reserved == 95 * K
    assert ask(b, 4, 5, 31) == Decision(WAIT)  # 4 in hand fit the 5 left
    assert b.reserved == 99 * K


def test_waiters_are_served_oldest_first_and_none_overtakes() -> None:
    b = budget()
    ask(b, 1, 1, 91)  # 90 reading
    assert ask(b, 9, 1, 6).verdict is READ  # 5 of the 10 free
    assert ask(b, 4, 1, 31).verdict is WAIT  # 30 do not fit
    assert b.held_by(9) == 5 * K and b.waiting == (4,)
    assert ask(b, 8, 1, 6) == Decision(WAIT)  # 8 may not overtake the older 4
    assert b.waiting == (4, 8)
    assert ask(b, 1, 0, 0) == Decision(READ, resume=(4, 8))  # oldest first


def test_an_established_connection_goes_before_newcomers() -> None:
    b = budget()
    ask(b, 10, 1, 91)
    assert ask(b, 20, 1, 61).verdict is WAIT
    assert ask(b, 2, 1, 51).verdict is WAIT  # older: ahead of 20
    assert b.waiting == (2, 20)
    assert b.release(10) == Decision(READ, resume=(2,))
    assert b.waiting == (20,)


def test_waiters_stuck_behind_the_oldest_are_closed_only_when_readers_cannot_free_enough(
        ) -> None:
    b = budget()
    ask(b, 1, 1, 51)  # 50 reading
    assert ask(b, 2, 11, 61).verdict is WAIT  # 10 in hand, 50 more: 1 can free them
    assert ask(b, 3, 11, 101).verdict is WAIT  # 10 in hand, wants the whole budget
    assert ask(b, 4, 11, 21).verdict is WAIT  # 10 in hand
    # 1 finishes: 2 gets its frame; then 3 needs 90 more, and 20 free plus 2's 60 are
    # short by 10: only the newer waiter 4's memory can make it up, so 4 is closed
    assert b.release(1) == Decision(READ, resume=(2,), close=(4,))
    assert b.waiting == (3,) and b.reserved == 70 * K


def test_a_newcomer_that_would_block_the_oldest_waiter_forever_is_closed() -> None:
    b = budget()
    ask(b, 1, 1, 51)  # 50 reading
    assert ask(b, 2, 21, 101).verdict is WAIT  # 20 in hand, wants the whole budget
    # 3's 10 in hand fit, but then 2 could never have its 100: 3 is the newest offender
    assert ask(b, 3, 11, 31) == Decision(CLOSE)
    assert b.owners() == (1, 2)


def test_the_oldest_waits_for_readers_rather_than_closing_anyone() -> None:
    b = budget()
    ask(b, 1, 1, 61)  # 60 reading
    assert ask(b, 2, 11, 61).verdict is WAIT  # 10 in hand: needs 50 more, 30 free
    assert ask(b, 3, 11, 21).verdict is WAIT  # 10 in hand: 20 free; 1 can free 60
    assert b.waiting == (2, 3) and b.owners() == (1, 2, 3)


def test_a_frame_larger_than_the_whole_budget_is_refused() -> None:
    b = budget()
    assert ask(b, 1, 1, 102) == Decision(CLOSE)
    assert b.owners() == () and b.reserved == 0


def test_a_smaller_next_frame_gives_back_the_difference_and_serves_waiters() -> None:
    b = budget()
    ask(b, 1, 1, 91)
    assert ask(b, 2, 1, 21).verdict is WAIT
    assert ask(b, 1, 2, 11) == Decision(READ, resume=(2,))  # next frame: 10
    assert b.reserved == 30 * K


def test_release_of_an_unknown_owner_changes_nothing() -> None:
    b = budget()
    assert b.release(7) == Decision(READ)


@pytest.mark.parametrize("seed", range(20))
def test_random_schedules_never_reserve_more_than_the_budget(seed: int) -> None:
    """Random requests and releases: the reservation stays within the budget, every
    owner's bytes in hand are covered, and only waiters are ever closed by others."""
    rng = random.Random(seed)
    b = budget(64)
    alive: set[int] = set()
    next_id = 1
    for _ in range(400):
        waiting_before = set(b.waiting)
        if alive and rng.random() < 0.3:
            victim = rng.choice(sorted(alive))
            decision = b.release(victim)
            alive.discard(victim)
        else:
            if alive and rng.random() < 0.5:
                owner = rng.choice(sorted(alive))
            else:
                owner, next_id = next_id, next_id + 1
            wanted = rng.randint(0, 64 * K)
            held = rng.randint(0, wanted)
            decision = b.request(owner, held, wanted)
            if decision.verdict is CLOSE:
                alive.discard(owner)
            else:
                alive.add(owner)
                assert b.held_by(owner) >= max(0, held - b.allowance)
        for closed in decision.close:
            assert closed in waiting_before and closed not in b.owners()
            alive.discard(closed)
        assert 0 <= b.reserved <= b.total
        assert b.reserved == sum(b.held_by(o) for o in b.owners())
        assert list(b.waiting) == sorted(b.waiting)
    assert b.peak <= b.total


def test_the_decoder_tells_the_size_of_the_frame_it_is_reading() -> None:
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    assert decoder.frame_bytes == 0
    decoder.feed(b"\x00\x00")
    assert decoder.frame_bytes == 2  # header incomplete: what is held
    decoder.feed(b"\x10\x00" + b"x" * 10)
    assert decoder.frame_bytes == 4 + 0x1000 and decoder.buffered == 14
    decoder.feed(b"y" * (0x1000 - 10) + struct.pack(">I", 300) + b"z")
    assert decoder.frame_bytes == 304 and decoder.buffered == 5


def test_the_budget_is_a_broker_setting_of_at_least_one_frame() -> None:
    assert BrokerSettings().queued_max_request_bytes == 256 * 1024 * 1024
    assert parse_settings(["--queued-max-request-bytes", "1048576",
                           "--max-frame-bytes", "262144"]).queued_max_request_bytes == K * K
    env = {"GROUPWIRE_QUEUED_MAX_REQUEST_BYTES": str(32 * K * K)}
    assert parse_settings([], env).queued_max_request_bytes == 32 * K * K
    with pytest.raises(SettingsError, match="--queued-max-request-bytes: must be at least"):
        parse_settings(["--queued-max-request-bytes", str(K * K)])  # frames of 16 MiB
