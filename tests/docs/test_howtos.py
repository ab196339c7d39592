"""Each how-to page, the tutorial and the README run as written: their commands in order
in a fresh directory, so a page that stops working fails here (the runner and the
words a page gives it: tests/docs/howto.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from .howto import ROOT, Block, HowtoError, PageSkipped, cover_problem, parse_page, run_page

PAGES = ["README.md", "docs/tutorial.md", "docs/how-to/security.md",
         "docs/how-to/cluster.md", "docs/how-to/chaos.md", "docs/how-to/db-offsets.md",
         "docs/how-to/spark.md", "docs/how-to/deploy.md", "docs/how-to/aiokafka.md",
         "docs/how-to/kafka-clients.md", "docs/how-to/exactly-once.md"]
TIERS = {"docs/how-to/chaos.md": pytest.mark.chaos, "docs/how-to/spark.md": pytest.mark.spark}
"""Pages that run chaos or Spark take those tiers' markers too, so ``-m "not spark"``
leaves them out with the rest of their tier."""


@pytest.mark.slow
@pytest.mark.parametrize("page", [pytest.param(p, marks=TIERS[p]) if p in TIERS else p
                                  for p in PAGES])
def test_page_runs_as_written(page: str, tmp_path: Path) -> None:
    failure = None
    try:
        skipped = run_page(ROOT / page, tmp_path)
    except PageSkipped as exc:
        pytest.skip(f"{page}: {exc}")
    except HowtoError as exc:
        failure = str(exc)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    print(f"{page}: not run: " + "; ".join(skipped) if skipped else f"{page}: all run")


@pytest.mark.parametrize("page", PAGES)
def test_page_marks_parse(page: str) -> None:
    """Cheap, and runs where the tools are missing: every howto word is known and sits
    right before a block, every python block says what to do with it, and every
    ``covered-by`` test exists and passes the flags of the command it covers."""
    parsed = parse_page(ROOT / page)
    for step in parsed.steps:
        if isinstance(step, Block) and step.lang == "python":
            assert step.attrs, f"{page}:{step.line}: a python block without save/python/skip"
        if isinstance(step, Block) and "covered-by" in step.attrs:
            for command in step.commands():
                problem = cover_problem(step.attrs["covered-by"], command.text)
                assert problem is None, f"{page}:{step.line}: {problem}"


# --- the runner itself -------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_a_failing_command_fails_the_page_naming_it(tmp_path: Path) -> None:
    page = write(tmp_path, "# P\n\n```sh\ntrue\necho 'some output'; false\n```\n")
    with pytest.raises(HowtoError) as failed:
        run_page(page, tmp_path / "run")
    message = str(failed.value)
    assert "page.md:3: exit status 1" in message
    assert "echo 'some output'; false" in message
    assert "some output" in message


def test_variables_carry_over_and_outputs_are_compared(tmp_path: Path) -> None:
    page = write(tmp_path, "# P\n\n```console\n$ B=one\n$ echo $B \\\n    two\none two\n```\n"
                 "\n```console\n$ echo 'took 3.2 ms'\ntook 1.5 ms\n```\n")
    assert run_page(page, tmp_path / "ok") == []
    wrong = write(tmp_path, "# P\n\n```console\n$ echo 'user alice'\nuser bob\n```\n")
    with pytest.raises(HowtoError, match="missing:\n  user bob"):
        run_page(wrong, tmp_path / "wrong")


def test_expect_fail_and_skip(tmp_path: Path) -> None:
    page = write(tmp_path, "# P\n\n<!-- howto: expect-fail -->\n```sh\nfalse\n```\n\n"
                 "<!-- howto: skip needs a Docker daemon -->\n```sh\ndocker ps\n```\n")
    assert run_page(page, tmp_path / "ok") == ["line 9: needs a Docker daemon"]
    passing = write(tmp_path, "# P\n\n<!-- howto: expect-fail -->\n```sh\ntrue\n```\n")
    with pytest.raises(HowtoError, match="exit status 0 where the page expects a failure"):
        run_page(passing, tmp_path / "passing")


def test_background_commands_are_waited_for_and_killed_at_the_end(tmp_path: Path) -> None:
    page = write(tmp_path, "# P\n\n<!-- howto: background; pid SLEEPER -->\n```sh\n"
                 "sh -c 'echo ready; exec sleep 300'\n```\n\n<!-- howto: wait SLEEPER ready -->\n"
                 "```console\n$ echo $SLEEPER > pid\n```\n")
    run_page(page, tmp_path / "run")
    pid = int((tmp_path / "run" / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def test_listed_ports_are_replaced_by_free_ones(tmp_path: Path) -> None:
    page = write(tmp_path, "# P\n<!-- howto: ports 9092 -->\n\n```sh\n"
                 "echo 127.0.0.1:9092 > port\n```\n")
    run_page(page, tmp_path / "run")
    port = (tmp_path / "run" / "port").read_text().strip().split(":")[1]
    assert port != "9092" and port.isdigit()


COVER = "tests/chaos/test_cluster_chaos.py::test_a_short_cluster_run_loses_nothing"


def test_a_covered_command_is_parsed_not_run(tmp_path: Path) -> None:
    page = write(tmp_path, f"# P\n\n```sh\nS=11\n```\n\n<!-- howto: covered-by {COVER} -->\n"
                 "```sh\n.venv/bin/groupwire chaos --cluster 3 --report ./r \\\n"
                 "    --seed $S --records 5\n```\n")
    assert run_page(page, tmp_path / "ok") == []
    transcript = (tmp_path / "ok" / ".howto" / "transcript.txt").read_text()
    assert "parsed: groupwire chaos" in transcript
    assert not (tmp_path / "ok" / "r").exists()  # a run would have made its report dir


@pytest.mark.parametrize(("mark", "command", "failure"), [
    (COVER, "groupwire chaos --cluster 2", "a cluster needs 3 brokers"),  # the parser's
    (COVER, "groupwire chaos --sed 11", "the test does not pass --sed"),
    (COVER, "groupwire demo --cluster 3", "unrecognized arguments: --cluster"),
    (COVER, "echo --cluster 3", "not a groupwire command"),
    ("tests/chaos/test_cluster_chaos.py::test_gone", "groupwire chaos", "has no test test_gone"),
    ("tests/chaos/gone.py::test_x", "groupwire chaos", "no such test file")])
def test_a_cover_that_does_not_hold_fails_the_page(tmp_path: Path, mark: str, command: str,
                                                   failure: str) -> None:
    page = write(tmp_path, f"# P\n\n<!-- howto: covered-by {mark} -->\n```sh\n{command}\n```\n")
    with pytest.raises(HowtoError, match=failure):
        run_page(page, tmp_path / "run")
