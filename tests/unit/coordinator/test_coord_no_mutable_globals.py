"""The pure core keeps no state between calls outside the Coordinator it is given: no
module of broker/coordinator holds a mutable container at module level (a cache there is
shared by every coordinator in the process and outlives them)."""

from __future__ import annotations

import collections
import importlib
import pkgutil
from types import ModuleType

import pytest

from groupwire.broker import coordinator

MUTABLE = (dict, list, set, bytearray, collections.deque)


def _modules() -> list[ModuleType]:
    names = [f"{coordinator.__name__}.{info.name}"
             for info in pkgutil.iter_modules(coordinator.__path__)]
    return [coordinator, *(importlib.import_module(name) for name in sorted(names))]


def _mutable_globals(module: ModuleType) -> list[str]:
    return [f"{module.__name__}.{name}: {type(value).__name__}"
            for name, value in vars(module).items()
            if not name.startswith("__") and isinstance(value, MUTABLE)]


def test_every_module_of_the_core_is_inspected() -> None:
    names = {m.__name__.rsplit(".", 1)[-1] for m in _modules()}
    assert {"coordinator", "engine", "join", "fencing", "transitions"} <= names
    assert len(names) > 20


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_no_mutable_module_level_container(module: ModuleType) -> None:
    assert _mutable_globals(module) == []


def test_the_check_sees_a_mutable_global() -> None:
    fake = ModuleType("fake")
    fake.CACHE = {}  # type: ignore[attr-defined]
    fake.ROWS = ()  # type: ignore[attr-defined]
    assert _mutable_globals(fake) == ["fake.CACHE: dict"]
