"""The flags that subcommands talking to a broker share, and the parsing of their values.

Numbers are checked where argparse parses them (:func:`positive_int`,
:func:`non_negative_int`), so a bad one is a usage error (exit 2) before anything runs.
The security settings are read when the command runs (:func:`security_from_args`), as
they may prompt for a password.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import ssl
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from groupwire.cli.errors import CliError
from groupwire.client.security import (
    DEFAULT_SASL_MECHANISM,
    PLAINTEXT,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    SecurityConfig,
    read_properties,
)
from groupwire.client.types import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer of at least 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer of at least 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def bootstrap_list(text: str) -> str:
    """An argparse ``type``: ``HOST:PORT[,HOST:PORT...]``, checked where it is parsed (a
    usage error, exit 2) and kept as given for the SDK."""
    try:
        parse_bootstrap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT], got {text!r}"
                                         ) from exc
    return text


def add_bootstrap_flag(p: argparse.ArgumentParser | argparse._ActionsContainer, *,
                       required: bool = False) -> None:
    p.add_argument("--bootstrap", default=None if required else DEFAULT_BOOTSTRAP,
                   type=bootstrap_list,
                   help="broker addresses HOST:PORT[,HOST:PORT]" + (
                       "" if required else f" (default {DEFAULT_BOOTSTRAP})"))


def add_connection_flags(p: argparse.ArgumentParser, *, bootstrap: bool = True) -> None:
    """``--bootstrap``, ``--timeout-ms``, ``--json`` and the security settings, as every
    SDK subcommand takes them (``bootstrap=False``: the caller adds ``--bootstrap``)."""
    if bootstrap:
        add_bootstrap_flag(p)
    p.add_argument("--timeout-ms", type=positive_int, default=10000,
                   help="give up on the broker after this long (default 10000)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_security_flags(p)


# --- security -----------------------------------------------------------------------------

SECURITY_ENV: Final = {
    "GROUPWIRE_SECURITY_PROTOCOL": "security.protocol",
    "GROUPWIRE_SASL_MECHANISM": "sasl.mechanism",
    "GROUPWIRE_SASL_USERNAME": "sasl.username",
    "GROUPWIRE_SASL_PASSWORD": "sasl.password",
    "GROUPWIRE_CLIENT_SSL_CAFILE": "ssl.truststore.location",
    "GROUPWIRE_CLIENT_SSL_CERTFILE": "ssl.keystore.location",
    "GROUPWIRE_CLIENT_SSL_KEYFILE": "ssl.key.location",
}
"""Environment variables the security settings are read from, as the Kafka client
property each stands for (the lowest precedence)."""

_FLAG_PROPERTIES: Final = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "ssl_cafile": "ssl.truststore.location",
    "ssl_certfile": "ssl.keystore.location",
    "ssl_keyfile": "ssl.key.location",
}
_ALIASES: Final = {"ssl.cafile": "ssl.truststore.location",
                   "ssl.certfile": "ssl.keystore.location",
                   "ssl.keyfile": "ssl.key.location"}
_TLS_FILES: Final = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse ``type``: one of ``choices``, in any case."""
    def parse(text: str) -> str:
        value = text.strip().upper()
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(choices)}, got {text!r}")
        return value
    return parse


def add_security_flags(p: argparse.ArgumentParser) -> None:
    """How to reach a secured broker. No flag takes a password: it would stay in the
    shell's history and in ``ps``; it comes from GROUPWIRE_SASL_PASSWORD, the
    ``--command-config`` file, or a prompt."""
    g = p.add_argument_group(
        "security", "Flags win over --command-config, which wins over the environment "
                    "(GROUPWIRE_SECURITY_PROTOCOL, GROUPWIRE_SASL_MECHANISM, "
                    "GROUPWIRE_SASL_USERNAME, GROUPWIRE_SASL_PASSWORD, "
                    "GROUPWIRE_CLIENT_SSL_CAFILE, GROUPWIRE_CLIENT_SSL_CERTFILE, "
                    "GROUPWIRE_CLIENT_SSL_KEYFILE: not the broker's GROUPWIRE_SSL_*, which "
                    "name its own certificate). The SASL password is read from "
                    "GROUPWIRE_SASL_PASSWORD or the file, else prompted for on a terminal.")
    g.add_argument("--security-protocol", type=_one_of(SECURITY_PROTOCOLS), metavar="NAME",
                   help="PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL, as the "
                        "broker's listener is named")
    g.add_argument("--sasl-mechanism", type=_one_of(SASL_MECHANISMS), metavar="NAME",
                   help=f"{', '.join(SASL_MECHANISMS)} (default: {DEFAULT_SASL_MECHANISM}, "
                        "which a broker's default --sasl-enabled-mechanisms accepts)")
    g.add_argument("--sasl-username", metavar="USER", help="the SASL user name")
    g.add_argument("--ssl-cafile", metavar="PEM",
                   help="CA certificates to check the broker's certificate against "
                        "(default: the system's)")
    g.add_argument("--ssl-certfile", metavar="PEM",
                   help="client certificate chain, for a listener that asks for one")
    g.add_argument("--ssl-keyfile", metavar="PEM", help="the private key of --ssl-certfile")
    g.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties, as Kafka's tools take them "
                        "(security.protocol, sasl.mechanism, sasl.jaas.config or "
                        "sasl.username/sasl.password, ssl.truststore.location, "
                        "ssl.keystore.location, ssl.key.location as PEM files)")


def _canonical(props: Mapping[str, str]) -> dict[str, str]:
    """One name per setting, and a JAAS line's user and password as their own keys."""
    out = {_ALIASES.get(k, k): v for k, v in props.items()}
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        for key in ("username", "password"):
            found = re.search(rf'\b{key}\s*=\s*"([^"]*)"', jaas)
            if found is not None:
                out.setdefault(f"sasl.{key}", found.group(1))
    return out


def _overlay(props: dict[str, str], higher: Mapping[str, str]) -> None:
    """``higher``'s settings over ``props``; a password given for another user than
    ``higher`` names is dropped (it would only fail to authenticate)."""
    user = higher.get("sasl.username")
    if user is not None and props.get("sasl.username", user) != user:
        props.pop("sasl.password", None)
    props.update(higher)


def security_from_args(args: argparse.Namespace, *,
                       environ: Mapping[str, str] | None = None,
                       prompt: Callable[[str], str] | None = None) -> SecurityConfig:
    """The client's security settings: flags over ``--command-config`` over the
    environment. A SASL password none of them gives is prompted for on a terminal.
    Every problem is one CliError naming where the bad value came from."""
    return security_from_properties(
        security_properties(args, environ=environ, prompt=prompt))


def security_properties(args: argparse.Namespace, *,
                        environ: Mapping[str, str] | None = None,
                        prompt: Callable[[str], str] | None = None) -> dict[str, str]:
    """:func:`security_from_args`' settings as Kafka client properties (file paths, not
    a loaded context): what a command hands its child processes, which build their own
    TLS contexts."""
    env = os.environ if environ is None else environ
    props = {prop: env[var] for var, prop in SECURITY_ENV.items() if env.get(var)}
    config_file = getattr(args, "command_config", None)
    if config_file:
        try:
            from_file = _canonical(read_properties(config_file))
        except OSError as exc:
            raise CliError(f"--command-config: cannot read {config_file}: "
                           f"{exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise CliError(f"--command-config: {config_file} is not UTF-8 text") from exc
        _overlay(props, from_file)
    _overlay(props, {prop: getattr(args, name) for name, prop in _FLAG_PROPERTIES.items()
                     if getattr(args, name, None) is not None})
    protocol = props.get("security.protocol", PLAINTEXT).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise CliError(f"security protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                       f"not {props['security.protocol']!r}")
    if protocol not in ("SSL", "SASL_SSL"):
        given = [name for name in _TLS_FILES if getattr(args, name, None) is not None]
        if given:
            raise CliError(f"--{given[0].replace('_', '-')}: only used with "
                           f"--security-protocol SSL or SASL_SSL (it is {protocol})")
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        user = props.get("sasl.username")
        if not user:
            raise CliError(f"{protocol} needs a user name: --sasl-username, "
                           "GROUPWIRE_SASL_USERNAME, or sasl.username (or sasl.jaas.config) "
                           "in --command-config")
        if props.get("sasl.password") is None:
            props["sasl.password"] = _ask_password(user, prompt)
    if protocol in ("SSL", "SASL_SSL"):
        for prop in _FLAG_PROPERTIES.values():  # ssl's own errors do not name the file
            path = props.get(prop) if prop.startswith("ssl.") else None
            if path and not Path(path).is_file():
                raise CliError(f"TLS files: no such file {path!r} ({prop})")
    return props


def security_from_properties(props: Mapping[str, str]) -> SecurityConfig:
    """The settings :func:`security_properties` gave, loaded (TLS files read); a bad
    value or file is one CliError."""
    try:
        return SecurityConfig.from_properties(props)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    except ssl.SSLError as exc:
        raise CliError(f"TLS files: {exc.reason or exc}") from exc
    except OSError as exc:
        raise CliError(f"TLS files: {exc.strerror or exc}"
                       + (f": {exc.filename}" if exc.filename else "")) from exc


def _ask_password(user: str, prompt: Callable[[str], str] | None) -> str:
    if prompt is None:
        if not sys.stdin.isatty():
            raise CliError(f"no SASL password for {user!r}: set GROUPWIRE_SASL_PASSWORD, "
                           "put sasl.password in a --command-config file, or run on a "
                           "terminal to be asked")
        prompt = getpass.getpass
    return prompt(f"SASL password for {user}: ")


def parse_address(value: str) -> tuple[str, int]:
    """One ``HOST:PORT`` (``health`` and ``report`` talk to a single broker)."""
    try:
        addresses = parse_bootstrap(value)
    except ValueError:
        addresses = []
    if len(addresses) != 1:
        raise CliError(f"--bootstrap: expected HOST:PORT, got {value!r}")
    return addresses[0]
