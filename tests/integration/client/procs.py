"""Start consumer processes and wait on what they report (events, not sleeps)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


class ConsumerProcess:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.events: list[dict[str, object]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, name: str, bootstrap: str, group: str, topic: str,
                    *extra: str) -> ConsumerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "proc_consumer.py"), "--bootstrap", bootstrap,
            "--group", group, "--topic", topic, "--name", name, *extra,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
        return cls(name, proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue
            self._changed.set()
        self._changed.set()

    async def wait_for(self, predicate: Callable[[list[dict[str, object]]], bool],
                       timeout: float = 30) -> None:
        """Wait until ``predicate(events)`` holds (checked on every new report)."""
        async def loop() -> None:
            while not predicate(self.events):
                self._changed.clear()
                if self.proc.returncode is not None and self._reader.done():
                    raise AssertionError(f"{self.name} exited: {self.events[-5:]}")
                await self._changed.wait()
        await asyncio.wait_for(loop(), timeout)

    def owned(self) -> set[tuple[str, int]]:
        """Partitions held according to the last assigned/revoked/lost reports."""
        held: set[tuple[str, int]] = set()
        for e in self.events:
            parts = {(str(t), int(p)) for t, p in e.get("partitions", [])}  # type: ignore[union-attr]
            if e["event"] == "assigned":
                held |= parts
            elif e["event"] in ("revoked", "lost"):
                held -= parts
        return held

    def consumed(self) -> set[tuple[int, int]]:
        return {(int(p), int(o)) for e in self.events if e["event"] == "records"
                for p, o, _ in e["records"]}  # type: ignore[union-attr]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(self.proc.wait(), 20)
            except (ProcessLookupError, TimeoutError):
                self.proc.kill()
                await self.proc.wait()
        self._reader.cancel()
