"""How long the event loop was kept from running: the one number that says whether any
request, timer or connection held everyone else up.

A task asks to wake every ``interval_s``; how late it wakes is the longest time the loop
spent on something else in between. Heartbeats, session timers and every connection wait
behind such a stall, so an operator pages on it before members start to expire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from groupwire.broker.supervisor import Service, Supervisor

INTERVAL_S = 0.01
"""Short enough to see a stall of a few tens of milliseconds, cheap enough to run always
(100 wake-ups a second)."""


class LoopMonitor:
    """Samples the loop's lateness; ``observe`` gets each stall longer than the interval."""

    def __init__(self, observe: Callable[[float], None], *,
                 interval_s: float = INTERVAL_S) -> None:
        self._observe = observe
        self.interval_s = interval_s
        self.max_stall_s = 0.0
        """The longest stall since start, in seconds beyond the interval asked for."""
        self._service: Service | None = None

    def start(self, supervisor: Supervisor | None = None) -> None:
        self._service = (supervisor or Supervisor()).spawn("loop-monitor", self._run)

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None

    def record(self, late_s: float) -> None:
        """One wake-up ``late_s`` after it was due (negative: early, as timers may be)."""
        if late_s <= 0:
            return
        self.max_stall_s = max(self.max_stall_s, late_s)
        self._observe(late_s)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.record(loop.time() - due)
