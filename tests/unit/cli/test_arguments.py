"""Values the command line checks before it talks to a broker: each refusal is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.cli.arguments import parse_address
from groupwire.cli.chaos.command import options_from
from groupwire.cli.errors import CliError
from groupwire.cli.main import build_parser


@pytest.mark.parametrize(("text", "address"), [
    ("127.0.0.1:9092", ("127.0.0.1", 9092)),
    ("broker.local:1", ("broker.local", 1)),
    ("[::1]:9092", ("::1", 9092)),
])
def test_one_address_is_host_and_port(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["nowhere", "h:", ":9092", "h:0", "h:65536", "h:x",
                                  "a:1,b:2"])
def test_anything_else_names_the_flag(text: str) -> None:
    with pytest.raises(CliError, match=r"^--bootstrap: expected HOST:PORT, got "):
        parse_address(text)


def test_chaos_refuses_flags_that_cannot_work_together() -> None:
    parser = build_parser()
    with pytest.raises(CliError, match="--rebalance-report: needs --report"):
        options_from(parser.parse_args(["chaos", "--rebalance-report"]))
    with pytest.raises(CliError, match="--broker-faults: only with the run's own broker"):
        options_from(parser.parse_args(["chaos", "--bootstrap", "h:1", "--broker-faults", "1"]))
    opts = options_from(parser.parse_args(["chaos", "--seed", "7", "--consumers", "2"]))
    assert (opts.seed, opts.consumers, opts.faults) == (7, 2, 20)


def test_every_subcommand_is_registered() -> None:
    parser = build_parser()
    for argv in (["broker"], ["demo"], ["topics", "list"], ["groups", "lag", "g"],
                 ["produce", "--topic", "t"], ["consume", "--topic", "t"], ["chaos"],
                 ["report", "--out", "o"], ["health"], ["acls", "list"],
                 ["users", "list"]):
        args = parser.parse_args(argv)
        assert args.command == argv[0] and callable(args.func), argv


@pytest.mark.parametrize("argv", [
    ["topics", "create", "t", "--partitions", "-1"],
    ["topics", "list", "--bootstrap", "localhost"],
    ["consume", "--topic", "t", "--bootstrap", "h:1,nowhere"],
    ["chaos", "--consumers", "0"],
    ["topics", "create", "t", "--partitions", "0"],
    ["topics", "create", "t", "--replication-factor", "0"],
    ["topics", "list", "--timeout-ms", "-1"],
    ["consume", "--topic", "t", "--max-messages", "-1"],
    ["consume", "--topic", "t", "--idle-timeout-ms", "-5"],
    ["consume", "--topic", "t", "--timeout-ms", "0"],
    ["produce", "--topic", "t", "--partition", "-1"],
    ["groups", "describe", "g", "--history", "-1"],
    ["groups", "reset-offsets", "g", "--to-offset", "-3"],
    ["groups", "reset-offsets", "g", "--to-timestamp", "-1"],
    ["groups", "lag", "g", "--timeout-ms", "soon"],
])
def test_bad_numbers_are_a_one_line_usage_error(argv: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: argument --" in err, err


def test_good_numbers_pass() -> None:
    args = build_parser().parse_args(["groups", "describe", "g", "--history", "0"])
    assert args.history == 0
    args = build_parser().parse_args(["consume", "--topic", "t", "--max-messages", "1"])
    assert args.max_messages == 1


def test_chaos_refuses_a_report_directory_an_earlier_run_left(tmp_path: Path) -> None:
    """The verdict reads every journal in --report: an earlier run's would count as this
    run's (thousands of 'duplicates'), so a directory with anything in it is refused."""
    parser = build_parser()
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    used.mkdir()
    (used / "member-01.jsonl").write_text("{}\n")
    assert options_from(parser.parse_args(["chaos", "--report", str(fresh)])).report == fresh
    with pytest.raises(CliError, match="not empty"):
        options_from(parser.parse_args(["chaos", "--report", str(used)]))
