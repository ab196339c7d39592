"""TimerQueue: deadlines by key, cancel-and-replace, lazy deletion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.coordinator import CancelTimer, SetTimer, TimerQueue


def test_replace_cancel_and_order() -> None:
    q = TimerQueue()
    q.apply([SetTimer(("a",), 30), SetTimer(("b",), 10), SetTimer(("c",), 20)])
    q.apply([SetTimer(("a",), 5), CancelTimer(("c",)), CancelTimer(("never",))])
    assert q.next_deadline() == 5
    assert q.deadline_of(("a",)) == 5 and q.deadline_of(("c",)) is None
    assert q.pop_due(9) == [("a",)]
    assert q.pop_due(100) == [("b",)]
    assert q.next_deadline() is None and len(q) == 0


def test_heap_garbage_is_compacted() -> None:
    q = TimerQueue()
    for i in range(10_000):
        q.set(("session", "g", str(i % 10)), i)
    assert len(q) == 10
    assert q.heap_size < 100
    assert q.pop_due(10**9) == [("session", "g", str(i)) for i in range(10)]


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 50),
                          st.booleans()), max_size=60), st.integers(0, 60))
def test_matches_a_dict_model(ops: list[tuple[str, int, bool]], now: int) -> None:
    q = TimerQueue()
    model: dict[tuple[str, ...], int] = {}
    for name, deadline, cancel in ops:
        key = (name,)
        if cancel:
            q.cancel(key)
            model.pop(key, None)
        else:
            q.set(key, deadline)
            model[key] = deadline
    expected = sorted((d, k) for k, d in model.items())
    assert q.next_deadline() == (expected[0][0] if expected else None)
    due = q.pop_due(now)
    assert sorted(due) == sorted(k for d, k in expected if d <= now)
    assert [model[k] for k in due] == sorted(model[k] for k in due)
    assert len(q) == sum(1 for d, _ in expected if d > now)
