"""The security settings of a command, handed to the processes it starts.

``groupwire chaos`` runs its consumers, ``groupwire demo`` its consumers and ``groupwire
report`` its Spark job as child processes, which must reach a secured broker as the
command does. They get the resolved Kafka client properties (file paths, not a loaded
TLS context) as JSON in :data:`CLIENT_PROPERTIES_ENV`: the environment, because a
command line is world-readable in ``ps`` and ``/proc``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from groupwire.cli.arguments import security_from_properties
from groupwire.client.connection import Connection
from groupwire.client.sasl import authenticate
from groupwire.client.security import PLAINTEXT, SecurityConfig
from groupwire.pipeline.report.options import CLIENT_PROPERTIES_ENV, properties_from_env

__all__ = ["CLIENT_PROPERTIES_ENV", "child_env", "open_connection", "security_from_env"]

_PATHS = ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.location",
          "ssl.cafile", "ssl.certfile", "ssl.keyfile")


def child_env(props: Mapping[str, str]) -> dict[str, str]:
    """What to add to a child's environment (an empty value for a plaintext run, so
    that none is inherited from further up). Only the
    settings the protocol uses go (a TLS file from the environment means nothing to a
    plaintext run), and file paths are made absolute, so a child started elsewhere
    reads the same files."""
    protocol = props.get("security.protocol", PLAINTEXT).upper()
    if protocol == PLAINTEXT:
        return {CLIENT_PROPERTIES_ENV: ""}
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    out = {k: str(Path(v).absolute()) if k in _PATHS and v else v for k, v in props.items()
           if (tls or not k.startswith("ssl.")) and (sasl or not k.startswith("sasl."))}
    return {CLIENT_PROPERTIES_ENV: json.dumps(out, sort_keys=True)}


def security_from_env(environ: Mapping[str, str] | None = None) -> SecurityConfig:
    """A child's settings, as its parent resolved them (plaintext when it set none)."""
    return security_from_properties(properties_from_env(
        os.environ if environ is None else environ))


async def open_connection(host: str, port: int, security: SecurityConfig, *,
                          client_id: str, timeout: float) -> Connection:
    """A raw connection made as the SDK's are: over TLS and authenticated when
    ``security`` says so (the broker authenticates each connection), else plain."""
    conn = await Connection.open(host, port, client_id=client_id, connect_timeout=timeout,
                                 ssl_context=security.tls_context())
    try:
        await authenticate(conn, security, timeout)
    except BaseException:
        await conn.close()
        raise
    return conn
