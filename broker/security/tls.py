"""The broker's TLS: a server context from PEM files, re-read on SIGHUP.

Servers keep the context they were created with, so a reload cannot hand them a new one.
Instead that base context's ``sni_callback`` (which OpenSSL calls in every handshake,
with or without a server name) moves each new connection onto the current context:
its certificate, key and CA store. Connections already open keep what they negotiated.
Verified on asyncio's and uvloop's SSL transports (tests/integration/security).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Final

from groupwire.broker.logs import get_logger

log = get_logger("groupwire.tls")

CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsError(Exception):
    """The certificate, key or CA files cannot be used: one line naming them."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    certfile: str
    keyfile: str
    cafile: str = ""
    client_auth: str = "none"


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """TLS 1.2 or later; client certificates as ``--ssl-client-auth`` asks."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(files.certfile, files.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"--ssl-certfile {files.certfile} / --ssl-keyfile {files.keyfile}: "
                       f"cannot load: {_reason(exc)}") from exc
    if files.cafile:
        try:
            ctx.load_verify_locations(cafile=files.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"--ssl-cafile {files.cafile}: cannot load: {_reason(exc)}"
                           ) from exc
    ctx.verify_mode = CLIENT_AUTH[files.client_auth]
    return ctx


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class ServerTls:
    """The context servers are created with, and the one new handshakes use."""

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self.context = server_context(files)
        """Given to ``create_server``; stays the same object across reloads."""
        self._current = self.context
        self.context.sni_callback = self._choose

    def _choose(self, ssl_object: Any, _server_name: str | None,
                _context: ssl.SSLContext) -> None:
        if self._current is not self.context:
            ssl_object.context = self._current
        return None

    def reload(self) -> bool:
        """Re-read the files for new connections; a failure is logged, the old kept."""
        try:
            fresh = server_context(self._files)
        except TlsError as exc:
            log.error("tls_reload_failed", error=str(exc))
            return False
        self._current = fresh
        return True


def principal_of(peercert: Any) -> str | None:
    """``User:`` and the subject's CN of a verified client certificate, if it has one."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return f"User:{value}"
    return None
