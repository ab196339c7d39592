"""How the fetcher sorts its failures, as aiokafka does: retriable ones (a lost
connection, a retriable error code, the group moving on) are retried and logged, never
raised; anything else (an answer that cannot be decoded, an error code no retry mends) is
handed to the next poll once; an exception no fetch should raise ends the task."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from groupwire.client.errors import (
    BrokerResponseError,
    ConnectionClosedError,
    UnsupportedVersionError,
)
from groupwire.client.fetcher import Fetcher
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import BodyError, ErrorCode
from groupwire.protocol.messages import FetchPartitionData, FetchResponse, FetchTopicResponse

TP = TopicPartition("t", 0)


class Answers:
    """A ``send`` that answers with, or raises, one scripted outcome per Fetch."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.sent = 0

    async def __call__(self, _request: Any) -> Any:
        self.sent += 1
        outcome = self.outcomes.pop(0) if self.outcomes else FetchResponse()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


async def fetch_once(send: Answers) -> tuple[Fetcher, asyncio.Task[None]]:
    """A fetcher of ``TP`` at offset 0 after one Fetch through ``send`` has ended."""
    subs = SubscriptionState()
    subs.set_assignment([TP])
    subs.partitions[TP].seek(0)
    tasks: list[asyncio.Task[None]] = []

    def spawn(coro: Any, name: str) -> asyncio.Task[None]:
        tasks.append(asyncio.get_running_loop().create_task(coro, name=name))
        return tasks[-1]

    fetcher = Fetcher(subs, send, auto_offset_reset="earliest", fetch_max_wait_ms=500,
                      retry_backoff_ms=1, spawn=spawn)
    fetcher.maybe_fetch(None)
    (task,) = tasks
    await asyncio.wait({task})
    return fetcher, task


def partition_error(code: int) -> FetchResponse:
    return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=[
        FetchPartitionData(partition_index=0, error_code=code, high_watermark=0)])])


async def test_an_answer_that_cannot_be_decoded_is_raised_once(
        caplog: pytest.LogCaptureFixture) -> None:
    bad = BodyError("FetchResponse: field 'responses' is not a list")
    with caplog.at_level(logging.DEBUG, "groupwire.consumer.fetcher"):
        fetcher, task = await fetch_once(Answers(bad))
    assert task.exception() is None
    assert fetcher.take_error() is bad
    assert fetcher.take_error() is None  # once: the next poll fetches again
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "field 'responses'" in caplog.text


@pytest.mark.parametrize("failure", [
    ConnectionClosedError("connection to 127.0.0.1:9 lost"),
    TimeoutError("no answer from 127.0.0.1:9 within 30 s"),
    BrokerResponseError("busy", code=ErrorCode.NOT_LEADER_OR_FOLLOWER),
], ids=["connection-lost", "timeout", "not-leader"])
async def test_a_retriable_failure_is_retried_and_logged_not_raised(
        failure: Exception, caplog: pytest.LogCaptureFixture) -> None:
    send = Answers(failure, failure)
    with caplog.at_level(logging.DEBUG, "groupwire.consumer.fetcher"):
        fetcher, _ = await fetch_once(send)
        assert fetcher.take_error() is None
        done = asyncio.Event()
        fetcher.on_done = done.set
        fetcher.maybe_fetch(None)  # the next poll: fetched again
        await done.wait()
    assert send.sent == 2 and fetcher.take_error() is None
    # the first of the streak at info (someone watching sees it), the rest at debug
    assert [r.levelname for r in caplog.records] == ["INFO", "DEBUG"]
    assert "(retrying)" in caplog.records[0].getMessage()


async def test_a_request_level_error_no_retry_mends_is_raised() -> None:
    fetcher, _ = await fetch_once(Answers(FetchResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, error_message="Fetch v9")))
    err = fetcher.take_error()
    assert isinstance(err, UnsupportedVersionError) and "Fetch v9" in str(err)


async def test_the_group_moving_on_is_left_to_the_membership() -> None:
    fetcher, _ = await fetch_once(Answers(FetchResponse(
        error_code=ErrorCode.UNKNOWN_MEMBER_ID)))
    assert fetcher.take_error() is None


async def test_a_partition_error_no_retry_mends_stops_it_with_that_error() -> None:
    fetcher, _ = await fetch_once(Answers(partition_error(ErrorCode.UNSUPPORTED_VERSION)))
    err = fetcher.record_error(set())
    assert isinstance(err, UnsupportedVersionError)
    assert fetcher.record_error(set()) is None  # raised once; the next poll fetches again


async def test_a_retriable_partition_error_is_fetched_again() -> None:
    fetcher, _ = await fetch_once(Answers(partition_error(ErrorCode.REQUEST_TIMED_OUT)))
    assert fetcher.record_error(set()) is None and fetcher.take_error() is None


async def test_an_exception_no_fetch_should_raise_ends_the_task() -> None:
    """A bug is not retried in silence: the task ends with it, and the consumer's task
    supervisor raises it from every poll after."""
    fetcher, task = await fetch_once(Answers(KeyError("responses")))
    assert isinstance(task.exception(), KeyError)
    assert fetcher.take_error() is None
