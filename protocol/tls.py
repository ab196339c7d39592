"""The client side of TLS, as the SDK and a broker dialling another one both need it."""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["client_ssl_context"]


def client_ssl_context(*, cafile: str | Path | None = None,
                       certfile: str | Path | None = None,
                       keyfile: str | Path | None = None, password: str | None = None,
                       check_hostname: bool = True) -> ssl.SSLContext:
    """A client TLS context from PEM files, as the SDK and a broker dialling another
    one both need it: TLS 1.2 or later, the server verified against ``cafile`` (the
    system's CAs without it), and with ``certfile`` (``keyfile`` if the key is apart) a
    client certificate for listeners that ask for one. Reads the files now, so renewed
    certificates are taken by the next context made; raises OSError or ssl.SSLError if
    they do not load."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                     cafile=str(cafile) if cafile else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(str(certfile), str(keyfile) if keyfile else None, password)
    return ctx
