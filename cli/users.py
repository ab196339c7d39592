"""``groupwire users add|list|remove``: SCRAM credentials, through a broker or offline.

A password is never a flag (it would stay in the shell's history and show in ``ps``):
``add`` asks for it twice on a terminal, else reads the first line of stdin
(``... | groupwire users add alice``). Through a broker only the salt and the salted
password travel (KIP-554). ``add --data-dir`` writes the credential into the data dir of
a broker that is not running, as Kafka's storage tool does, so the first super user
exists before the broker ever starts; ``add --etcd-endpoints`` writes it into a
cluster's metadata in etcd, where every broker of the cluster reads it (before they
start, or while they run).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from groupwire.cli.arguments import (
    add_bootstrap_flag,
    add_connection_flags,
    positive_int,
    security_from_args,
)
from groupwire.cli.errors import CliError
from groupwire.cli.output import emit_json, table
from groupwire.cli.running import run_with_admin
from groupwire.client.acls import ScramMechanism, parse_scram_mechanism
from groupwire.client.admin import DEFAULT_SCRAM_ITERATIONS, Admin
from groupwire.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS

if TYPE_CHECKING:
    from groupwire.broker.security.credentials import ScramCredential

MECHANISMS = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)


def _mechanism(text: str) -> ScramMechanism:
    try:
        return parse_scram_mechanism(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected SCRAM-SHA-256 or SCRAM-SHA-512, got {text!r}") from None


def register(subparsers: Any) -> None:
    """Add ``users`` and its actions to the ``groupwire`` subparsers."""
    users = subparsers.add_parser("users", help="add, list and remove SCRAM users")
    actions = users.add_subparsers(dest="users_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser(
        "add", help="create or replace a user's SCRAM credentials",
        description="The password is asked for twice on a terminal, else read from the "
                    "first line of stdin; an empty one is refused. Without --mechanism, "
                    "both SCRAM mechanisms. With --data-dir the credentials are written "
                    "offline into the data dir (created if absent) of a broker that is not "
                    "running; it reads them when it starts. With --etcd-endpoints they are "
                    "written into a cluster's metadata in etcd (--cluster-name), which "
                    "every broker of the cluster follows: before any broker starts, or "
                    "while they run.")
    p.add_argument("name", metavar="NAME", help="the user name (principal User:NAME)")
    p.add_argument("--mechanism", action="append", type=_mechanism, metavar="MECHANISM",
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default both)")
    p.add_argument("--iterations", type=positive_int, default=DEFAULT_SCRAM_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                        f"(default {DEFAULT_SCRAM_ITERATIONS})")
    where = p.add_mutually_exclusive_group(required=True)
    add_bootstrap_flag(where, required=True)
    where.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="write offline into this broker data dir (no broker running)")
    where.add_argument("--etcd-endpoints", metavar="URL[,URL]",
                       help="write into the cluster's metadata in this etcd "
                            "(http:// or https:// URLs, as the brokers' --etcd-endpoints)")
    etcd = p.add_argument_group("with --etcd-endpoints (defaults: the broker's environment)")
    for flag, env, default, text in (
            ("--cluster-name", "GROUPWIRE_CLUSTER_NAME", "groupwire",
             "the cluster's name, as the brokers' --cluster-name"),
            ("--etcd-cafile", "GROUPWIRE_ETCD_CAFILE", "",
             "PEM CA certificates etcd's certificate is checked against"),
            ("--etcd-certfile", "GROUPWIRE_ETCD_CERTFILE", "",
             "PEM client certificate for etcd (mutual TLS)"),
            ("--etcd-keyfile", "GROUPWIRE_ETCD_KEYFILE", "",
             "PEM private key of --etcd-certfile")):
        shown = f"default {default}; " if default else ""
        etcd.add_argument(flag, default=os.environ.get(env, default),
                          metavar=flag.upper().removeprefix("--").replace("-", "_"),
                          help=f"{text} ({shown}env {env})")
    add_connection_flags(p, bootstrap=False)
    p.set_defaults(func=add)

    p = actions.add_parser("list", help="users with SCRAM credentials, and their mechanisms")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these users (default: all)")
    add_connection_flags(p)
    p.set_defaults(func=list_users)

    p = actions.add_parser(
        "remove", help="remove a user's SCRAM credentials",
        description="Without --mechanism, every credential the user has. Connections the "
                    "user already authenticated stay open.")
    p.add_argument("name", metavar="NAME", help="the user name")
    p.add_argument("--mechanism", action="append", type=_mechanism, metavar="MECHANISM",
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default every one)")
    add_connection_flags(p)
    p.set_defaults(func=remove)


def read_new_password(name: str, *, stdin: TextIO | None = None,
                      prompt: Callable[[str], str] = getpass.getpass) -> str:
    """Twice from a prompt on a terminal (the two must match), else stdin's first line."""
    stream = sys.stdin if stdin is None else stdin
    if stream.isatty():
        password = prompt(f"password for {name}: ")
        if password and prompt(f"password for {name} (again): ") != password:
            raise CliError("the two passwords differ; nothing was changed")
    else:
        password = stream.readline().rstrip("\r\n")
    if not password:
        raise CliError("empty password refused")
    return password


def _mechanisms(args: argparse.Namespace) -> list[ScramMechanism]:
    return list(dict.fromkeys(args.mechanism or MECHANISMS))


def add(args: argparse.Namespace) -> int:
    if not args.name:
        raise CliError("the user name is empty")
    mechanisms = _mechanisms(args)
    if args.data_dir is not None:
        return _add_offline(args, mechanisms)
    if args.etcd_endpoints is not None:
        return _add_to_cluster(args, mechanisms)
    security = security_from_args(args)  # the admin's password is asked for first
    password = read_new_password(args.name)

    async def body(admin: Admin) -> int:
        for mechanism in mechanisms:
            await admin.upsert_user_scram_credential(args.name, password, mechanism,
                                                     args.iterations)
        _report_added(args, mechanisms, f"through {args.bootstrap}")
        return 0

    return run_with_admin(args, body, security=security)


def _offline_credentials(args: argparse.Namespace, mechanisms: list[ScramMechanism],
                         ) -> list[ScramCredential]:
    from groupwire.broker.security.credentials import credential_from_password

    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise CliError(f"--iterations: must be {MIN_ITERATIONS}-{MAX_ITERATIONS}, "
                       f"got {args.iterations}")
    password = read_new_password(args.name)
    return [credential_from_password(m, password, args.iterations) for m in mechanisms]


def _add_offline(args: argparse.Namespace, mechanisms: list[ScramMechanism]) -> int:
    from groupwire.broker.security.store import SecurityStoreError, offline_upsert

    creds = _offline_credentials(args, mechanisms)
    try:
        offline_upsert(args.data_dir, args.name, creds)
    except SecurityStoreError as exc:
        raise CliError(str(exc)) from exc
    _report_added(args, mechanisms, f"offline into {args.data_dir} (read by the broker "
                                    "when it starts)")
    return 0


def _add_to_cluster(args: argparse.Namespace, mechanisms: list[ScramMechanism]) -> int:
    """Straight into the cluster's metadata (``security/users/NAME``), merged with the
    user's other mechanisms there under a compare-and-swap. (The broker's modules are
    imported here, by the commands that write where a broker reads, not by every
    ``groupwire users`` command.)"""
    from groupwire.broker.config import (
        BrokerSettings,
        SettingsError,
        etcd_urls,
        validate_etcd,
    )
    from groupwire.broker.etcd.client import EtcdClient, EtcdTlsError, tls_context
    from groupwire.broker.etcd.store import EtcdError
    from groupwire.broker.security.cluster_store import upsert_user
    from groupwire.broker.security.store import SecurityStoreError

    settings = BrokerSettings(etcd_endpoints=args.etcd_endpoints,
                              cluster_name=args.cluster_name, etcd_cafile=args.etcd_cafile,
                              etcd_certfile=args.etcd_certfile,
                              etcd_keyfile=args.etcd_keyfile)
    if not etcd_urls(settings):
        raise CliError("--etcd-endpoints: empty")
    if not args.cluster_name or "/" in args.cluster_name:
        raise CliError(f"--cluster-name: expected a name without '/', got "
                       f"{args.cluster_name!r}")
    try:
        validate_etcd(settings)
        tls = (tls_context(args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile)
               if args.etcd_cafile or args.etcd_certfile or args.etcd_keyfile else None)
    except (SettingsError, EtcdTlsError) as exc:
        raise CliError(str(exc)) from exc
    creds = _offline_credentials(args, mechanisms)

    async def write() -> None:
        client = EtcdClient(etcd_urls(settings), tls=tls, timeout_s=args.timeout_ms / 1000)
        try:
            await upsert_user(client, args.cluster_name, args.name, creds)
        finally:
            await client.close()

    try:
        asyncio.run(write())
    except (EtcdError, SecurityStoreError) as exc:
        raise CliError(f"etcd at {args.etcd_endpoints}: {exc}") from exc
    _report_added(args, mechanisms, f"in the metadata of cluster {args.cluster_name!r} "
                                    f"at {args.etcd_endpoints} (every broker reads them)")
    return 0


def _report_added(args: argparse.Namespace, mechanisms: list[ScramMechanism],
                  where: str) -> None:
    if args.json:
        in_etcd = args.etcd_endpoints is not None
        emit_json({"user": args.name, "mechanisms": [m.sasl_name for m in mechanisms],
                   "iterations": args.iterations,
                   "offline": args.data_dir is not None or in_etcd,
                   "data_dir": None if args.data_dir is None else str(args.data_dir),
                   "cluster": args.cluster_name if in_etcd else None})
        return
    print(f"user {args.name!r}: {', '.join(m.sasl_name for m in mechanisms)} credentials "
          f"stored {where}")


def list_users(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        users = await admin.describe_user_scram_credentials(args.names or None)
        if args.json:
            emit_json([{"user": user, "credentials": [
                {"mechanism": c.mechanism.sasl_name, "iterations": c.iterations}
                for c in creds]} for user, creds in users.items()])
            return 0
        table("SCRAM users", ["user", "mechanism", "iterations"],
              [(user, c.mechanism.sasl_name, c.iterations)
               for user, creds in users.items() for c in creds])
        return 0

    return run_with_admin(args, body)


def remove(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        mechanisms = args.mechanism
        if not mechanisms:  # every one it has (ResourceNotFoundError for an unknown user)
            described = await admin.describe_user_scram_credentials([args.name])
            mechanisms = [c.mechanism for c in described.get(args.name, [])]
        removed = list(dict.fromkeys(mechanisms))
        if not removed:
            raise CliError(f"user {args.name!r} has no SCRAM credentials")
        for mechanism in removed:
            await admin.delete_user_scram_credential(args.name, mechanism)
        if args.json:
            emit_json({"user": args.name, "removed": [m.sasl_name for m in removed]})
        else:
            print(f"user {args.name!r}: {', '.join(m.sasl_name for m in removed)} "
                  f"credentials removed")
        return 0

    return run_with_admin(args, body)
