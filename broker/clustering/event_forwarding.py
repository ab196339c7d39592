"""Group events in a cluster: ``__group_events`` is one replicated partition, written by
its leader only, while every coordinator has events to add. The coordinator's broker
appends them itself when it leads that partition, and otherwise forwards them, in order,
to the leader as an internal Produce (acks=1). Events never delay a reply: the queue is
bounded and, while no leader takes them, the oldest go first (counted and logged),
as a crash may lose unwritten events in single-broker mode too (docs/protocol.md §9).

The forwarding loop is a supervised service (``group-events-forwarder``): a crash is
logged, counted and the loop started again on a new connection, the queue kept."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.peer import PeerAuthError, PeerDialer, PeerError, PeerLink
from groupwire.broker.storage.metadata import EVENTS_TOPIC
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

log = get_logger("groupwire.cluster")

Event = tuple[bytes, bytes, int]
"""``(key, value, timestamp_ms)`` as ``__group_events`` stores it."""

MAX_QUEUED = 10_000
"""Events held while no leader takes them; beyond, the oldest are dropped."""
BATCH = 500
"""Events forwarded in one Produce."""
BACKOFF_S = 0.2
REQUEST_TIMEOUT_S = 5.0


class EventForwarder:
    def __init__(self, node_id: int, image: Callable[[], ClusterImage],
                 leads: Callable[[], bool], append_here: Callable[[list[Event]], bool],
                 dialer: PeerDialer | None = None,
                 supervisor: Supervisor | None = None) -> None:
        """``leads``: this broker leads ``__group_events``-0 now; ``append_here``: append
        events to it locally (False if that failed)."""
        self.node_id = node_id
        self._image = image
        self._leads = leads
        self._append_here = append_here
        self._queue: deque[Event] = deque()
        self.dropped = 0
        self._wake = asyncio.Event()
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._service: Service | None = None
        self._link = PeerLink(f"groupwire-broker-{node_id}", REQUEST_TIMEOUT_S, dialer)

    def submit(self, events: list[Event]) -> None:
        if self._leads() and not self._queue and self._append_here(events):
            return
        self._queue.extend(events)
        over = len(self._queue) - MAX_QUEUED
        if over > 0:
            for _ in range(over):
                self._queue.popleft()
            self.dropped += over
            log.warning("group_events_dropped", events=over,
                        why="no leader of __group_events took them")
        self._wake.set()

    @property
    def service(self) -> Service | None:
        return self._service

    def start(self) -> None:
        self._service = self._supervisor.spawn(f"group-events-forwarder-{self.node_id}",
                                               self._run, kind="group-events-forwarder")

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None
        await self._link.close()

    async def _run(self) -> None:
        # A restart after a crash may follow a request left half-way: start afresh.
        await self._link.close()
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not await self._forward():
                await asyncio.sleep(BACKOFF_S)

    async def _forward(self) -> bool:
        """Send the queue's head to wherever the leader is; False: try again later."""
        chunk = [self._queue[i] for i in range(min(BATCH, len(self._queue)))]
        if self._leads():
            if not self._append_here(chunk):
                return False
            self._drop_head(len(chunk))
            return True
        image = self._image()
        state = image.partitions.get((EVENTS_TOPIC, 0))
        leader = None if state is None else image.brokers.get(state.leader)
        if leader is None:
            return False
        try:
            conn = await self._link.to(leader)
            batch = encode_batch([BatchRecord(value=v, key=k, timestamp_ms=ts)
                                  for k, v, ts in chunk])
            answer = await conn.request(ProduceRequest(
                acks=1, internal=True, topic_data=[TopicProduceData(
                    name=EVENTS_TOPIC, partition_data=[PartitionProduceData(
                        index=0, records=batch)])]),
                ProduceResponse, timeout_s=REQUEST_TIMEOUT_S)
        except PeerAuthError:
            return False  # the dialer logged it, once
        except PeerError as exc:
            log.info("group_events_not_forwarded", leader=leader.node_id, error=str(exc))
            return False
        code = answer.responses[0].partition_responses[0].error_code if answer.responses \
            else answer.error_code
        if code != ErrorCode.NONE:
            return False  # the leader moved: the next image says where
        self._drop_head(len(chunk))
        return True

    def _drop_head(self, n: int) -> None:
        for _ in range(min(n, len(self._queue))):
            self._queue.popleft()
