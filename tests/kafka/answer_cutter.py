"""A TCP relay between Kafka clients and a broker that can lose the broker's answers.

What a broker that dies after storing a request and before answering it looks like to
the client, without the timing luck a SIGKILL needs: while ``losing``, requests reach
the broker and are served, their answers are dropped; :meth:`cut` then closes every
connection, and the client resends what it had no answer for.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class AnswerCutter:
    def __init__(self, broker_port: int, port: int = 0) -> None:
        self.broker_port = broker_port
        self.losing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.broker_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, broker]
            threading.Thread(target=self._pump, args=(client, broker, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(broker, client, True),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                if answers and self.losing.is_set():
                    continue
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close every connection open now and stop losing answers."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.losing.clear()

    def close(self) -> None:
        self._listener.close()
        self.cut()
