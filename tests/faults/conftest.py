"""In-process brokers for fault tests, optionally on a disk that fails on demand."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.broker.storage.fileops import FileOps
from tests.integration.conftest import fast_settings


class FaultyDisk(FileOps):
    """Every pwrite (and fsync) fails with ``errno`` while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.errno = errno.ENOSPC
        self.refused = 0

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.failing:
            self.refused += 1
            raise OSError(self.errno, "injected disk failure")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self.failing:
            raise OSError(self.errno, "injected disk failure")
        super().fsync(fd)


StartBroker = Callable[..., Awaitable[Broker]]


@pytest.fixture
async def start_broker(tmp_path: Path) -> AsyncIterator[StartBroker]:
    """``await start_broker(file_ops=..., data_dir=..., **settings)``; closed at teardown."""
    started: list[Broker] = []

    async def start(file_ops: FileOps | None = None, **overrides: Any) -> Broker:
        data_dir = overrides.pop("data_dir", tmp_path / "data")
        broker = Broker(fast_settings(data_dir, **overrides), file_ops=file_ops)
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        await broker.close()
