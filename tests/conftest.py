"""Suite-wide pytest wiring: tests take the marker of the tier directory they live in.

So `-m "not chaos"` or `-m packaging` select tiers without every test file having to
repeat its own marker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
TIER_MARKERS = frozenset({"integration", "chaos", "spark", "packaging"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            tier = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except (ValueError, IndexError):
            continue
        if tier in TIER_MARKERS:
            item.add_marker(tier)
