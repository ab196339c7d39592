"""The message classes behave as ``dataclass(frozen=True, kw_only=True, slots=True)``
classes, though made without writing code at import (protocol.frozen, issue 25).

Each message is compared with its twin: the same fields put through ``dataclasses``
itself. Equality, hashing, repr, frozenness, copying, the docstring and the signature
must not tell them apart."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import pickle
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol import messages as m
from groupwire.protocol.frozen import frozen_dataclass
from tests.unit.protocol.message_strategies import message_strategy

CLASSES = sorted((cls for cls in vars(m).values()
                  if isinstance(cls, type) and dataclasses.is_dataclass(cls)
                  and cls.__module__ == m.__name__), key=lambda cls: cls.__name__)


@functools.cache
def twin(cls: type) -> Any:
    """``cls``'s fields in a class made by ``dataclass(frozen=True, ...)`` itself."""
    namespace: dict[str, Any] = {
        "__annotations__": {}, "__qualname__": cls.__qualname__, "__module__": cls.__module__}
    for f in dataclasses.fields(cls):
        namespace["__annotations__"][f.name] = f.type
        namespace[f.name] = dataclasses.field(default=f.default,
                                              default_factory=f.default_factory)
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        namespace["__doc__"] = cls.__doc__  # a written docstring, not the rendered one
    made = type(cls.__name__, (), namespace)
    return dataclasses.dataclass(frozen=True, kw_only=True, slots=True)(made)


def as_twin(message: Any) -> Any:
    values = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    return twin(type(message))(**values)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "value", fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _slots(cls: type) -> list[str]:
    """Every slot, inherited ones included (the twin has no base class)."""
    return sorted(name for k in cls.__mro__ for name in k.__dict__.get("__slots__", ()))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_docstring_signature_and_layout_are_the_dataclass_ones(cls: type) -> None:
    ref = twin(cls)
    assert cls.__doc__ == ref.__doc__
    # (the factory stand-in is our own object, shown as dataclasses shows theirs)
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert cls.__match_args__ == ref.__match_args__  # type: ignore[attr-defined]
    assert _slots(cls) == _slots(ref) and "__dict__" not in dir(cls)
    assert [(f.name, f.kw_only) for f in dataclasses.fields(cls)] == [
        (f.name, f.kw_only) for f in dataclasses.fields(ref)]


pairs = st.sampled_from(CLASSES).flatmap(
    lambda cls: st.tuples(message_strategy(cls), message_strategy(cls)))


@settings(max_examples=400, deadline=None)
@given(pairs)
def test_equality_hashing_and_repr_are_the_dataclass_ones(pair: tuple[Any, Any]) -> None:
    a, b = pair
    ta, tb = as_twin(a), as_twin(b)
    assert repr(a) == repr(ta)
    assert (a == b) == (ta == tb) and (a != b) == (ta != tb)
    assert a == copy.copy(a)
    assert _outcome(lambda: hash(a)) == _outcome(lambda: hash(ta))
    assert a != ta and ta != a  # another class: never equal, as dataclasses have it


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CLASSES).flatmap(message_strategy))
def test_instances_are_frozen_and_copy_as_the_dataclass_ones(message: Any) -> None:
    ref = as_twin(message)
    for name in (f.name for f in dataclasses.fields(message)):
        assert _outcome(lambda n=name: setattr(message, n, 1)) == _outcome(
            lambda n=name: setattr(ref, n, 1))
        assert _outcome(lambda n=name: delattr(message, n)) == _outcome(
            lambda n=name: delattr(ref, n))
    # Another name: Python 3.11's slotted frozen dataclasses raise a TypeError from
    # super() there (their __setattr__ names the class before slots were added); these
    # say what is wrong.
    with pytest.raises(dataclasses.FrozenInstanceError, match="'not_a_field'"):
        message.not_a_field = 1
    with pytest.raises(dataclasses.FrozenInstanceError, match="'not_a_field'"):
        del message.not_a_field
    for clone in (copy.copy(message), copy.deepcopy(message),
                  pickle.loads(pickle.dumps(message))):
        assert type(clone) is type(message) and clone == message
    assert dataclasses.replace(message) == message


def test_a_message_that_contains_itself_shows_the_loop_as_dots() -> None:
    topic = m.MetadataTopic(name="t")
    topic.partitions.append(topic)  # type: ignore[arg-type]
    ref = twin(m.MetadataTopic)(name="t")
    ref.partitions.append(ref)
    assert repr(topic) == repr(ref)
    assert repr(topic).endswith("partitions=[...])")


def test_the_build_check_runs_on_the_first_and_later_builds() -> None:
    @frozen_dataclass
    class Counted:
        seen: list[int] = dataclasses.field(default_factory=list)
        size: int = 0

        def __post_init__(self) -> None:
            self.seen.append(self.size)

    first = Counted(size=1)  # type: ignore[call-arg]
    second = Counted(size=2)  # type: ignore[call-arg]
    assert first.seen == [1] and second.seen == [2] and first.seen is not second.seen
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Counted(nope=1)  # type: ignore[call-arg]


def test_a_positional_field_is_refused() -> None:
    class Positional:
        name: str = dataclasses.field(kw_only=False)

    with pytest.raises(TypeError, match="keyword-only"):
        frozen_dataclass(Positional)


def test_importing_the_protocol_writes_no_code_per_message() -> None:
    """``import groupwire.protocol`` wrote ~1,000 functions (6 per message class, then
    every codec); a program that speaks a few messages now pays for those only."""
    code = (
        "import sys\n"
        "written = []\n"
        "def hook(event, args):\n"
        "    source = args[0] if event == 'compile' else None\n"
        "    if isinstance(source, bytes):\n"
        "        source = source.decode()\n"
        "    if isinstance(source, str) and source.lstrip().startswith('def '):\n"
        "        written.append(source.split('(')[0])\n"
        "sys.addaudithook(hook)\n"
        "import groupwire.protocol\n"
        "print(len(written), sorted(set(written)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    # what is left: the few plain dataclasses of the envelope and the consumer protocol,
    # the RequestFrame builder and the Heartbeat fast path
    assert int(done.stdout.split()[0]) <= 40, done.stdout
    assert "'def dec'" not in done.stdout and "'def enc'" not in done.stdout, done.stdout
