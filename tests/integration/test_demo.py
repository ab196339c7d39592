"""`groupwire demo`, the README's main job, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys


def test_demo_kills_a_consumer_and_loses_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "groupwire", "demo", "--messages", "600", "--rate", "1000"],
        capture_output=True, text=True, timeout=240)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "killing consumer-2" in out
    assert "connection-lost" in out  # removed after the grace, not the session timeout
    assert "failover" in out
    assert "produced 600, consumed 600 distinct" in out
    assert "0 lost" in out
