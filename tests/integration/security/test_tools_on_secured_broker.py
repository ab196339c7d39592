"""``groupwire demo`` and ``groupwire chaos`` against a SASL_SSL broker with ACLs on, as a
user runs them: the password comes from the environment, the consumer processes
authenticate too, and refused credentials or permissions are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .secured_proc import SecuredBroker, start_secured_broker

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
BOB, BOB_PASSWORD = "bob", "bob-secret"
RUN_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """One SASL_SSL listener, ``--authorizer acl``, ``admin`` a super user, ``bob`` a
    user without any ACL."""
    broker = start_secured_broker(
        tmp_path_factory.mktemp("secured"), {ADMIN: ADMIN_PASSWORD, BOB: BOB_PASSWORD},
        ADMIN, "--group-initial-rebalance-delay-ms", "0",
        "--group-min-session-timeout-ms", "100", "--connection-loss-grace-ms", "300")
    try:
        yield broker
    finally:
        broker.proc.kill()


def _groupwire(*argv: str, password: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPWIRE_")}
    return subprocess.run([sys.executable, "-m", "groupwire", *argv], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S,
                          env={**env, "GROUPWIRE_SASL_PASSWORD": password})


def test_the_demo_runs_against_a_secured_broker(secured: SecuredBroker) -> None:
    result = _groupwire("demo", *secured.flags(ADMIN, "SCRAM-SHA-256"), "--messages", "300",
                        "--rate", "1000", password=ADMIN_PASSWORD)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "killing consumer-2" in out and "failover" in out
    (summary,) = [line for line in out.splitlines() if line.startswith("summary:")]
    assert "produced 300, consumed 300 distinct" in summary and summary.endswith(" 0 lost")


def test_the_demo_with_a_wrong_password_stops_in_one_line(secured: SecuredBroker) -> None:
    result = _groupwire("demo", *secured.flags(ADMIN), password="not-it")
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert line.startswith("groupwire demo: error: ") and "SASL_AUTHENTICATION_FAILED" in line
    assert "not-it" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_short_chaos_run_against_a_secured_broker(secured: SecuredBroker,
                                                    tmp_path: Path) -> None:
    report = tmp_path / "report"
    result = _groupwire("chaos", *secured.flags(ADMIN), "--consumers", "3", "--faults", "4",
                        "--records", "400", "--rate", "200", "--seed", "2",
                        "--session-timeout-ms", "1000", "--report", str(report),
                        password=ADMIN_PASSWORD)
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads((report / "verdict.json").read_text())
    assert verdict["violations"] == [] and verdict["lost"] == 0
    assert verdict["produced"] == 400 and verdict["processed_distinct"] >= 400
    events = [json.loads(line) for journal in report.glob("member-*.jsonl")
              for line in journal.read_text().splitlines()]
    assert any(e["event"] == "committed" for e in events)
    # every member authenticated, and so did each zombie probe's own connection
    assert not [e for e in events if e["event"] in ("fatal", "error")
                or (e["event"] == "zombie_probe" and "error" in e)]


def test_chaos_as_a_user_without_acls_stops_in_one_line(secured: SecuredBroker) -> None:
    result = _groupwire("chaos", *secured.flags(BOB), "--consumers", "2", "--faults", "0",
                        "--records", "50", password=BOB_PASSWORD)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert line.startswith("groupwire chaos: error: ")
    assert "TOPIC_AUTHORIZATION_FAILED" in line and "CREATE" in line
