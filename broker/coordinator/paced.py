"""Helpers for the coordinator's read-only APIs written as steps (``protocol.steps``).

A DescribeGroups of 10 000 ids, a ListGroups over 10 000 groups or an OffsetFetch of a
group's 10 000 offsets is request- or state-sized work: as steps, the shell
(``broker.pacing``) can let heartbeats and timers run between slices. A step is about
``STEP_WORK`` units of work (a group, a member, an offset: roughly a microsecond each).
Between steps other inputs may change the state, so each item is read whole within one
step (a group is described as it is at that moment), never half before and half after.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Final, TypeVar

from groupwire.protocol.steps import Steps

STEP_WORK: Final = 256
"""Units of work (groups, members, offsets) between two yields."""

SORT_RUN: Final = 4096
"""Items sorted in one step; longer lists are sorted in runs and merged lazily."""

T = TypeVar("T")


def sorted_steps(items: list[T]) -> Steps[Iterator[T]]:
    """``iter(sorted(items))``, sorting at most ``SORT_RUN`` items per step (a sort of
    100 000 keys at once would hold the loop for tens of milliseconds). The merge is
    lazy: the caller yields while it consumes it."""
    if len(items) <= SORT_RUN:
        items.sort()
        return iter(items)
    runs: list[list[T]] = []
    for start in range(0, len(items), SORT_RUN):
        runs.append(sorted(items[start:start + SORT_RUN]))  # type: ignore[type-var]
        yield
    return heapq.merge(*runs)  # type: ignore[type-var]
