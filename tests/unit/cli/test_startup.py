"""``groupwire`` imports only what the command it runs needs (issue 25).

Every command cost 0.9–1.4 s, ``--version`` and usage errors included, because the
parser imported every subcommand and with them the broker and the whole SDK. These
tests check what gets imported (in a fresh interpreter), not how long it takes:
bench/cli_startup.py measures the time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from groupwire.cli.main import COMMANDS, build_parser, command_of, main

PROBE = """
import json, sys
from groupwire.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(*argv: str) -> tuple[int, list[str], str]:
    """Exit code, every module imported, and stdout of ``groupwire ARGV`` in a fresh
    interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"], done.stdout


def _ours(modules: list[str], prefix: str) -> list[str]:
    return [m for m in modules if m == prefix or m.startswith(prefix + ".")]


def test_version_imports_neither_the_broker_nor_the_sdk() -> None:
    code, modules, out = _run("--version")
    assert code == 0 and out.startswith("groupwire ")
    assert _ours(modules, "groupwire.broker") == []
    assert _ours(modules, "groupwire.client") == []
    assert _ours(modules, "groupwire.protocol") == []


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["nosuch"],
    ["topics", "--help"],
    ["topics", "list", "--help"],
    ["topics", "list", "--bootstrap", "not-an-address"],
    ["topics", "create"],
    ["groups", "describe", "--help"],
    ["cluster", "brokers", "--help"],
    ["acls", "list", "--help"],
    ["users", "list", "--help"],
    ["users", "add", "--help"],
    ["produce", "--help"],
    ["consume", "--topic"],
    ["health", "--help"],
    ["report", "--help"],
    # commands that run a broker import it when they run it, not to parse their flags
    ["demo", "--help"],
    ["chaos", "--help"],
    ["chaos", "--consumers", "0"],
], ids=" ".join)
def test_parsing_a_client_command_imports_no_broker(argv: list[str]) -> None:
    code, modules, _ = _run(*argv)
    assert code in (0, 2)
    assert _ours(modules, "groupwire.broker") == []


def test_only_the_command_run_is_imported() -> None:
    _, modules, _ = _run("topics", "list", "--help")
    assert "groupwire.cli.topics" in modules
    assert not {"groupwire.cli.groups", "groupwire.cli.records", "groupwire.cli.demo",
                "groupwire.cli.chaos.command", "groupwire.cli.users"} & set(modules)
    assert "groupwire.client.consumer" not in modules  # topics needs the Admin only


def test_broker_help_reads_the_settings_table_and_imports_no_server() -> None:
    code, modules, out = _run("broker", "--help")
    assert code == 0 and "--data-dir" in out
    assert "groupwire.broker.config" in modules
    assert "groupwire.broker.server" not in modules


def test_the_listing_is_what_each_command_registers() -> None:
    """COMMANDS names every command with the help its module gives it, in order: the
    lazy parser's ``groupwire --help`` is the full parser's."""
    full, listed = build_parser(), build_parser(load=())
    assert listed.format_help() == full.format_help()
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    names = [name for _, commands in COMMANDS for name in commands]
    assert list(sub.choices) == names
    helps = {action.dest: action.help for action in sub._choices_actions}
    assert helps == {name: text for _, commands in COMMANDS for name, text in commands.items()}


@pytest.mark.parametrize("argv", [
    ["topics", "list"],
    ["groups", "lag", "g"],
    ["produce", "--topic", "t", "--value", "v"],
    ["consume", "--topic", "t"],
    ["broker", "--port", "9"],
    ["health"],
])
def test_the_command_is_found_as_argparse_finds_it(argv: list[str]) -> None:
    assert command_of(argv) == build_parser().parse_args(argv).command


def test_no_command_is_none() -> None:
    assert command_of([]) is None and command_of(["--version"]) is None


def test_a_bad_broker_setting_is_one_usage_line(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """SettingsError is matched without importing the broker's settings up front."""
    monkeypatch.setenv("GROUPWIRE_PORT", "nope")
    assert main(["broker"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("groupwire broker: error: ") and "GROUPWIRE_PORT" in err
    assert len(err.strip().splitlines()) == 1


def test_the_sdk_package_imports_its_modules_when_a_name_is_used() -> None:
    code = ("import sys, groupwire.client.types\n"
            "before = 'groupwire.client.admin' in sys.modules\n"
            "from groupwire.client import Admin, TopicPartition, error_for\n"
            "print(before, 'groupwire.client.admin' in sys.modules,"
            " 'groupwire.client.consumer' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "True", "False"]
