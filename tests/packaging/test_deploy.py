"""deploy/: Kubernetes manifests and the Grafana dashboard agree with the image.

Plain text checks: PyYAML is not a dependency.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .imagefiles import (
    CONTRACT_METRICS,
    DASHBOARD,
    ROOT,
    dashboard_exprs,
    dashboard_metrics,
    final_stage,
    healthcheck_argv,
    image_argv,
    last,
    metric_names,
    option,
)

pytestmark = pytest.mark.packaging

K8S = ROOT / "deploy" / "k8s"
GRAFANA = ROOT / "deploy" / "grafana"


def statefulset() -> str:
    return (K8S / "statefulset.yaml").read_text()


def flow_sequence(text: str, key: str) -> list[list[str]]:
    """Every `key: [..]` YAML flow sequence of double-quoted strings (JSON-compatible)."""
    return [json.loads("[" + body + "]")
            for body in re.findall(rf"\b{key}:\s*\[([^\]]*)\]", text)]


def test_statefulset_runs_the_image_command() -> None:
    assert "kind: StatefulSet" in statefulset()
    assert flow_sequence(statefulset(), "args") == [image_argv()[1:]]


def test_probes_use_groupwire_health_on_the_broker_port() -> None:
    _opts, health = healthcheck_argv()
    text = statefulset()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert f"{probe}:" in text
    commands = flow_sequence(text, "command")
    assert len(commands) == 3
    assert all(cmd == health for cmd in commands)


def test_data_lives_on_a_claim_mounted_at_the_data_dir() -> None:
    text = statefulset()
    assert "volumeClaimTemplates:" in text
    assert f"mountPath: {option(image_argv(), '--data-dir')}" in text


def test_pods_run_as_the_image_uid() -> None:
    uid = last(final_stage(), "USER").args.split(":")[0]
    assert f"runAsUser: {uid}" in statefulset()
    assert "runAsNonRoot: true" in statefulset()


def test_prometheus_annotations_name_the_metrics_port() -> None:
    port = option(image_argv(), "--metrics-port")
    for path in (K8S / "statefulset.yaml", K8S / "service.yaml"):
        text = path.read_text()
        assert 'prometheus.io/scrape: "true"' in text, path.name
        assert f'prometheus.io/port: "{port}"' in text, path.name
    assert f"containerPort: {port}" in statefulset()


def test_service_exposes_the_broker_port() -> None:
    port = option(image_argv(), "--port")
    service = (K8S / "service.yaml").read_text()
    assert "kind: Service" in service
    assert f"port: {port}" in service
    assert f"containerPort: {port}" in statefulset()


def test_kustomization_lists_existing_manifests() -> None:
    text = (K8S / "kustomization.yaml").read_text()
    resources = re.findall(r"^\s+-\s+(\S+\.ya?ml)\s*$", text, re.MULTILINE)
    assert set(resources) == {"service.yaml", "statefulset.yaml"}
    assert all((K8S / r).is_file() for r in resources)


# --- Grafana ---------------------------------------------------------------------------


SECURITY_METRICS = frozenset({"groupwire_sasl_authentications_total",
                              "groupwire_authorization_denials_total"})
"""What the Security row reads (documented in docs/reference/metrics.md, which
tests/unit/docs checks against what the broker exposes)."""


def test_dashboard_reads_only_contract_cluster_and_security_metrics() -> None:
    # The Cluster row reads groupwire_cluster_* (test_cluster_deploy.py checks those
    # against docs/reference/metrics.md), the Security row SECURITY_METRICS; everything
    # else is the contract.
    unknown = {m for m in dashboard_metrics() - CONTRACT_METRICS - SECURITY_METRICS
               if not m.startswith("groupwire_cluster_")}
    assert not unknown, f"dashboard reads metrics the broker does not define: {unknown}"
    metrics_page = (Path(__file__).parents[2] / "docs" / "reference" / "metrics.md").read_text()
    assert all(f"`{m}`" in metrics_page for m in SECURITY_METRICS)


def test_dashboard_shows_every_contract_metric() -> None:
    missing = CONTRACT_METRICS - dashboard_metrics()
    assert not missing, f"no dashboard panel shows {sorted(missing)}"


def test_every_dashboard_panel_has_a_query_and_a_unique_id() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(metric_names(expr) for expr in dashboard_exprs())


def test_dashboard_variables_are_defined() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    # $__rate_interval and friends are Grafana's own; user variables start with a letter.
    used = set(re.findall(r"\$\{?([a-z]\w*)", DASHBOARD.read_text()))
    assert {"datasource", "group", "topic"} <= used
    assert used <= defined, used - defined


def test_grafana_provisioning_loads_the_dashboard_from_the_compose_mount() -> None:
    provider = (GRAFANA / "provisioning" / "dashboards" / "groupwire.yml").read_text()
    path = re.search(r"^\s+path:\s*(\S+)", provider, re.MULTILINE)
    assert path is not None
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f"./deploy/grafana/dashboards:{path.group(1)}" in compose
    datasource = (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "type: prometheus" in datasource
    assert "url: http://prometheus:9090" in datasource
