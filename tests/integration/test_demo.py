"""`groupwire demo`, the README's main job, run as a user runs it (and interrupts it)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess

STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


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
    # piped, every event is one line however long (rich would wrap at 80 columns)
    (summary,) = [line for line in out.splitlines() if line.startswith("summary:")]
    assert "produced 600, consumed 600 distinct" in summary and summary.endswith(" 0 lost")
    failover = [line for line in out.splitlines() if "failover:" in line]
    assert failover and "connection-loss grace" in failover[0]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_demo_and_every_consumer_quietly(signum: int) -> None:
    """Ctrl-C reaches the whole foreground group, SIGTERM only the demo; either way no
    traceback, no consumer left, and a summary of how far the run got."""
    # its own session, so the SIGINT goes to the whole foreground group as a terminal's does
    demo = subprocess.Popen(
        [sys.executable, "-m", "groupwire", "demo", "--messages", "100000", "--rate", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    formed = threading.Event()

    def pump() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line)
            if "rebalance done" in line:
                formed.set()
        formed.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    children: list[int] = []
    try:
        assert formed.wait(STARTUP_TIMEOUT_S) and demo.poll() is None, "".join(lines)
        children = _children(demo.pid)
        assert len(children) == 3, children
        if signum == signal.SIGINT:
            os.killpg(demo.pid, signum)
        else:
            demo.send_signal(signum)
        code = demo.wait(STOP_TIMEOUT_S)
        reader.join(STOP_TIMEOUT_S)
        out = "".join(lines)
        assert code == 128 + signum, out
        assert re.search(r"interrupted: produced \d+ of 100000, consumed \d+ distinct", out), out
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
        assert "Fatal Python error" not in out, out
        assert [pid for pid in children if _alive(pid)] == [], out
    finally:
        for pid in [demo.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        demo.wait(STOP_TIMEOUT_S)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on pidfds (Linux)")
def test_no_consumer_outlives_a_killed_demo() -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "groupwire", "demo", "--messages", "100000", "--rate", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    children: list[int] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # bounded by the demo's own 60 s wait for the group
            if "rebalance done" in line:
                break
        children = _children(demo.pid)
        assert len(children) == 3, children
        exits = [os.pidfd_open(pid) for pid in children]
        demo.kill()  # no chance to clean up: the consumers must notice on their own
        demo.wait(STOP_TIMEOUT_S)
        for fd in exits:
            ready, _, _ = select.select([fd], [], [], STOP_TIMEOUT_S)
            os.close(fd)
            assert ready, "a consumer outlived the demo"
    finally:
        for pid in [demo.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        demo.wait(STOP_TIMEOUT_S)


def test_demo_runs_against_an_existing_broker_in_topics_of_its_own(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
                           "--connection-loss-grace-ms", "500").start()
    try:
        topics = set()
        for _ in range(2):  # a second run must not count the first run's records
            result = subprocess.run(
                [sys.executable, "-m", "groupwire", "demo", "--bootstrap",
                 f"127.0.0.1:{broker.port}", "--messages", "300", "--rate", "1000"],
                capture_output=True, text=True, timeout=240)
            out = result.stdout
            assert result.returncode == 0, out + result.stderr
            assert f"broker at 127.0.0.1:{broker.port}" in out
            topic = re.search(r"topic\s+(demo-orders-[0-9a-f]{8})\s", out)
            group = re.search(r"join\s+group\s+(demo-billing-[0-9a-f]{8})", out)
            assert topic and group, out
            topics.add(topic.group(1))
            assert "produced 300, consumed 300 distinct" in out and "0 lost" in out
        assert len(topics) == 2
        assert broker.proc is not None and broker.proc.poll() is None
    finally:
        broker.kill()
