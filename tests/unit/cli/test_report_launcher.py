"""``groupwire report``'s checks before any Spark starts, and the child job's command."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from groupwire.cli import report as report_cli


def test_missing_pyspark_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyspark" else real(name, *a))
    reason = report_cli.spark_missing()
    assert reason is not None and "pyspark is not installed" in reason
    assert "groupwire[spark]" in reason


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(report_cli.shutil, "which", lambda name: None)
    assert report_cli.spark_missing() == (
        "Spark needs Java 17: no java on PATH and JAVA_HOME is not set")
    monkeypatch.setenv("JAVA_HOME", "/opt/jdk")
    assert report_cli.spark_missing() is None


def test_the_child_job_gets_every_option(tmp_path: Path) -> None:
    cmd = report_cli.job_command("h:1", tmp_path, group="g", since_ms=5, master="local[2]")
    assert cmd == [sys.executable, "-m", "groupwire.pipeline.report", "--bootstrap", "h:1", "--out",
                   str(tmp_path), "--group", "g", "--since", "5", "--master", "local[2]"]
    assert "--master" not in report_cli.job_command("h:1", tmp_path, master=None)


def test_a_failed_jobs_log_is_reduced_to_its_telling_line(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    log.write_text("WARN NativeCodeLoader: whatever\nTraceback (most recent call last):\n"
                   "  File x\npyspark.errors.exceptions.captured.PythonException: groupwire:"
                   " cannot reach 127.0.0.1:1\n\tat org.apache.Foo\n")
    assert report_cli.last_error(log).startswith("pyspark.errors.exceptions.captured")
    assert report_cli.last_error(tmp_path / "absent.log") == "see the Spark log"
