"""A member's connections: one int for the usual single one, a set only beside it."""

from __future__ import annotations

from groupwire.broker.coordinator.member import Member


def _member() -> Member:
    return Member("g", "m", None, "c", "/h", 10_000, 10_000, "consumer", ())


def test_one_connection_needs_no_set_and_more_are_tracked_until_the_last_goes() -> None:
    m = _member()
    assert m.conns == frozenset() and m.last_conn == -1
    assert m.add_conn(1) is True and m.extra_conns is None
    assert m.add_conn(1) is False
    assert m.add_conn(2) is True and m.last_conn == 2 and m.conns == {1, 2}
    assert m.add_conn(1) is False and m.last_conn == 1  # re-attached: now the last one
    assert m.has_conn(2) and not m.has_conn(3)
    m.remove_conn(1)
    assert m.last_conn == 2 and m.conns == {2} and m.extra_conns is None
    m.remove_conn(3)  # not attached: nothing happens
    assert m.conns == {2}
    m.remove_conn(2)
    assert m.last_conn == -1 and m.conns == frozenset()
    m.add_conn(4)
    m.add_conn(5)
    m.clear_conns()
    assert m.conns == frozenset() and not m.has_conn(4) and not m.has_conn(5)
