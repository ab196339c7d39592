"""The README's first screen gets a new user going: where `groupwire` comes from, the
defaults they ask about (stated as the code has them), and no flag table to drift.
"""

from __future__ import annotations

import inspect
import re
import subprocess

import pytest

from groupwire import Consumer
from groupwire.broker.config import BrokerSettings, flag_of
from groupwire.cli.main import build_parser

from .imagefiles import ROOT

pytestmark = pytest.mark.packaging

README = ROOT / "README.md"
FIRST_SCREEN_LINES = 40
TOP_COMMANDS = ["./dev.sh run", "./dev.sh test"]


def readme() -> str:
    return README.read_text()


def first_screen() -> str:
    return "\n".join(readme().splitlines()[:FIRST_SCREEN_LINES])


def test_the_two_commands_open_the_readme() -> None:
    block = re.search(r"```sh\n(.*?)```", readme(), re.DOTALL)
    assert block is not None and block.start() < 20
    assert [line.split("#")[0].strip() for line in block.group(1).splitlines()] == TOP_COMMANDS


def test_first_screen_says_how_groupwire_gets_on_the_path() -> None:
    screen = first_screen()
    assert "source .venv/bin/activate" in screen
    assert "./dev.sh groupwire" in screen


def test_dev_sh_passes_groupwire_through() -> None:
    script = (ROOT / "dev.sh").read_text()
    case = re.search(r"^\s+groupwire\)\n((?:.*\n){1,3}?)\s+;;", script, re.MULTILINE)
    assert case is not None, "dev.sh has no `groupwire` command"
    assert 'exec "$VENV/bin/groupwire" "$@"' in case.group(1)
    assert "ensure_venv" in case.group(1)
    subprocess.run(["bash", "-n", str(ROOT / "dev.sh")], check=True, timeout=30)


def test_first_screen_states_the_auto_commit_default() -> None:
    default = inspect.signature(Consumer).parameters["enable_auto_commit"].default
    screen = first_screen()
    assert f"enable_auto_commit={default}" in screen
    assert ("auto-commits** by default" if default else "does not auto-commit") in screen


def test_first_screen_states_the_initial_rebalance_delay() -> None:
    delay_ms = BrokerSettings().group_initial_rebalance_delay_ms
    screen = first_screen()
    assert f"{flag_of('group_initial_rebalance_delay_ms')} {delay_ms}" in screen
    assert f"{delay_ms / 1000:g} s" in screen


def test_readme_points_at_the_generated_flag_reference_instead_of_a_table() -> None:
    text = readme()
    assert not re.search(r"^\|\s*`?--[a-z]", text, re.MULTILINE), "hand-written flag table"
    assert "(docs/reference/configuration.md)" in first_screen()
    assert "groupwire broker --help" in first_screen()


def test_readme_commands_exist() -> None:
    parser = build_parser()
    commands = {name for action in parser._actions
                if hasattr(action, "choices") and isinstance(action.choices, dict)
                for name in action.choices}
    used = set(re.findall(r"`groupwire ([a-z][a-z-]*)", readme()))
    assert used, "the README names no groupwire command"
    assert used <= commands, used - commands
