"""What a benchmark prints with ``--json``: one figure per line, checked for its shape only
(never for what was measured: a smoke run must not fail by luck on a busy machine)."""

from __future__ import annotations

import json
import math
from typing import Any

KEYS = {"bench", "name", "unit", "median", "min", "max", "rounds", "settings", "goal", "met",
        "note"}


def check_figure_line(line: str, bench: str) -> dict[str, Any]:
    fig = json.loads(line)
    assert set(fig) == KEYS, fig
    assert fig["bench"] == bench
    assert isinstance(fig["name"], str) and fig["name"]
    assert isinstance(fig["unit"], str) and fig["unit"]
    assert isinstance(fig["settings"], dict)
    assert isinstance(fig["rounds"], int) and fig["rounds"] >= 0
    if fig["rounds"] == 0:  # a side that could not run (say, no Redis): no numbers
        assert fig["median"] is None and fig["note"], fig
        return fig
    for key in ("median", "min", "max"):
        assert isinstance(fig[key], (int, float)) and math.isfinite(fig[key]), fig
    assert fig["min"] <= fig["median"] <= fig["max"], fig
    if fig["goal"] is not None:
        assert isinstance(fig["met"], bool), fig
    return fig
