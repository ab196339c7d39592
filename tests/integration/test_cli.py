"""The command line as a user meets it: flags, env vars, one-line errors, health."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupwire.broker.config import BrokerSettings, SettingsError, parse_settings


def _groupwire(*args: str, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "groupwire", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_defaults_follow_kafka() -> None:
    s = parse_settings([], environ={})
    assert s == BrokerSettings()
    assert (s.group_initial_rebalance_delay_ms, s.group_min_session_timeout_ms,
            s.group_max_session_timeout_ms, s.new_member_join_timeout_ms,
            s.offsets_retention_check_interval_ms, s.offset_metadata_max_bytes,
            s.offsets_topic_num_partitions) == (3000, 6000, 1800000, 300000, 600000, 4096, 50)
    assert s.ownership_fencing is True


def test_flag_beats_env_beats_default() -> None:
    env = {"GROUPWIRE_PORT": "9999", "GROUPWIRE_CONNECTION_LOSS_GRACE_MS": "250",
           "GROUPWIRE_OWNERSHIP_FENCING": "false"}
    s = parse_settings(["--port", "7777"], environ=env)
    assert (s.port, s.connection_loss_grace_ms, s.ownership_fencing) == (7777, 250, False)
    s = parse_settings(["--no-ownership-fencing", "--data-dir", "/x"], environ={})
    assert s.ownership_fencing is False and s.data_dir == Path("/x")


@pytest.mark.parametrize(("argv", "env", "flag"), [
    (["--port", "abc"], {}, "--port"),
    (["--port", "70000"], {}, "--port"),
    (["--fsync", "sometimes"], {}, "--fsync"),
    ([], {"GROUPWIRE_GROUP_MAX_SIZE": "0"}, "--group-max-size"),
    (["--group-min-session-timeout-ms", "9", "--group-max-session-timeout-ms", "8"], {},
     "--group-min-session-timeout-ms"),
])
def test_bad_values_name_their_flag(argv: list[str], env: dict[str, str], flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        parse_settings(argv, environ=env)


def test_bad_flag_is_one_line_without_traceback() -> None:
    result = _groupwire("broker", "--port", "nope")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--port" in lines[0] and "Traceback" not in result.stderr


def test_every_broker_flag_has_help() -> None:
    result = _groupwire("broker", "--help")
    assert result.returncode == 0
    for flag in ("--host", "--port", "--data-dir", "--metrics-port", "--num-partitions",
                 "--auto-create-topics", "--fsync", "--group-initial-rebalance-delay-ms",
                 "--group-min-session-timeout-ms", "--group-max-session-timeout-ms",
                 "--group-max-size", "--offsets-retention-minutes",
                 "--offsets-retention-check-interval-ms", "--offset-metadata-max-bytes",
                 "--new-member-join-timeout-ms", "--connection-loss-grace-ms",
                 "--no-ownership-fencing", "--max-frame-bytes", "--log-format"):
        assert flag in result.stdout, flag


async def test_health_reports_a_live_broker_and_a_dead_port(broker) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    ok = await asyncio.to_thread(_groupwire, "health", "--bootstrap",
                                 f"127.0.0.1:{broker.port}", "--json")
    assert ok.returncode == 0 and '"ok": true' in ok.stdout
    port = broker.port
    await broker.close()
    dead = await asyncio.to_thread(_groupwire, "health", "--bootstrap", f"127.0.0.1:{port}",
                                   "--timeout-ms", "1000")
    assert dead.returncode == 1 and dead.stderr.startswith("unhealthy")
