"""`groupwire chaos` as a user meets it: a fatal error stops it at once with its cause,
Ctrl-C and SIGTERM leave no process behind, and a second run counts only its own records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess

pytestmark = pytest.mark.slow

CHAOS = [sys.executable, "-m", "groupwire", "chaos"]
RUN_TIMEOUT_S = 120
EXIT_TIMEOUT_S = 30
GONE_TIMEOUT_S = 10


def _fast_broker(tmp_path: Path, *extra: str) -> BrokerProcess:
    return BrokerProcess(tmp_path / "broker", "--group-initial-rebalance-delay-ms", "0",
                         "--connection-loss-grace-ms", "300", *extra).start()


def test_a_refused_session_timeout_stops_the_run_with_its_cause(tmp_path: Path) -> None:
    broker = _fast_broker(tmp_path, "--group-min-session-timeout-ms", "10000")
    try:
        result = subprocess.run(
            [*CHAOS, "--bootstrap", f"127.0.0.1:{broker.port}", "--consumers", "2",
             "--faults", "0", "--records", "100", "--session-timeout-ms", "3000"],
            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    finally:
        broker.kill()
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("groupwire chaos: error: ")
    assert "3000 ms session timeout (INVALID_SESSION_TIMEOUT)" in lines[0]
    assert "--session-timeout-ms" in lines[0]
    assert "Traceback" not in result.stdout


def _run_processes(marker: Path) -> list[int]:
    """Live processes whose command line names ``marker`` (the chaos run and its children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if str(marker).encode() in cmdline:  # a zombie's cmdline is empty
            pids.append(int(entry.name))
    return pids


def _wait_until(check: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.1)  # polling /proc and files: there is no event to wait on
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signal_ends_the_run_and_every_process_it_started(tmp_path: Path,
                                                            sig: signal.Signals) -> None:
    report = tmp_path / "report"
    consumers = 3
    proc = subprocess.Popen(
        [*CHAOS, "--consumers", str(consumers), "--faults", "0", "--records", "100000",
         "--rate", "100", "--report", str(report)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        # as from a terminal: SIGINT not ignored, whatever this test process inherited
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # every member has joined and read: the run is in full swing
        assert _wait_until(lambda: sum(1 for p in report.glob("member-*.jsonl")
                                       if '"records"' in p.read_text()) == consumers,
                           RUN_TIMEOUT_S), "the members never read a record"
        children = [p for p in _run_processes(report) if p != proc.pid]
        assert len(children) == consumers + 1  # the members and the run's broker
        # Ctrl-C reaches the whole foreground process group; SIGTERM comes from `kill`
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(EXIT_TIMEOUT_S)
        assert _wait_until(lambda: not _run_processes(report), GONE_TIMEOUT_S), \
            f"left running: {_run_processes(report)}"
        # SIGKILL runs no code of the run at all: the children die by their own guard
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}.get(sig, -sig)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "Traceback" not in err
        if sig != signal.SIGKILL:
            assert f"stopped by {sig.name}; every process of the run ended" in err, err
    finally:
        for pid in _run_processes(report):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_two_runs_on_one_broker_each_count_only_their_own_records(tmp_path: Path) -> None:
    broker = _fast_broker(tmp_path, "--group-min-session-timeout-ms", "100")
    verdicts = []
    try:
        for _ in range(2):
            result = subprocess.run(
                [*CHAOS, "--bootstrap", f"127.0.0.1:{broker.port}", "--consumers", "2",
                 "--faults", "0", "--records", "200", "--rate", "400", "--partitions", "4",
                 "--session-timeout-ms", "1000", "--json"],
                capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            assert result.returncode == 0, result.stdout + result.stderr
            verdicts.append(json.loads(result.stdout))
    finally:
        broker.kill()
    first, second = verdicts
    assert first["topic"] != second["topic"] and first["group"] != second["group"]
    for verdict in verdicts:
        assert verdict["produced"] == 200
        assert verdict["processed_distinct"] == 200
        assert verdict["lost"] == 0 and verdict["violations"] == []
