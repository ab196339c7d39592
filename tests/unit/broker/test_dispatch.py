"""The typed handler registry and the started services (issue 24, the broker split):
a request type finds the handler registered for it, a later one replaces it, others
find none (they go to the coordinator); a broker not yet started says so by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.dispatch import Handlers
from groupwire.broker.host import Peer
from groupwire.broker.server import Broker, NotStartedError
from groupwire.protocol.messages import FetchRequest, MetadataRequest, ProduceRequest


def test_a_request_type_finds_its_handler_and_the_last_one_registered_wins() -> None:
    seen: list[str] = []
    handlers = Handlers()

    def first(conn: Peer, cid: int, request: MetadataRequest) -> None:
        seen.append("first")

    def second(conn: Peer, cid: int, request: MetadataRequest) -> None:
        seen.append("second")

    handlers.add(MetadataRequest, first)
    handlers.add(ProduceRequest, lambda conn, cid, request: seen.append("produce"))
    handlers.add(MetadataRequest, second)
    handler = handlers.get(MetadataRequest)
    assert handler is not None
    handler(None, 1, MetadataRequest())  # type: ignore[arg-type]
    assert seen == ["second"]
    assert FetchRequest not in handlers and handlers.get(FetchRequest) is None


async def test_a_broker_not_started_names_the_missing_start(tmp_path: Path) -> None:
    broker = Broker(BrokerSettings(data_dir=tmp_path, port=0, metrics_port=-1))
    assert broker.store is None and broker.coordinator is None and broker.cluster is None
    assert broker._hosted == set()
    with pytest.raises(NotStartedError, match="start"):
        _ = broker.started
