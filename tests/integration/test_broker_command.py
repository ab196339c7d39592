"""`groupwire broker` and `groupwire health` meeting what goes wrong: one line, no traceback.

Each broker is a process started as users start it; every one is killed in a ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess

COMMAND_TIMEOUT_S = 60


def _groupwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "groupwire", *args], capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT_S,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _broker(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """A broker that is expected to refuse to start (a hang fails on the timeout)."""
    return _groupwire("broker", "--host", "127.0.0.1", "--data-dir", str(data_dir),
                      "--log-format", "json", *flags)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@contextlib.contextmanager
def _listening() -> Iterator[int]:
    """A port that something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _files(data_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file but the lock, with its size and modification time."""
    return {str(p.relative_to(data_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data_dir.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_data_dir_in_use_is_refused_and_left_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir).start()
    try:
        assert first.proc is not None
        before = _files(data_dir)
        line = _one_error_line(_broker(data_dir, "--port", "0", "--metrics-port", "-1"))
        assert f"data dir {data_dir} is in use by another broker (pid {first.proc.pid})" in line
        assert _files(data_dir) == before
        health = _groupwire("health", "--bootstrap", f"127.0.0.1:{first.port}")
        assert health.returncode == 0, health.stderr
    finally:
        first.kill()


def test_a_data_dir_that_is_a_file_names_the_path_and_the_reason(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    line = _one_error_line(_broker(not_a_dir, "--port", "0", "--metrics-port", "-1"))
    assert f"data dir {not_a_dir}" in line and "Not a directory" in line


def test_an_impossible_data_dir_names_the_path_and_the_reason(tmp_path: Path) -> None:
    impossible = tmp_path / "file" / "below"
    (tmp_path / "file").write_text("")
    line = _one_error_line(_broker(impossible, "--port", "0", "--metrics-port", "-1"))
    assert f"data dir {impossible}" in line and "Not a directory" in line


def test_a_taken_metrics_port_is_named_not_the_client_port(tmp_path: Path) -> None:
    client_port = _free_port()
    with _listening() as metrics_port:
        line = _one_error_line(_broker(tmp_path / "data", "--port", str(client_port),
                                       "--metrics-port", str(metrics_port)))
    assert f"127.0.0.1:{metrics_port} (--metrics-port)" in line
    assert str(client_port) not in line
    assert "already in use" in line


def test_a_taken_client_port_is_named(tmp_path: Path) -> None:
    with _listening() as client_port:
        line = _one_error_line(_broker(tmp_path / "data", "--port", str(client_port),
                                       "--metrics-port", "-1"))
    assert f"127.0.0.1:{client_port} (--port)" in line and "already in use" in line


# --- health against what is not a broker -------------------------------------------------


@contextlib.contextmanager
def _peer(serve: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback listener that runs ``serve`` on each connection, until the block ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                serve(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join(10)
        server.close()


def _hang_up(conn: socket.socket) -> None:
    pass


def _answer_http(conn: socket.socket) -> None:
    conn.settimeout(5)
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def _health_json(port: int) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    result = _groupwire("health", "--bootstrap", f"127.0.0.1:{port}", "--timeout-ms", "5000",
                        "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == "", result.stderr  # nothing leaks out of the check either
    return result, json.loads(result.stdout)


def test_health_of_a_closed_port_names_the_address_and_refusal() -> None:
    port = _free_port()
    _, result = _health_json(port)
    assert result["ok"] is False and result["address"] == f"127.0.0.1:{port}"
    assert "connection refused" in str(result["error"])
    plain = _groupwire("health", "--bootstrap", f"127.0.0.1:{port}")
    line = _one_error_line(plain)
    assert line.startswith(f"unhealthy: 127.0.0.1:{port}: connection refused")


@pytest.mark.parametrize(("serve", "cause"), [
    (_answer_http, "it answered 'HTTP/1.1 400 Bad Request"),
    (_hang_up, "without answering"),
])
def test_health_of_a_peer_that_is_not_groupwire_says_so(
        serve: Callable[[socket.socket], None], cause: str) -> None:
    with _peer(serve) as port:
        _, result = _health_json(port)
        plain = _groupwire("health", "--bootstrap", f"127.0.0.1:{port}")
    assert result["address"] == f"127.0.0.1:{port}"
    assert str(result["error"]).startswith("not a groupwire broker: ")
    assert cause in str(result["error"])
    line = _one_error_line(plain)
    assert line.startswith(f"unhealthy: 127.0.0.1:{port}: not a groupwire broker")
