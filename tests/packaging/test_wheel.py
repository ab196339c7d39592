"""The wheel, installed alone in a fresh venv, runs the image's command line.

This is what the container does, minus Docker: build the wheel from the files the
Dockerfile copies, install it with its dependencies only, run
`groupwire broker ...` with the image's arguments (loopback host, free ports, a temporary
data dir), wait for `groupwire health`, scrape /metrics, stop it with SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from .imagefiles import (
    ROOT,
    alert_metrics,
    dashboard_metrics,
    healthcheck_argv,
    image_argv,
    package_dirs,
    package_folder,
    pyproject,
    shipped_packages,
    with_options,
)

pytestmark = pytest.mark.packaging

INSTALL_TIMEOUT_S = 600
HEALTH_TRIES = 120  # each try waits up to HEALTH_PAUSE_S for the broker to exit instead
HEALTH_PAUSE_S = 0.5
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Installed:
    venv: Path
    site_packages: Path
    workdir: Path
    env: dict[str, str]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              cwd=self.workdir, env=self.env, check=False)


def _checked(cmd: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                            check=False, env=env)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"

    # Build from a copy holding only what the Dockerfile's builder stage copies, so the
    # wheel cannot pick up stray files and the source tree gets no build/ or egg-info.
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", pyproject()["project"]["readme"]):
        shutil.copy2(ROOT / name, src / name)
    for folder in set(package_dirs().values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    wheels = base / "wheels"
    _checked([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
              "--wheel-dir", str(wheels), str(src)], env=env)
    (wheel,) = wheels.glob("groupwire-*.whl")

    # A venv without pip (quick to make); this interpreter's pip installs into it.
    venv = base / "venv"
    _checked([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    python = venv / "bin" / "python"
    _checked([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
              str(wheel)], env=env)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    workdir = base / "work"
    workdir.mkdir()
    return Installed(venv=venv, site_packages=Path(purelib), workdir=workdir, env=env)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_package_in_the_tree_is_shipped() -> None:
    """A package folder pyproject forgets would be missing from the wheel, silently."""
    listed = {package_folder(name).resolve() for name in shipped_packages()}
    on_disk = {init.parent.resolve() for folder in set(package_dirs().values())
               for init in (ROOT / folder).rglob("__init__.py")
               if "__pycache__" not in init.parts}
    assert on_disk - listed == set()
    assert all(folder.is_dir() for folder in listed)


def test_the_wheel_installs_one_import_root_with_py_typed(installed: Installed) -> None:
    (dist_info,) = installed.site_packages.glob("groupwire-*.dist-info")
    files = [line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines()]
    top_level = {name.split("/")[0] for name in files if not name.startswith("../")}
    assert top_level == {"groupwire", dist_info.name}
    assert "groupwire/py.typed" in files
    assert "groupwire/broker/coordinator/engine.py" in files


def test_the_old_top_level_names_are_gone(installed: Installed) -> None:
    code = ("import importlib\n"
            "for name in ('protocol', 'broker', 'client', 'pipeline', 'cli'):\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ModuleNotFoundError:\n"
            "        continue\n"
            "    print(name)\n")
    result = installed.run(installed.bin("python"), "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []


def test_imports_come_from_the_installed_wheel(installed: Installed) -> None:
    code = ("import importlib\n"
            f"for name in {shipped_packages()!r}:\n"
            "    print(next(iter(importlib.import_module(name).__path__)))\n"
            "from groupwire import Admin, Consumer, Producer, RebalanceListener, Record\n"
            "from groupwire.errors import GroupwireError, KafkaStorageError\n")
    result = installed.run(installed.bin("python"), "-c", code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(shipped_packages())
    for line in lines:
        assert Path(line).resolve().is_relative_to(
            (installed.site_packages / "groupwire").resolve()), line


def test_python_m_groupwire_is_the_command_line(installed: Installed) -> None:
    result = installed.run(installed.bin("python"), "-m", "groupwire", "--help")
    assert result.returncode == 0, result.stderr
    assert "broker" in result.stdout and "health" in result.stdout


def test_metadata_matches_pyproject(installed: Installed) -> None:
    project = pyproject()["project"]
    code = ("from importlib.metadata import entry_points, version\n"
            "print(version('groupwire'))\n"
            "print(entry_points(group='console_scripts')['groupwire'].value)\n")
    result = installed.run(installed.bin("python"), "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [project["version"], project["scripts"]["groupwire"]]


def test_help_lists_the_subcommands(installed: Installed) -> None:
    result = installed.run(installed.bin("groupwire"), "--help")
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^\s{2,}(\w+)\s", result.stdout, re.MULTILINE))
    assert {image_argv()[1], healthcheck_argv()[1][1]} <= listed, result.stdout


def test_image_command_line_serves_health_metrics_and_stops_on_sigterm(
        installed: Installed) -> None:
    port, metrics_port = free_port(), free_port()
    data_dir = installed.workdir / "data"
    argv = with_options(image_argv(), host="127.0.0.1", port=str(port),
                        metrics_port=str(metrics_port), data_dir=str(data_dir))
    argv[0] = installed.bin(argv[0])
    env = {**installed.env, "GROUPWIRE_DATA_DIR": str(data_dir)}
    _opts, health = healthcheck_argv()
    health = with_options(health, bootstrap=f"127.0.0.1:{port}")
    health[0] = installed.bin(health[0])
    broker_log = installed.workdir / "broker.log"

    with broker_log.open("w") as log:
        proc = subprocess.Popen(argv, cwd=installed.workdir, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        def output() -> str:
            return broker_log.read_text()[-4000:]

        for _ in range(HEALTH_TRIES):
            assert proc.poll() is None, f"broker exited {proc.returncode}:\n{output()}"
            if installed.run(*health).returncode == 0:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(HEALTH_PAUSE_S)  # returns early if the broker exits
        else:
            pytest.fail(f"`groupwire health` never succeeded:\n{output()}")
        assert data_dir.is_dir()

        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            exposition = response.read().decode()
        assert re.search(r"^groupwire_connections \d", exposition, re.MULTILINE), exposition
        families = set(re.findall(r"^# TYPE (\S+) ", exposition, re.MULTILINE))
        # A single broker has no groupwire_cluster_* families (cluster mode adds them).
        single = {m for m in dashboard_metrics() | alert_metrics()
                  if not m.startswith("groupwire_cluster_")}
        missing = single & dashboard_metrics() - families
        assert not missing, f"the dashboard reads metrics /metrics lacks: {sorted(missing)}"
        missing = single & alert_metrics() - families
        assert not missing, f"the alert rules read metrics /metrics lacks: {sorted(missing)}"
        assert not {f for f in families if f.startswith("groupwire_cluster_")}

        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"broker still running {STOP_TIMEOUT_S}s after SIGTERM:\n{output()}")
        assert code == 0, f"broker exited {code} on SIGTERM:\n{output()}"
        assert "Traceback" not in output()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    after = installed.run(*health)
    assert after.returncode != 0
    assert "Traceback" not in after.stderr
    assert len(after.stderr.strip().splitlines()) == 1, after.stderr
