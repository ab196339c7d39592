"""Frozen, slotted, keyword-only dataclasses made without writing code at import.

``dataclass(frozen=True, kw_only=True, slots=True)`` compiles six methods per class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``)
and renders a signature for the docstring: about 1.3 ms a class, 0.15 s for the 117
classes of :mod:`groupwire.protocol.messages`, paid by every ``import groupwire`` program
(the ``groupwire`` command included) before it does anything. :func:`frozen_dataclass`
makes classes that behave the same for a fraction of that:

- ``dataclasses.dataclass`` still lays the class out (fields, slots, ``__match_args__``,
  ``dataclasses.fields`` / ``replace`` / ``is_dataclass``), with nothing generated;
- ``__eq__``, ``__hash__`` and ``__repr__`` are shared functions over a per-class tuple
  of the field values, equal to the generated ones (same fields, same order, same class
  check, same text, recursion shown as ``...``);
- ``__setattr__`` and ``__delattr__`` are closures raising ``FrozenInstanceError`` as the
  generated ones do, with ``__getstate__`` / ``__setstate__`` for copy and pickle;
- ``__init__`` is written on first use: until a class is first built it has a stand-in
  that writes the real one (what ``dataclass`` would write, ``__post_init__`` call
  included), puts it on the class and calls it. A program builds a few dozen messages.

``__dataclass_params__`` records what ``dataclasses`` generated (nothing), not what the
class does: a plain ``@dataclass(frozen=True)`` cannot subclass one of these.
"""

from __future__ import annotations

import dataclasses
import inspect  # imported by dataclasses already
import reprlib
import types
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from operator import attrgetter
from typing import Any, TypeVar

__all__ = ["frozen_dataclass"]

_T = TypeVar("_T")



class _Factory:
    """A parameter's default that stands for "call the field's default_factory"."""

    def __repr__(self) -> str:
        return "<factory>"  # as dataclasses shows it in a signature


_FACTORY = _Factory()
_DOC_PENDING = "\0frozen_dataclass"  # set before dataclass() so it renders no signature


def frozen_dataclass(cls: type[_T]) -> type[_T]:
    """``cls`` as ``dataclass(frozen=True, kw_only=True, slots=True)`` makes it (see the
    module's notes for how). Fields must be keyword-only and take part in ``__init__``."""
    undocumented = not cls.__dict__.get("__doc__")
    if undocumented:
        cls.__doc__ = _DOC_PENDING
    made: Any = dataclasses.dataclass(init=False, repr=False, eq=False, kw_only=True,
                                      slots=True)(cls)
    fields = dataclasses.fields(made)
    for f in fields:
        if not f.init or not f.kw_only:
            raise TypeError(f"{made.__name__}.{f.name}: every field is keyword-only and "
                            "set by __init__")
    names = tuple(f.name for f in fields)
    # (equality key, hash key, the fields repr shows), read by the shared methods
    made.__frozen_keys__ = (
        _key_of([f.name for f in fields if f.compare]),
        _key_of([f.name for f in fields if (f.compare if f.hash is None else f.hash)]),
        tuple(f.name for f in fields if f.repr),
    )
    made.__eq__ = _eq
    made.__hash__ = _hash
    made.__repr__ = _repr
    _add_frozen(made, frozenset(names))
    made.__getstate__ = _getstate
    made.__setstate__ = _setstate
    made.__init__ = _FirstInit(made)
    if undocumented:
        made.__doc__ = made.__name__ + _text_signature(fields)
    return made  # type: ignore[no-any-return]


def _key_of(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple the generated methods would compare or hash: ``(self.a, self.b, ...)``."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda o: (get(o),)
    return lambda o: ()


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        key = self.__frozen_keys__[0]
        return key(self) == key(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__frozen_keys__[1](self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__frozen_keys__[2])
    return f"{self.__class__.__qualname__}({shown})"


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


def _add_frozen(cls: Any, names: frozenset[str]) -> None:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    for method in (__setattr__, __delattr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)


class _FirstInit:
    """The stand-in ``__init__``: on the first call it writes the real one, puts it on
    the class and runs it. Its ``__signature__`` is the real one's, so ``inspect`` and
    ``help`` show the fields before any instance is built."""

    __slots__ = ("cls",)

    def __init__(self, cls: Any) -> None:
        self.cls = cls

    def install(self) -> Callable[..., None]:
        init = _write_init(self.cls)
        if self.cls.__dict__.get("__init__") is self:
            self.cls.__init__ = init  # the next instance goes straight to it
        return init

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, obj: Any, /, *args: Any, **kwargs: Any) -> None:
        self.install()(obj, *args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.install())


def _write_init(cls: Any) -> Callable[..., None]:
    """The ``__init__`` a frozen keyword-only dataclass has: each field set through
    ``object.__setattr__``, a factory called when its field is not given, then
    ``__post_init__`` if the class has one."""
    fields = dataclasses.fields(cls)
    ns: dict[str, Any] = {"_msg_set": object.__setattr__, "_msg_factory": _FACTORY}
    params: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        value = f.name
        if f.default is not MISSING:
            ns[f"_msg_d{i}"] = f.default
            params.append(f"{f.name}=_msg_d{i}")
        elif f.default_factory is not MISSING:
            ns[f"_msg_f{i}"] = f.default_factory
            params.append(f"{f.name}=_msg_factory")
            value = f"_msg_f{i}() if {f.name} is _msg_factory else {f.name}"
        else:
            params.append(f.name)
        body.append(f"    _msg_set(self, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", "*", *params] if params else ["self"])
    source = "\n".join([f"def __init__({signature}):", *(body or ["    pass"])])
    exec(source, ns)  # source written from the class's own fields
    init: Callable[..., None] = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    return init


def _text_signature(fields: tuple[dataclasses.Field[Any], ...]) -> str:
    """What ``dataclasses`` puts in an undocumented class's docstring:
    ``(*, name: 'str', size: 'Int32' = -1, items: 'list[X]' = <factory>)``."""
    if not fields:
        return "()"
    params = []
    for f in fields:
        text = f"{f.name}: {inspect.formatannotation(f.type)}"
        if f.default is not MISSING:
            text += f" = {f.default!r}"
        elif f.default_factory is not MISSING:
            text += " = <factory>"
        params.append(text)
    return f"(*, {', '.join(params)})"
