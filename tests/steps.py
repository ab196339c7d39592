"""Driving ``protocol.steps`` generators in tests."""

from __future__ import annotations

from typing import TypeVar

from groupwire.protocol.steps import Steps

T = TypeVar("T")


def steps_taken(steps: Steps[T]) -> tuple[int, T]:
    """Run ``steps`` to the end: how many times they yielded, and what they returned."""
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return yields, done.value  # type: ignore[no-any-return]
        yields += 1
