"""A chaos member started while the run's broker restarts waits for it, as an app would."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.brokerproc import BrokerProcess

WAIT_S = 60


def _events(journal: Path) -> list[str]:
    if not journal.exists():
        return []
    return [json.loads(line)["event"] for line in journal.read_text().splitlines() if line]


def _wait_for(journal: Path, event: str, member: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while event not in _events(journal):
        assert member.poll() is None, f"the member exited ({member.returncode}) " \
                                      f"before {event!r}: {_events(journal)}"
        assert time.monotonic() < deadline, f"no {event!r} in {_events(journal)}"
        time.sleep(0.05)  # polling a file another process writes


def test_a_member_started_before_its_broker_joins_once_it_is_up(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    journal = tmp_path / "member-01.jsonl"
    member = subprocess.Popen(
        [sys.executable, "-m", "groupwire.cli.chaos.member", "--bootstrap", f"127.0.0.1:{port}",
         "--group", "g", "--topic", "t", "--name", "member-01", "--journal", str(journal),
         "--session-timeout-ms", "6000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    broker = None
    try:
        _wait_for(journal, "error", member)  # refused: it keeps trying instead of exiting
        broker = BrokerProcess(tmp_path / "data", "--port", str(port),
                               "--group-initial-rebalance-delay-ms", "0").start()
        subprocess.run([sys.executable, "-m", "groupwire", "topics", "create", "t",
                        "--partitions", "2", "--bootstrap", f"127.0.0.1:{port}"],
                       check=True, capture_output=True, timeout=WAIT_S)
        _wait_for(journal, "assigned", member)
    finally:
        member.send_signal(signal.SIGTERM)
        try:
            member.wait(WAIT_S)
        finally:
            member.kill()
            if broker is not None:
                broker.kill()
    assert member.returncode == 0, member.stderr.read() if member.stderr else ""
