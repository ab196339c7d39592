"""The command line as a user meets it: flags, env vars, one-line errors, health."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import groupwire
from groupwire.broker.config import BrokerSettings, SettingsError, parse_settings
from groupwire.client.admin import Admin
from groupwire.client.types import TopicPartition


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


def test_version_is_the_installed_packages() -> None:
    declared = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    version = declared["project"]["version"]
    assert metadata.version("groupwire") == groupwire.__version__ == version
    result = _groupwire("--version")
    assert result.returncode == 0 and result.stdout == f"groupwire {version}\n"


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
    ok = await asyncio.to_thread(_groupwire, "health", "--bootstrap",
                                 f"127.0.0.1:{broker.port}", "--json")
    assert ok.returncode == 0 and '"ok": true' in ok.stdout
    port = broker.port
    await broker.close()
    dead = await asyncio.to_thread(_groupwire, "health", "--bootstrap", f"127.0.0.1:{port}",
                                   "--timeout-ms", "1000")
    assert dead.returncode == 1 and dead.stderr.startswith("unhealthy")


# --- the SDK commands as a user meets them: signals and piped output -----------------------

SIGNAL_EXIT_S = 20  # a bound for a hang, not a timing claim


@pytest.fixture
async def admin(broker):  # type: ignore[no-untyped-def]
    async with Admin(f"127.0.0.1:{broker.port}", request_timeout_ms=5000) as a:
        yield a


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "groupwire", *args], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll the broker's state (the subprocess gives no other event) for a bounded time."""
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_ends_produce_on_an_open_stdin_with_its_summary(  # type: ignore[no-untyped-def]
        broker, admin, sig: signal.Signals) -> None:

    await admin.create_topics("typed", 1)
    proc = _spawn("produce", "--topic", "typed", "--bootstrap", f"127.0.0.1:{broker.port}")
    try:
        assert proc.stdin is not None
        proc.stdin.write("first line\n")
        proc.stdin.flush()  # and stdin stays open, as at a terminal

        async def landed() -> bool:
            ends = await admin.list_offsets({TopicPartition("typed", 0): -1})
            return ends[TopicPartition("typed", 0)] == 1

        await _until(landed, "the first line produced")
        proc.send_signal(sig)
        out, err = await asyncio.to_thread(proc.communicate, timeout=SIGNAL_EXIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "produced 1 record(s) to typed" in out and "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_ends_consume_leaving_its_group(  # type: ignore[no-untyped-def]
        broker, admin, sig: signal.Signals) -> None:
    await admin.create_topics("feed", 2)
    proc = _spawn("consume", "--topic", "feed", "--group", "watchers",
                  "--bootstrap", f"127.0.0.1:{broker.port}")
    try:
        async def joined() -> bool:
            (g,) = await admin.describe_groups("watchers")
            return g.state == "Stable" and len(g.members) == 1

        await _until(joined, "the consumer in its group")
        proc.send_signal(sig)
        _, err = await asyncio.to_thread(proc.communicate, timeout=SIGNAL_EXIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "consumed 0 record(s) from feed" in err and "Traceback" not in err
    (g,) = await admin.describe_groups("watchers")
    assert g.state == "Empty" and g.members == []  # it left: no wait for a session timeout


async def test_piped_output_is_plain_lines_that_never_wrap(  # type: ignore[no-untyped-def]
        broker, admin) -> None:
    long_name = "a-topic-whose-name-alone-is-longer-than-a-narrow-terminal-" + "x" * 40
    await admin.create_topics(long_name, 2)
    env = {"COLUMNS": "80"}
    listed = await asyncio.to_thread(_groupwire, "topics", "list", "--bootstrap",
                                     f"127.0.0.1:{broker.port}", env=env)
    assert listed.returncode == 0
    assert listed.stdout.splitlines() == ["topics", "topic\tpartitions\tinternal",
                                          f"{long_name}\t2\t"]
    produced = await asyncio.to_thread(_groupwire, "produce", "--topic", long_name, "--value",
                                       "v", "--partition", "1", "--bootstrap",
                                       f"127.0.0.1:{broker.port}", env=env)
    assert f"produced 1 record(s) to {long_name}" in produced.stdout.splitlines()


def test_group_max_size_is_bounded_by_what_a_sync_group_can_carry() -> None:
    from groupwire.protocol.limits import MAX_ARRAY_ITEMS

    assert parse_settings([], environ={}).group_max_size == MAX_ARRAY_ITEMS
    with pytest.raises(SettingsError, match="--group-max-size"):
        parse_settings(["--group-max-size", str(MAX_ARRAY_ITEMS + 1)], environ={})
