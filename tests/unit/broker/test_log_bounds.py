"""Log lines stay small whatever a client sent (issue 14): long strings and lists cut."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import structlog

from groupwire.broker.logs import LOG_LIST_ITEMS, LOG_STR_CHARS, bound_fields, configure_logging


def test_long_client_strings_are_cut() -> None:
    event: dict[str, Any] = {
        "event": "group_event", "group_id": "g" * 32_767, "member_id": "m-1",
        "partitions": [["t" * 1000, list(range(500))]] * 200, "generation_id": 3,
    }
    out = bound_fields(None, "info", event)
    assert out["group_id"] == "g" * LOG_STR_CHARS + f"...(+{32_767 - LOG_STR_CHARS} chars)"
    assert out["member_id"] == "m-1" and out["generation_id"] == 3
    parts = out["partitions"]
    assert len(parts) == LOG_LIST_ITEMS + 1 and parts[-1] == "...(+136 items)"
    topic, indexes = parts[0]
    assert len(topic) < LOG_STR_CHARS + 30 and len(indexes) == LOG_LIST_ITEMS + 1


def test_a_configured_logger_writes_bounded_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sink = io.StringIO()
    monkeypatch.setattr("sys.stderr", sink)
    configure_logging("json", "info")
    try:
        structlog.get_logger("t").info("group_event", group_id="g" * 1_000_000,
                                       reason="r" * 100_000)
    finally:
        structlog.reset_defaults()
    line = sink.getvalue().strip()
    assert len(line) < 2 * LOG_STR_CHARS + 300
    assert json.loads(line)["group_id"].startswith("g" * LOG_STR_CHARS + "...")
