"""Keep the cyclic garbage collector's full passes short.

A full pass walks every tracked object. With 20 000 partitions the broker holds ~200 000
of them, and one pass stalled the event loop 50-100 ms (measured: a Produce to 10 000
partitions, with the request's own objects alive). Nearly all of those objects live as
long as the broker does: the modules, and the topics, partitions and groups loaded at
start or created since. Frozen (``gc.freeze``), they are never walked again; they are still
freed by reference counting if they die.

Only the broker command's own process does this (``Broker(settle_heap=True)``): an
embedding application, or a test run with many brokers, owns its heap.
"""

from __future__ import annotations

import gc


class HeapSettler:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def at_start(self) -> None:
        """Everything loaded so far is long-lived: collect what is not, freeze the rest."""
        if self.enabled:
            gc.collect()
            gc.freeze()

    def after_growth(self) -> None:
        """A topic's partitions were made: freeze them. Young garbage is collected first
        (cheap); a cycle that died among older objects since the last freeze stays frozen,
        a few objects at most, until a deletion unfreezes."""
        if self.enabled:
            gc.collect(1)
            gc.freeze()

    def after_shrink(self) -> None:
        """Topics were deleted: what they held may be cyclic, so everything is walked again
        (one full pass) until the next creation freezes it."""
        if self.enabled:
            gc.unfreeze()
