"""The broker command freezes its long-lived objects so full GC passes stay short;
an embedded broker leaves the application's heap alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from groupwire.broker.heap import HeapSettler


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_broker_process_freezes_what_it_loaded_and_what_it_creates() -> None:
    heap = HeapSettler(enabled=True)
    heap.at_start()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    grown = [[i] for i in range(1000)]  # a topic's worth of new long-lived containers
    heap.after_growth()
    assert gc.get_freeze_count() >= frozen + len(grown)


def test_a_deletion_lets_the_collector_walk_everything_again() -> None:
    heap = HeapSettler(enabled=True)
    heap.at_start()
    heap.after_shrink()
    assert gc.get_freeze_count() == 0


def test_an_embedded_broker_leaves_the_heap_alone() -> None:
    heap = HeapSettler(enabled=False)
    heap.at_start()
    heap.after_growth()
    assert gc.get_freeze_count() == 0
