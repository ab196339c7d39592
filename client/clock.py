"""The client's clock seam: every SDK component reads time through one injected clock.

As the broker core takes ``now_ms`` as an argument, the client's components take a
:data:`Clock` (a callable answering monotonic milliseconds) instead of reading the system
clock themselves, so a test can move time for the whole client at once (a frozen
process, an expired session) without sleeping or patching modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "monotonic_ms"]

Clock = Callable[[], int]
"""Monotonic milliseconds. Called from the app's loop and the heartbeat thread alike, so
an implementation must be thread-safe (reading a number is)."""


def monotonic_ms() -> int:
    """The default clock: the process's monotonic clock, in milliseconds."""
    return time.monotonic_ns() // 1_000_000
