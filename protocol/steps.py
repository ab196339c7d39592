"""Long work written as a generator of steps, so the shell that runs it decides when to
let others run in between.

A request that touches 10 000 partitions does 10 000 pieces of work; done in one go it
holds the broker's event loop for most of a second, and every heartbeat waits behind it.
A function that may run long is a generator instead: it yields (``None``) after each
piece, at a point where the state it touches is consistent, and returns its result. Pure
code stays pure: it neither reads a clock nor knows about an event loop; the asyncio
shell (``broker.pacing``) runs steps until its time slice is spent, then yields the loop.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

__all__ = ["Steps", "run_steps"]

T = TypeVar("T")

Steps = Generator[None, None, T]
"""Work that yields between pieces and returns a ``T``."""


def run_steps(steps: Steps[T]) -> T:
    """Run every step at once, for callers with no loop to share (tests, tools)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
