"""The Prometheus alert rules: valid, loaded by the compose Prometheus, firing when they
should, and reading only metrics the broker exposes.

promtool (Debian's `prometheus` package; .ci/run installs it when it can) checks the files;
without it those tests skip and say so. The rest are plain text checks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from groupwire.broker.metrics import BrokerMetrics, StateViews, watch_cluster

from .imagefiles import (
    COMPOSE,
    PROMETHEUS_CONFIG,
    ROOT,
    alert_metrics,
    alert_rules,
    rule_files,
)

pytestmark = pytest.mark.packaging

RULE_TESTS = Path(__file__).with_name("alerts_test.yml")
CONTAINER_CONFIG_DIR = "/etc/prometheus"
# What an operator is paged for, each by the metric that shows it.
PAGED_ON = {
    "broker down": "up",
    "consumer lag growing": "groupwire_group_lag",
    "rebalance storms": "groupwire_rebalances_total",
    "fenced commits": "groupwire_commits_fenced_total",
    "storage errors": "groupwire_storage_errors_total",
    "expirations": "groupwire_member_expirations_total",
    "under-replicated partitions": "groupwire_cluster_under_replicated_partitions",
    "offline partitions": "groupwire_cluster_offline_partitions",
    "no controller": "groupwire_cluster_is_controller",
    "a fenced broker": "groupwire_cluster_fenced",
    "failed logins": "groupwire_sasl_authentications_total",
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found: install Debian's `prometheus` package "
                    "(apt-get install prometheus), as .ci/run does")
    return found


def run_promtool(*args: str) -> None:
    result = subprocess.run([promtool(), *args], capture_output=True, text=True,
                            timeout=60, cwd=ROOT, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"


def all_exprs() -> dict[str, str]:
    return {name: expr for path in rule_files() for name, expr in alert_rules(path).items()}


def test_prometheus_config_loads_alert_rules() -> None:
    files = rule_files()
    assert files, "deploy/prometheus.yml has no rule_files"
    for path in files:
        assert path.is_file(), f"deploy/prometheus.yml loads missing {path}"
        assert alert_rules(path), f"{path} holds no alerts"


def test_compose_mounts_the_rules_where_the_config_looks() -> None:
    compose = COMPOSE.read_text()
    assert (f"./deploy/prometheus.yml:{CONTAINER_CONFIG_DIR}/prometheus.yml:ro" in compose)
    assert f"--config.file={CONTAINER_CONFIG_DIR}/prometheus.yml" in compose
    mounts = dict(re.findall(r"^\s*-\s*\"?\./(deploy/[^:\s\"]+):([^:\s\"]+)", compose,
                             re.MULTILINE))
    for path in rule_files():
        relative = path.relative_to(PROMETHEUS_CONFIG.parent).as_posix()
        in_container = f"{CONTAINER_CONFIG_DIR}/{relative}"
        assert any(in_container == target or in_container.startswith(target + "/")
                   for target in mounts.values()), (
            f"docker-compose.yml does not mount {relative} at {in_container}")
        for source, target in mounts.items():
            if in_container.startswith(target + "/"):
                assert (ROOT / source / in_container.removeprefix(target + "/")).is_file()


def test_compose_prometheus_has_a_healthcheck() -> None:
    compose = COMPOSE.read_text()
    service = re.search(r"^  prometheus:\n((?:    .*\n|\s*\n)+)", compose, re.MULTILINE)
    assert service is not None
    assert "healthcheck:" in service.group(1)
    assert "/-/healthy" in service.group(1)


def test_alerts_cover_what_an_operator_pages_on() -> None:
    read = {name for expr in all_exprs().values()
            for name in re.findall(r"\b[a-z_]+(?=[{\[\s)]|$)", expr)}
    missing = {page: metric for page, metric in PAGED_ON.items() if metric not in read}
    assert not missing, f"no alert for {sorted(missing)}"


def test_broker_down_alert_names_the_scrape_job() -> None:
    jobs = set(re.findall(r"job_name:\s*(\S+)", PROMETHEUS_CONFIG.read_text()))
    used = {job for expr in all_exprs().values() for job in re.findall(r'job="([^"]+)"', expr)}
    assert used and used <= jobs, (used, jobs)


class _NoCluster:
    def cluster_counters(self) -> dict[str, int]:
        return {}

    def cluster_gauges(self) -> dict[str, int]:
        return {}


def _exposed_families() -> set[str]:
    metrics = BrokerMetrics()
    metrics.watch(StateViews(groups_by_state=dict, members=lambda: 0),
                  partition_series=True)  # every family the broker may expose
    watch_cluster(metrics, _NoCluster())  # what a cluster-mode broker adds
    return {family.name + "_total" if family.type == "counter" else family.name
            for family in metrics.registry.collect()}


def test_alerts_read_only_metrics_the_broker_defines() -> None:
    unknown = alert_metrics() - _exposed_families()
    assert not unknown, f"alert rules read metrics the broker does not define: {unknown}"


def test_promtool_check_rules() -> None:
    for path in rule_files():
        run_promtool("check", "rules", str(path))


def test_promtool_check_config() -> None:
    run_promtool("check", "config", str(PROMETHEUS_CONFIG))


def test_promtool_alerts_fire_when_they_should() -> None:
    run_promtool("test", "rules", str(RULE_TESTS))
