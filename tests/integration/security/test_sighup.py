"""``groupwire broker`` re-reads its certificate files on SIGHUP and keeps running."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import trustme

from .conftest import Pki

TIMEOUT_S = 60


def test_sighup_reloads_the_certificate(pki: Pki, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "groupwire", "broker", "--data-dir", str(tmp_path / "d"),
           "--metrics-port", "-1", "--log-format", "json",
           "--listeners", "SSL://127.0.0.1:0", "--ssl-certfile", pki.certfile,
           "--ssl-keyfile", pki.keyfile]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started, reloaded = threading.Event(), threading.Event()
    found: dict[str, int] = {}

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"broker_started"' in line:
                found["port"] = json.loads(line)["port"]
                started.set()
            elif '"tls_reloaded"' in line:
                reloaded.set()
        started.set()
        reloaded.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert started.wait(TIMEOUT_S) and "port" in found
        renewed = trustme.CA()
        pki.write_server_cert(renewed)
        proc.send_signal(signal.SIGHUP)
        assert reloaded.wait(TIMEOUT_S) and proc.poll() is None
        ctx = ssl.create_default_context()
        renewed.configure_trust(ctx)
        with socket.create_connection(("127.0.0.1", found["port"]), timeout=TIMEOUT_S) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
