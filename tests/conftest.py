"""Suite-wide pytest wiring: tests take the marker of the tier directory they live in.

So `-m "not chaos"` or `-m packaging` select tiers without every test file having to
repeat its own marker.
"""

from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path

# Imported up front, not lazily by hypothesis' own plugin at the end of the session: on
# CPython 3.11.7 that late import, compiled under pytest's assertion rewriting deep in the
# terminal-summary hooks, can fail with "SystemError: AST constructor recursion depth
# mismatch" after an otherwise green run (seen with tests/unit/client/test_fetcher.py).
import hypothesis  # noqa: F401
import pytest

TESTS_DIR = Path(__file__).resolve().parent
# The layers' folders sit at the repository root, which is on sys.path here (for
# `tests.*` and `bench.*`), so `import client` would load a second copy of the SDK
# beside `groupwire.client`. Only the `groupwire` names are the package.
OLD_ROOTS = frozenset({"protocol", "broker", "client", "pipeline", "cli"})


class _OldNamesRefused(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.partition(".")[0] in OLD_ROOTS:
            raise ModuleNotFoundError(
                f"{fullname!r} is not a module: import groupwire.{fullname} instead",
                name=fullname)
        return None


sys.meta_path.insert(0, _OldNamesRefused())
TIER_MARKERS = frozenset({"integration", "chaos", "spark", "packaging", "kafka"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            tier = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except (ValueError, IndexError):
            continue
        if tier in TIER_MARKERS:
            item.add_marker(tier)
