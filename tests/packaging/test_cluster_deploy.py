"""The cluster's deploy files: the compose `cluster` profile, deploy/k8s/cluster/, and the
dashboard and alerts reading only documented metrics.

The broker commands are parsed by the broker's own flag parser, so a misspelt or
missing flag fails here rather than in a container. YAML is read with PyYAML, which
mkdocs (a dev dependency) brings; without it the structural tests skip.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.config import BrokerSettings, etcd_urls, parse_settings

from .imagefiles import (
    COMPOSE,
    DASHBOARD,
    PROMETHEUS_CONFIG,
    ROOT,
    alert_metrics,
    dashboard_metrics,
    healthcheck_argv,
    image_argv,
    option,
    with_options,
)

pytestmark = pytest.mark.packaging

CLUSTER_K8S = ROOT / "deploy" / "k8s" / "cluster"
METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"
DEFAULT_SERVICES = {"broker", "prometheus", "grafana"}
CLUSTER_BROKERS = {"broker-1": 1, "broker-2": 2, "broker-3": 3}


def yaml_module() -> Any:
    return pytest.importorskip("yaml", reason="PyYAML comes with mkdocs (the dev extra)")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml_module().safe_load(COMPOSE.read_text())
    return loaded


def documented_metrics() -> set[str]:
    return set(re.findall(r"^\| `(groupwire_[a-z_]+)`", METRICS_PAGE.read_text(),
                          flags=re.MULTILINE))


def cluster_metrics() -> set[str]:
    return {m for m in documented_metrics() if m.startswith("groupwire_cluster_")}


def broker_settings(argv: list[str]) -> BrokerSettings:
    assert argv[0] == "broker", argv
    return parse_settings(argv[1:], environ={})


# --- docker-compose.yml ------------------------------------------------------------------


def test_compose_without_a_profile_starts_what_it_always_did() -> None:
    services = compose()["services"]
    unprofiled = {name for name, svc in services.items() if not svc.get("profiles")}
    assert unprofiled == DEFAULT_SERVICES
    # The default broker stays a single broker.
    assert not any("etcd" in str(a) for a in services["broker"].get("command", []))
    assert "GROUPWIRE_ETCD_ENDPOINTS" not in services["broker"].get("environment", {})


def test_compose_cluster_profile_has_etcd_and_three_brokers() -> None:
    services = compose()["services"]
    profiled = {name for name, svc in services.items() if "cluster" in svc.get("profiles", [])}
    assert profiled == {"etcd", *CLUSTER_BROKERS}
    # Nothing that always starts waits for a service only the profile starts.
    for name in DEFAULT_SERVICES:
        assert not set(services[name].get("depends_on", {})) & profiled, name


def test_compose_cluster_brokers_use_the_right_flags() -> None:
    services = compose()["services"]
    image_args = image_argv()[1:]
    ports_seen: set[str] = set()
    volumes_seen: set[str] = set()
    for name, node_id in CLUSTER_BROKERS.items():
        svc = services[name]
        argv = svc["command"]
        settings = broker_settings(argv)
        assert settings.node_id == node_id
        assert settings.advertised_host == name
        assert etcd_urls(settings) == ["http://etcd:2379"]
        assert settings.host == "0.0.0.0"
        assert str(settings.data_dir) == option(image_args, "--data-dir")
        assert str(settings.metrics_port) == option(image_args, "--metrics-port")
        # The image's own command, its port changed, then the cluster's flags.
        assert argv[:len(image_args)] == with_options(image_args, port=str(settings.port))
        # Published on the port it listens on, so the advertised address works from
        # the host too; its metrics on a port of its own.
        assert f"{settings.port}:{settings.port}" in svc["ports"]
        ports_seen.update(p.split(":")[0] for p in svc["ports"])
        assert svc["volumes"] == [f"{name}-data:{settings.data_dir}"]
        volumes_seen.add(svc["volumes"][0])
        assert svc["depends_on"] == {"etcd": {"condition": "service_healthy"}}
        assert svc["image"] == services["broker"]["image"]
        health = svc["healthcheck"]["test"]
        _opts, image_health = healthcheck_argv()
        expected = with_options(image_health, bootstrap=f"127.0.0.1:{settings.port}")
        assert " ".join(expected) in " ".join(health), health
    assert len(ports_seen) == 2 * len(CLUSTER_BROKERS)
    assert not ports_seen & {p.split(":")[0] for p in services["broker"]["ports"]}
    assert len(volumes_seen) == len(CLUSTER_BROKERS)
    declared = set(compose()["volumes"])
    assert {v.split(":")[0] for v in volumes_seen} | {"etcd-data"} <= declared


def _flag_values(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--"))


def test_compose_etcd_election_timeout_suits_the_lease() -> None:
    etcd = compose()["services"]["etcd"]
    flags = _flag_values(etcd["command"])
    assert flags["advertise-client-urls"] == "http://etcd:2379"
    # etcd refuses a lease TTL under 1.5 x its election timeout.
    election_ms = int(flags.get("election-timeout", "1000"))
    assert BrokerSettings().etcd_lease_ttl_ms >= 1.5 * election_ms
    assert "healthcheck" in etcd


def test_prometheus_finds_the_cluster_brokers_by_name() -> None:
    config = yaml_module().safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "groupwire"]
    (dns,) = job["dns_sd_configs"]
    assert set(dns["names"]) == set(CLUSTER_BROKERS)
    assert str(dns["port"]) == option(image_argv(), "--metrics-port")
    assert ["broker:" + option(image_argv(), "--metrics-port")] == \
        job["static_configs"][0]["targets"]


# --- deploy/k8s/cluster ------------------------------------------------------------------


def k8s_docs() -> list[dict[str, Any]]:
    yaml = yaml_module()
    docs: list[dict[str, Any]] = []
    for path in sorted(CLUSTER_K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def broker_container() -> dict[str, Any]:
    sts = k8s_one("StatefulSet", "groupwire-cluster")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_kustomization_lists_every_cluster_manifest() -> None:
    kustomization = yaml_module().safe_load((CLUSTER_K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in CLUSTER_K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_cluster_manifests_are_the_expected_objects() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in k8s_docs())
    assert kinds == sorted([
        ("PodDisruptionBudget", "groupwire-cluster"),
        ("Service", "groupwire-cluster"),
        ("Service", "groupwire-cluster-headless"),
        ("Service", "groupwire-etcd"),
        ("StatefulSet", "groupwire-cluster"),
        ("StatefulSet", "groupwire-etcd"),
    ])
    # Distinct from the single broker's manifests, so both fit in one namespace.
    single = (ROOT / "deploy" / "k8s" / "statefulset.yaml").read_text()
    assert "name: groupwire-cluster" not in single


def _fake_groupwire(tmp_path: Path) -> Path:
    """A `groupwire` on PATH that prints its argv, one shell word each."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "groupwire"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _kubelet_expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args (unknown names stay as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)),
                  arg)


@pytest.mark.parametrize("ordinal", [0, 2])
def test_broker_pod_runs_a_cluster_broker_named_by_its_ordinal(
        tmp_path: Path, ordinal: int) -> None:
    container = broker_container()
    pod = f"groupwire-cluster-{ordinal}"
    kube_env = {"POD_NAME": pod, "POD_NAMESPACE": "ns"}
    env_names = [e["name"] for e in container["env"]]
    assert {"POD_NAME", "POD_NAMESPACE"} <= set(env_names)
    argv = [_kubelet_expand(a, kube_env) for a in container["command"] + container["args"]]
    assert argv[:2] == ["sh", "-c"]
    env = {**os.environ, "HOSTNAME": pod,
           "PATH": f"{_fake_groupwire(tmp_path)}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                         check=True)
    broker_argv = run.stdout.splitlines()
    settings = broker_settings(broker_argv)
    assert settings.node_id == ordinal + 1
    assert settings.advertised_host == f"{pod}.groupwire-cluster-headless.ns.svc"
    (url,) = etcd_urls(settings)
    assert url == "http://groupwire-etcd:2379"
    assert str(settings.port) == option(image_argv(), "--port")
    assert str(settings.metrics_port) == option(image_argv(), "--metrics-port")
    assert str(settings.data_dir) == option(image_argv(), "--data-dir")
    assert "--etcd-endpoints" in container["args"], shlex.join(container["args"])


def test_broker_statefulset_shape() -> None:
    sts = k8s_one("StatefulSet", "groupwire-cluster")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    headless = k8s_one("Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    for service in ("groupwire-cluster", "groupwire-cluster-headless"):
        assert k8s_one("Service", service)["spec"]["selector"] == labels
    pdb = k8s_one("PodDisruptionBudget", "groupwire-cluster")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == labels
    mounts = {m["mountPath"] for m in broker_container()["volumeMounts"]}
    assert option(image_argv(), "--data-dir") in mounts
    assert [c["metadata"]["name"] for c in spec["volumeClaimTemplates"]] == ["data"]


def test_broker_probes_run_groupwire_health() -> None:
    _opts, health = healthcheck_argv()
    container = broker_container()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == health, probe


def test_etcd_statefulset_serves_the_url_brokers_use() -> None:
    sts = k8s_one("StatefulSet", "groupwire-etcd")
    service = k8s_one("Service", "groupwire-etcd")
    assert sts["spec"]["serviceName"] == "groupwire-etcd"
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    flags = _flag_values(container["args"])
    assert flags["listen-client-urls"] == "http://0.0.0.0:2379"
    assert {p["port"] for p in service["spec"]["ports"]} >= {2379}
    assert service["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
    election_ms = int(flags.get("election-timeout", "1000"))
    assert BrokerSettings().etcd_lease_ttl_ms >= 1.5 * election_ms
    assert "readinessProbe" in container and "livenessProbe" in container
    image = container["image"]
    assert re.match(r"^[^:\s]+:v?\d+\.\d+\.\d+$", image), image


# --- dashboard and alerts: documented metrics only --------------------------------------


def test_dashboard_and_alerts_read_only_documented_metrics() -> None:
    documented = documented_metrics()
    assert cluster_metrics(), "docs/reference/metrics.md lists no groupwire_cluster_* rows"
    assert not dashboard_metrics() - documented, dashboard_metrics() - documented
    assert not alert_metrics() - documented, alert_metrics() - documented


def test_dashboard_cluster_row_shows_every_cluster_metric() -> None:
    import json

    panels = json.loads(DASHBOARD.read_text())["panels"]
    titles = [p["title"] for p in panels if p["type"] == "row"]
    assert "Cluster" in titles
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == "Cluster")
    rest = panels[start + 1:]
    end = next((i for i, p in enumerate(rest) if p["type"] == "row"), len(rest))
    exprs = " ".join(t["expr"] for p in rest[:end] for t in p["targets"])
    shown = set(re.findall(r"\bgroupwire_cluster_[a-z_]+", exprs))
    assert shown == cluster_metrics()


def test_cluster_alerts_page_on_what_the_brief_names() -> None:
    read = alert_metrics()
    assert {"groupwire_cluster_under_replicated_partitions",
            "groupwire_cluster_offline_partitions",
            "groupwire_cluster_is_controller",
            "groupwire_cluster_fenced"} <= read
