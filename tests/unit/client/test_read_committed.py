"""read_committed and transaction markers on the consumer's side, with hand-built batches:
records of aborted transactions skipped per producer until its abort marker, committed
ones and other producers' kept, markers never handed out at either isolation level, and
the position moved past a marker that ends the fetched records (so that the consumer
does not fetch it again and again)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from groupwire import Consumer
from groupwire.client.errors import IllegalStateError
from groupwire.client.fetcher import Fetcher, visible_records
from groupwire.client.subscription import SubscriptionState
from groupwire.client.transactions import ConsumerGroupMetadata
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import (
    BatchRecord,
    decode_batches_partial,
    encode_batch,
    encode_control_batch,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AbortedTransaction,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

TP = TopicPartition("t", 0)
P1, P2, P3 = 11, 22, 33


def txn(offset: int, pid: int, *values: bytes, transactional: bool = True) -> bytes:
    """A producer's batch of ``values`` at ``offset`` (transactional unless told)."""
    return encode_batch([BatchRecord(v, None, (), 1) for v in values], offset,
                        producer_id=pid, producer_epoch=0, base_sequence=offset,
                        transactional=transactional)


def marker(offset: int, pid: int, *, commit: bool) -> bytes:
    return encode_control_batch(pid, 0, commit, 0, 1, base_offset=offset)


def plain(offset: int, *values: bytes) -> bytes:
    return encode_batch([BatchRecord(v, None, (), 1) for v in values], offset)


INTERLEAVED = b"".join([
    txn(0, P1, b"a1", b"a2"),       # P1's transaction, aborted at 6
    txn(2, P2, b"b1"),              # P2's, committed at 5
    plain(3, b"c1"),                # no producer at all
    txn(4, P1, b"a3"),
    marker(5, P2, commit=True),
    marker(6, P1, commit=False),
    txn(7, P3, b"d1", transactional=False),  # idempotent, outside any transaction
    txn(8, P1, b"a4"),              # P1's next transaction, committed at 9
    marker(9, P1, commit=True),
])
ABORTED_P1 = [AbortedTransaction(producer_id=P1, first_offset=0)]


def _values(data: bytes, *, read_committed: bool, aborted: list[AbortedTransaction] | None,
            min_offset: int = 0) -> tuple[list[tuple[int, bytes | None]], int]:
    batches, bad = decode_batches_partial(data, min_offset)
    assert bad is None
    records, end = visible_records(batches, read_committed=read_committed, aborted=aborted)
    return [(r.offset, r.value) for r in records], end


def test_read_committed_skips_the_aborted_producer_until_its_abort_marker() -> None:
    seen, end = _values(INTERLEAVED, read_committed=True, aborted=ABORTED_P1)
    assert seen == [(2, b"b1"), (3, b"c1"), (7, b"d1"), (8, b"a4")]
    assert end == 10


def test_read_uncommitted_keeps_every_record_but_never_a_marker() -> None:
    seen, end = _values(INTERLEAVED, read_committed=False, aborted=ABORTED_P1)
    assert seen == [(0, b"a1"), (1, b"a2"), (2, b"b1"), (3, b"c1"), (4, b"a3"), (7, b"d1"),
                    (8, b"a4")]
    assert end == 10


def test_read_committed_from_the_middle_of_an_aborted_batch() -> None:
    seen, _ = _values(INTERLEAVED, read_committed=True, aborted=ABORTED_P1, min_offset=1)
    assert seen == [(2, b"b1"), (3, b"c1"), (7, b"d1"), (8, b"a4")]


def test_each_aborted_transaction_is_applied_from_its_first_offset() -> None:
    log = b"".join([
        txn(0, P2, b"kept"), marker(1, P2, commit=True),
        txn(2, P1, b"x1"), marker(3, P1, commit=False),
        txn(4, P2, b"gone"), txn(5, P1, b"x2"), marker(6, P1, commit=False),
        marker(7, P2, commit=False), txn(8, P2, b"later"),
    ])
    aborted = [AbortedTransaction(producer_id=P1, first_offset=5),  # listed out of order
               AbortedTransaction(producer_id=P2, first_offset=4),
               AbortedTransaction(producer_id=P1, first_offset=2)]
    seen, end = _values(log, read_committed=True, aborted=aborted)
    assert seen == [(0, b"kept"), (8, b"later")]
    assert end == 9
    # an aborted transaction the broker did not list is not guessed at
    seen, _ = _values(log, read_committed=True, aborted=aborted[1:])
    assert (5, b"x2") in seen and (2, b"x1") not in seen


def test_without_aborted_transactions_read_committed_keeps_every_record() -> None:
    seen, _ = _values(INTERLEAVED, read_committed=True, aborted=None)
    assert [o for o, _ in seen] == [0, 1, 2, 3, 4, 7, 8]


def test_a_fault_stops_the_end_at_the_last_whole_batch() -> None:
    log = txn(0, P1, b"a") + marker(1, P1, commit=True) + plain(2, b"b")
    batches, bad = decode_batches_partial(log[:-2])
    assert bad is not None and bad.offset == 2
    records, end = visible_records(batches, read_committed=True, aborted=[], stop=bad.offset)
    assert [r.offset for r in records] == [0] and end == 2


# --- through the fetcher ------------------------------------------------------------------


class FakeLog:
    """Answers each Fetch with the batches at or after its offset (whole batches)."""

    def __init__(self, *batches: tuple[int, bytes], last_stable: int = -1,
                 aborted: list[AbortedTransaction] | None = None) -> None:
        self.batches = list(batches)
        self.last_stable = last_stable
        self.aborted = aborted
        self.requests: list[FetchRequest] = []

    async def send(self, request: Any) -> FetchResponse:
        assert isinstance(request, FetchRequest)
        self.requests.append(request)
        offset = request.topics[0].partitions[0].fetch_offset
        data = b"".join(b for end, b in self.batches if end > offset)
        end = max((e for e, _ in self.batches), default=0)
        return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=[
            FetchPartitionData(partition_index=0, high_watermark=end,
                               last_stable_offset=self.last_stable,
                               aborted_transactions=self.aborted, records=data)])])


async def _fetch_once(fetcher: Fetcher) -> None:
    done = asyncio.Event()
    fetcher.on_done = done.set
    fetcher.maybe_fetch(None)
    async with asyncio.timeout(5):
        await done.wait()
    task = fetcher.cancel()
    assert task is not None and task.exception() is None


def _fetcher(log: FakeLog, isolation_level: str = "read_uncommitted",
             at: int = 0) -> tuple[Fetcher, SubscriptionState]:
    subs = SubscriptionState()
    subs.set_assignment([TP])
    subs.partitions[TP].seek(at)
    return Fetcher(subs, log.send, auto_offset_reset="earliest", fetch_max_wait_ms=10,
                   isolation_level=isolation_level), subs


async def test_read_committed_asks_for_stable_records_and_drops_aborted_ones() -> None:
    log = FakeLog((10, INTERLEAVED), last_stable=10, aborted=ABORTED_P1)
    fetcher, subs = _fetcher(log, "read_committed")
    await _fetch_once(fetcher)
    assert log.requests[0].isolation_level == 1
    st = subs.partitions[TP]
    assert [r.value for r in st.buffer] == [b"b1", b"c1", b"d1", b"a4"]
    assert fetcher.last_stable[TP] == 10
    got = fetcher.drain(100)
    assert [r.offset for r in got[TP]] == [2, 3, 7, 8]
    assert st.position == 10 and st.fetch_offset == 10  # past the commit marker at 9
    await _fetch_once(fetcher)
    assert log.requests[1].topics[0].partitions[0].fetch_offset == 10


async def test_read_uncommitted_is_the_default_and_asks_for_everything() -> None:
    log = FakeLog((10, INTERLEAVED))
    fetcher, subs = _fetcher(log)
    assert fetcher.isolation_level == "read_uncommitted"
    await _fetch_once(fetcher)
    assert log.requests[0].isolation_level == 0
    assert [r.offset for r in subs.partitions[TP].buffer] == [0, 1, 2, 3, 4, 7, 8]


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
async def test_a_marker_ending_the_log_moves_the_position_past_it(level: str) -> None:
    """The records before it are handed out, then the position is the marker's offset
    + 1; a fetch that finds only the marker moves the position there at once, and the
    next fetch asks from after it rather than for the marker again."""
    log = FakeLog((2, txn(0, P1, b"a", b"b")), (3, marker(2, P1, commit=True)),
                  last_stable=3)
    fetcher, subs = _fetcher(log, level)
    st = subs.partitions[TP]
    await _fetch_once(fetcher)
    assert [r.offset for r in fetcher.drain(1)[TP]] == [0]
    assert st.position == 1  # a record still buffered: not yet past the marker
    assert [r.offset for r in fetcher.drain(1)[TP]] == [1]
    assert st.position == 3 and st.fetch_offset == 3

    only, subs = _fetcher(log, level, at=2)
    st = subs.partitions[TP]
    await _fetch_once(only)
    assert not st.buffer and st.position == 3 and st.fetch_offset == 3
    assert only.drain(10) == {}
    await _fetch_once(only)
    assert [r.topics[0].partitions[0].fetch_offset for r in log.requests[-2:]] == [2, 3]


async def test_an_aborted_transaction_at_the_end_moves_the_position_past_its_marker() -> None:
    log = FakeLog((1, plain(0, b"ok")), (3, txn(1, P1, b"x", b"y")),
                  (4, marker(3, P1, commit=False)), last_stable=4,
                  aborted=[AbortedTransaction(producer_id=P1, first_offset=1)])
    fetcher, subs = _fetcher(log, "read_committed")
    await _fetch_once(fetcher)
    assert [r.value for r in fetcher.drain(10)[TP]] == [b"ok"]
    assert subs.partitions[TP].position == 4


async def test_a_committed_offset_a_transaction_holds_pending_is_asked_again_not_reset(
        ) -> None:
    """KIP-447: while a transaction's offsets for a partition are pending, the group's
    coordinator answers UNSTABLE_OFFSET_COMMIT; the partition waits for its position
    (the next poll asks again) instead of being reset by auto_offset_reset."""
    unstable, stable = TopicPartition("t", 0), TopicPartition("t", 1)
    asked: list[Any] = []

    async def send(request: Any) -> OffsetFetchResponse:
        asked.append(request)
        assert isinstance(request, OffsetFetchRequest), "nothing is reset: no ListOffsets"
        first = ErrorCode.UNSTABLE_OFFSET_COMMIT if len(asked) == 1 else ErrorCode.NONE
        return OffsetFetchResponse(topics=[OffsetFetchResponseTopic(name="t", partitions=[
            OffsetFetchResponsePartition(partition_index=0, error_code=first,
                                         committed_offset=-1 if first else 9),
            OffsetFetchResponsePartition(partition_index=1, committed_offset=5)])])

    subs = SubscriptionState()
    subs.set_assignment([unstable, stable])
    fetcher = Fetcher(subs, send, auto_offset_reset="earliest", fetch_max_wait_ms=10,
                      isolation_level="read_committed")
    await fetcher.update_positions("g")
    assert subs.partitions[stable].position == 5
    assert subs.partitions[unstable].position is None
    assert subs.missing_positions() == [unstable]
    await fetcher.update_positions("g")  # the transaction ended meanwhile
    assert subs.partitions[unstable].position == 9 and len(asked) == 2


def test_the_isolation_level_is_checked() -> None:
    with pytest.raises(ValueError, match="isolation_level"):
        Fetcher(SubscriptionState(), FakeLog().send, auto_offset_reset="earliest",
                fetch_max_wait_ms=10, isolation_level="serializable")
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(isolation_level="READ_COMMITTED")
    assert Consumer().isolation_level == "read_uncommitted"
    assert Consumer(isolation_level="read_committed").isolation_level == "read_committed"


def test_lag_under_read_committed_counts_to_the_last_stable_offset() -> None:
    for level, lag, stable in (("read_committed", 2, 7), ("read_uncommitted", 5, 7)):
        c = Consumer(isolation_level=level)
        c.assign([TP])
        c.seek(TP, 5)
        c._subs.state(TP).highwater = 10
        c._fetcher.last_stable[TP] = 7
        assert c.lag(TP) == lag and c.last_stable_offset(TP) == stable
    c = Consumer()
    c.assign([TP])
    c._subs.state(TP).highwater = 10
    assert c.last_stable_offset(TP) == 10  # a broker that sends none: the high watermark


def test_group_metadata_names_the_member_and_its_generation() -> None:
    c = Consumer(group_id="g", group_instance_id="i-1")
    assert c.group_metadata() == ConsumerGroupMetadata("g", -1, "", "i-1")
    c._m.member_id, c._m.generation_id = "m-7", 4
    assert c.group_metadata() == ConsumerGroupMetadata("g", 4, "m-7", "i-1")
    with pytest.raises(IllegalStateError):
        Consumer().group_metadata()
