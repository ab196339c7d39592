"""The reference pages say what the code does: CLI help, broker settings, metrics."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from groupwire.broker import config
from groupwire.broker.metrics import BrokerMetrics, StateViews, watch_cluster, watch_transactions

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOK = _hook()


def _help(*command: str) -> str:
    env = {**os.environ, "COLUMNS": HOOK.HELP_COLUMNS}
    done = subprocess.run([sys.executable, "-m", "groupwire", *command, "--help"],
                          capture_output=True, text=True, env=env, check=True)
    return done.stdout


def test_cli_page_covers_every_command_and_action() -> None:
    commands = [name for name, _ in HOOK.command_helps()]
    assert {"groupwire", "groupwire broker", "groupwire topics create",
            "groupwire groups reset-offsets", "groupwire chaos", "groupwire acls remove",
            "groupwire users add"} <= set(commands)
    assert (DOCS / "reference" / "cli.md").read_text().count(HOOK.begin_marker("cli")) == 1


@pytest.mark.parametrize("command", ["", "broker", "groups reset-offsets", "chaos"])
def test_cli_page_is_what_help_prints(command: str) -> None:
    pages = dict(HOOK.command_helps())
    words = command.split()
    assert pages[" ".join(["groupwire", *words])] == _help(*words)


def test_configuration_page_has_every_setting_with_its_env_var() -> None:
    page = HOOK.config_markdown()
    text = (DOCS / "reference" / "configuration.md").read_text()
    assert text.count(HOOK.begin_marker("config")) == 1
    for opt in config.OPTIONS:
        assert f"`{config.env_of(opt.name)}`" in page
        assert (opt.negative_flag or config.flag_of(opt.name)) in page


def _help_flags(text: str) -> set[str]:
    """Long flags the options section of a ``--help`` lists (``--help`` itself aside)."""
    options = text.split("options:", 1)[1]
    return set(re.findall(r"^\s{2}(--[a-z][a-z-]*)", options, flags=re.MULTILINE)) - {"--help"}


def test_configuration_page_lists_every_flag_broker_help_shows() -> None:
    """The page is generated from OPTIONS; a flag added to the parser another way would
    be missing from it, and the README points here instead of carrying its own table."""
    shown = _help_flags(_help("broker"))
    assert {"--advertised-host", "--segment-bytes", "--log-retention-ms",
            "--log-retention-bytes", "--log-retention-check-interval-ms",
            "--log-level"} <= shown
    listed = set(re.findall(r"^\| `(--[a-z-]+)`", HOOK.config_markdown(), flags=re.MULTILINE))
    assert listed == shown


def _exposed_names() -> set[str]:
    metrics = BrokerMetrics()
    metrics.watch(StateViews(groups_by_state=dict, members=lambda: 0),
                  partition_series=True)  # every family the broker may expose

    class Cluster:  # what a broker in cluster mode adds
        def cluster_counters(self) -> dict[str, int]:
            return {}

        def cluster_gauges(self) -> dict[str, int]:
            return {}
    watch_cluster(metrics, Cluster())

    class Transactions:  # the transaction coordinator's
        def transaction_counters(self) -> dict[str, int]:
            return {}

        def unstable_records(self) -> dict[str, int]:
            return {}
    watch_transactions(metrics, Transactions())
    names = set()
    for family in metrics.registry.collect():
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def test_metrics_page_lists_exactly_the_exposed_metrics() -> None:
    page = (DOCS / "reference" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(groupwire_[a-z_]+)`", page, flags=re.MULTILINE))
    assert documented == _exposed_names()


def test_generated_pages_read_whole_in_the_repository() -> None:
    """The reference pages carry their generated text, so they read on the code host as
    on the built site; a change to a flag, setting or docstring must refresh them."""
    stale = HOOK.refresh_all(DOCS, write=False)
    assert stale == [], (f"out of date: {', '.join(stale)}; run "
                         f"`.venv/bin/python docs/hooks/generated.py` to rewrite them")
    sdk = (DOCS / "reference" / "sdk.md").read_text()
    for name in ("### `Consumer`", "#### `Consumer.getmany`", "### `TopicSpec`",
                 "### `CommitFailedError`"):
        assert name in sdk


def test_a_refresh_replaces_only_the_text_between_the_markers() -> None:
    page = "intro\n<!-- generated:x -->\nold\n<!-- end generated:x -->\noutro\n"
    new = HOOK.refreshed(page, "x", "new\n\n\n\ntext")
    assert new == "intro\n<!-- generated:x -->\n\nnew\n\ntext\n\n<!-- end generated:x -->\noutro\n"
    assert HOOK.refreshed(new, "x", "new\n\ntext") == new
    with pytest.raises(ValueError, match="expected one"):
        HOOK.refreshed("no markers", "x", "text")
