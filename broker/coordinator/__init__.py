"""The sans-I/O group coordinator: Kafka's classic group protocol as a pure state machine.

``Coordinator.handle(ctx, request, now_ms)``, ``expire(key, now_ms)`` and
``connection_closed(conn_id, now_ms)`` each return a :class:`Result` (replies, timers,
records, events) that the asyncio shell executes. No clock, no sockets, no asyncio here.
"""

from groupwire.broker.coordinator.config import CoordinatorConfig
from groupwire.broker.coordinator.coordinator import Coordinator
from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.coordinator.heartbeat import Renewal
from groupwire.broker.coordinator.outputs import (
    EMPTY_RESULT,
    FetchCheck,
    Reply,
    RequestContext,
    Result,
    Transition,
)
from groupwire.broker.coordinator.records import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    GroupRecord,
    MemberRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
    encode_records,
    record_from_kv,
)
from groupwire.broker.coordinator.state import GroupState
from groupwire.broker.coordinator.timers import CancelTimer, SetTimer, TimerKey, TimerOp, TimerQueue
from groupwire.broker.coordinator.view import CoreView
from groupwire.protocol.security import ANONYMOUS

__all__ = [
    "ANONYMOUS",
    "EMPTY_RESULT",
    "CancelTimer",
    "Coordinator",
    "CoordinatorConfig",
    "CoreView",
    "FetchCheck",
    "GroupDeleteRecord",
    "GroupEvent",
    "GroupMetadataRecord",
    "GroupRecord",
    "GroupState",
    "MemberRecord",
    "OffsetCommitRecord",
    "OffsetDeleteRecord",
    "Renewal",
    "Reply",
    "RequestContext",
    "Result",
    "SetTimer",
    "TimerKey",
    "TimerOp",
    "TimerQueue",
    "Transition",
    "encode_records",
    "record_from_kv",
]
