"""Run the broker as a separate process, the way users and the container run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

STARTUP_TIMEOUT_S = 60


class BrokerProcess:
    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.port = -1
        self.lines: list[str] = []

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "groupwire", "broker", "--host", "127.0.0.1", "--port", "0",
               "--data-dir", str(self.data_dir), "--metrics-port", "-1",
               "--log-format", "json", *self.extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=env)
        started = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                if '"broker_started"' in line:
                    self.port = json.loads(line)["port"]
                    started.set()
            started.set()

        threading.Thread(target=pump, daemon=True).start()
        if not started.wait(STARTUP_TIMEOUT_S) or self.port < 0:
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines[-20:]))
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)
