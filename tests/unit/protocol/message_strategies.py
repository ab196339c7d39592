"""Hypothesis strategies built from the message dataclasses' type hints.

Walking the hints here (rather than listing fields by hand) means a field added to
``protocol.messages`` is fuzzed without touching the tests.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from hypothesis import strategies as st

from groupwire.protocol.types import IntRange

# Short collections keep examples fast; the codec's loops do not care about length.
MAX_LIST = 3


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """Every valid value of wire type ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | strategy_for(inner)
    if tp is str:
        return st.text(max_size=12)
    if tp is bytes:
        return st.binary(max_size=24)
    if tp is bool:
        return st.booleans()
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        (rng,) = [m for m in meta if isinstance(m, IntRange)]
        assert base is int
        return st.integers(min_value=rng.lo, max_value=rng.hi)
    if origin is list:
        (elem,) = typing.get_args(tp)
        return st.lists(strategy_for(elem), max_size=MAX_LIST)
    if origin is tuple:
        return st.tuples(*(strategy_for(a) for a in typing.get_args(tp)))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return message_strategy(tp)
    raise TypeError(f"no strategy for {tp!r}")


@functools.cache
def message_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Instances of dataclass ``cls`` with every field drawn from its wire type."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


# Any value msgpack can carry, including the ones our schema refuses (floats, bools where
# ints belong, huge ints, bytes where str belongs): the raw material for malformed bodies.
msgpack_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
msgpack_values: st.SearchStrategy[Any] = st.recursive(
    msgpack_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
