"""Readers for the container and deploy files, so tests compare them with each other.

The image's command line is the contract: the wheel test runs exactly it, and the
compose file, Kubernetes manifests and dashboard are checked against it.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "groupwire.json"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus.yml"

# The metric names the broker exposes and the dashboard shows (the brief's contract).
CONTRACT_METRICS = frozenset({
    "groupwire_requests_total",
    "groupwire_request_latency_seconds",
    "groupwire_connections",
    "groupwire_groups",
    "groupwire_members",
    "groupwire_rebalances_total",
    "groupwire_rebalance_duration_seconds",
    "groupwire_member_expirations_total",
    "groupwire_group_committed_offset",
    "groupwire_topic_log_end_offset",
    "groupwire_group_lag",
    "groupwire_bytes_in_total",
    "groupwire_bytes_out_total",
})
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """Logical Dockerfile instructions: comments dropped, continuation lines joined."""
    out: list[Instruction] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1].rstrip() + " "
            continue
        keyword, _, args = (buf + line).partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
        buf = ""
    return out


def stages(text: str) -> list[list[Instruction]]:
    """Instructions grouped by build stage, each list starting with its FROM."""
    result: list[list[Instruction]] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def final_stage() -> list[Instruction]:
    return stages(DOCKERFILE.read_text())[-1]


def last(stage: list[Instruction], keyword: str) -> Instruction:
    found = [ins for ins in stage if ins.keyword == keyword]
    assert found, f"no {keyword} in the Dockerfile's final stage"
    return found[-1]


def exec_form(ins: Instruction) -> list[str]:
    value = json.loads(ins.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), ins
    return value


def image_argv() -> list[str]:
    """What the container runs: ENTRYPOINT followed by CMD."""
    stage = final_stage()
    return exec_form(last(stage, "ENTRYPOINT")) + exec_form(last(stage, "CMD"))


def option(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def with_options(argv: list[str], **values: str) -> list[str]:
    """argv with the values of some flags replaced (`data_dir=` sets --data-dir)."""
    out = list(argv)
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        out[out.index(flag) + 1] = value
    return out


def healthcheck_argv() -> tuple[dict[str, str], list[str]]:
    """HEALTHCHECK options and the groupwire command it runs (before any `|| exit 1`)."""
    args = last(final_stage(), "HEALTHCHECK").args
    opts_text, sep, command = args.partition("CMD ")
    assert sep, f"HEALTHCHECK without CMD: {args}"
    opts = dict(o.removeprefix("--").split("=", 1) for o in opts_text.split())
    if command.lstrip().startswith("["):
        argv = json.loads(command)
        if argv[:2] == ["sh", "-c"] or argv[:2] == ["/bin/sh", "-c"]:
            argv = shlex.split(argv[2])
    else:
        argv = shlex.split(command)
    if "||" in argv:
        argv = argv[: argv.index("||")]
    return opts, argv


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def package_dirs() -> dict[str, str]:
    """Repository folder of each package the wheel ships, from pyproject's package-dir.

    Only the mapped roots are listed (``groupwire`` and its layers); their subpackages
    travel with them.
    """
    return dict(pyproject()["tool"]["setuptools"]["package-dir"])


def shipped_packages() -> list[str]:
    return list(pyproject()["tool"]["setuptools"]["packages"])


def package_folder(package: str) -> Path:
    """Where ``package`` (a dotted name the wheel ships) lives in the repository."""
    mapping = package_dirs()
    root = max((name for name in mapping if package == name or package.startswith(name + ".")),
               key=len)
    rest = package[len(root):].lstrip(".")
    return ROOT / mapping[root] / Path(*rest.split(".")) if rest else ROOT / mapping[root]


def metric_names(expr: str) -> set[str]:
    """Metric families a PromQL expression reads (histogram series mapped to the family)."""
    names = set()
    for name in re.findall(r"\bgroupwire_[a-z_]+", expr):
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in CONTRACT_METRICS:
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def dashboard_exprs() -> list[str]:
    def walk(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node[k] for k in ("expr", "definition") if isinstance(node.get(k), str)]
            return found + [e for v in node.values() for e in walk(v)]
        if isinstance(node, list):
            return [e for v in node for e in walk(v)]
        return []

    return walk(json.loads(DASHBOARD.read_text()))


def dashboard_metrics() -> set[str]:
    return {name for expr in dashboard_exprs() for name in metric_names(expr)}


def yaml_list(text: str, key: str) -> list[str]:
    """The plain items of a top-level block sequence ``key:`` (``  - item`` lines)."""
    match = re.search(rf"^{key}:\s*\n((?:[ \t]+-[^\n]*\n|[ \t]*#[^\n]*\n)+)", text,
                      re.MULTILINE)
    if match is None:
        return []
    return [line.strip()[1:].strip().strip('"')
            for line in match.group(1).splitlines() if line.strip().startswith("-")]


def rule_files() -> list[Path]:
    """The rule files deploy/prometheus.yml loads, resolved as Prometheus does."""
    text = PROMETHEUS_CONFIG.read_text()
    return [PROMETHEUS_CONFIG.parent / name for name in yaml_list(text, "rule_files")]


def alert_rules(path: Path) -> dict[str, str]:
    """``{alert name: expr}`` of a rule file, folded (``>-``) expressions joined."""
    rules: dict[str, str] = {}
    alert = ""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        named = re.match(r"^\s*-\s*alert:\s*(\S+)", line)
        if named:
            alert = named.group(1)
            continue
        expr = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not expr:
            continue
        assert alert and alert not in rules, f"{path.name}:{i + 1}: expr outside one alert"
        indent, value = len(expr.group(1)), expr.group(2).strip()
        if value in (">-", ">", "|", "|-"):
            body = []
            for more in lines[i + 1:]:
                if more.strip() and len(more) - len(more.lstrip()) <= indent:
                    break
                body.append(more.strip())
            value = " ".join(part for part in body if part)
        rules[alert] = value
    return rules


def alert_metrics() -> set[str]:
    """Metric families the shipped alert rules read."""
    return {name for path in rule_files() for expr in alert_rules(path).values()
            for name in metric_names(expr)}
