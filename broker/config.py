"""Broker settings: one table drives the dataclass defaults, the CLI flags and the env vars.

Every setting has a default (Kafka's where Kafka has one), a ``--flag``, a
``GROUPWIRE_<NAME>`` environment variable and a help line. Precedence: flag, then
environment, then default. A bad value is a :class:`SettingsError` naming the flag, which
the CLI prints as one line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from groupwire.broker.coordinator.config import CoordinatorConfig
from groupwire.broker.security.listeners import (
    Listener,
    ListenerError,
    check_advertised,
    parse_listeners,
    plaintext,
)
from groupwire.broker.storage import FsyncPolicy, StorageConfig
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from groupwire.protocol.kafka.records import RELAXED, VALIDATIONS
from groupwire.protocol.limits import MAX_ARRAY_ITEMS
from groupwire.protocol.security import SASL_MECHANISMS

ENV_PREFIX = "GROUPWIRE_"
MIN_FRAME_BYTES = 128 * 1024


class SettingsError(ValueError):
    """A setting has a value the broker cannot run with; the message names the flag."""


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str = ""
    data_dir: Path = Path("data")
    metrics_port: int = 9100
    metrics_partition_series: bool = False
    num_partitions: int = 1
    auto_create_topics: bool = False
    fsync: str = "interval"
    flush_interval_ms: int = 1000
    segment_bytes: int = 64 * 1024 * 1024
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300000
    max_open_files: int = 0
    max_partitions: int = 20000
    log_offline_retry_ms: int = 5000
    offsets_topic_num_partitions: int = 50
    offsets_compact_min_records: int = 10000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = MAX_ARRAY_ITEMS
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300000
    connection_loss_grace_ms: int = 1000
    ownership_fencing: bool = True
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections: int = 10000
    max_in_flight_requests: int = 128
    connections_max_idle_ms: int = 600000
    frame_read_timeout_ms: int = 30000
    queued_max_request_bytes: int = 256 * 1024 * 1024
    loop_slice_ms: int = 5
    log_format: str = "auto"
    log_level: str = "info"
    node_id: int = 0
    etcd_endpoints: str = ""
    cluster_name: str = "groupwire"
    rack: str = ""
    etcd_lease_ttl_ms: int = 2000
    etcd_watch_timeout_ms: int = 0
    etcd_cafile: str = ""
    etcd_certfile: str = ""
    etcd_keyfile: str = ""
    default_replication_factor: int = 3
    offsets_topic_replication_factor: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 30000
    leader_imbalance_check_interval_ms: int = 300000
    leader_imbalance_per_broker_percentage: int = 10
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    listeners: str = ""
    advertised_listeners: str = ""
    kafka_on_listeners: bool = True
    kafka_listeners: str = ""
    kafka_advertised_listeners: str = ""
    kafka_heartbeat_hold_ms: int = 2500
    kafka_produce_validation: str = RELAXED
    producer_id_expiration_ms: int = 86_400_000
    transaction_state_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    ssl_client_auth: str = "none"
    ssl_handshake_timeout_ms: int = 10000
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512"
    authentication_timeout_ms: int = 10000
    authorizer: str = ""
    super_users: str = ""
    inter_broker_listener_name: str = ""
    inter_broker_sasl_mechanism: str = "SCRAM-SHA-512"
    inter_broker_sasl_username: str = ""
    inter_broker_sasl_password_file: str = ""
    inter_broker_sasl_password: str = field(default="", repr=False)
    """Not a flag (it would land in shell history and ``ps``): read from
    ``GROUPWIRE_INTER_BROKER_SASL_PASSWORD`` or ``--inter-broker-sasl-password-file``."""

    @property
    def clustered(self) -> bool:
        """Cluster mode: brokers share an etcd (docs/design/cluster.md)."""
        return bool(self.etcd_endpoints)

    @property
    def advertised(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        return "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host

    def listener_list(self) -> list[Listener]:
        """``--listeners``, or the one plaintext listener on ``--host``/``--port``."""
        if not self.listeners.strip():
            return [plaintext(self.host, self.port)]
        return parse_listeners(self.listeners, "--listeners")

    def advertised_listener_list(self) -> list[Listener]:
        if not self.advertised_listeners.strip():
            return []
        return parse_listeners(self.advertised_listeners, "--advertised-listeners")

    def kafka_listener_list(self) -> list[Listener]:
        """``--kafka-listeners``: listeners that speak only Kafka's protocol (none by
        default: Kafka clients use ``--listeners``, told apart by their first frame)."""
        if not self.kafka_listeners.strip():
            return []
        return parse_listeners(self.kafka_listeners, "--kafka-listeners")

    def kafka_advertised_listener_list(self) -> list[Listener]:
        if not self.kafka_advertised_listeners.strip():
            return []
        return parse_listeners(self.kafka_advertised_listeners, "--kafka-advertised-listeners")

    def inter_broker_listener(self) -> Listener:
        """The listener brokers reach each other on (``--inter-broker-listener-name``,
        default the first of ``--listeners``), Kafka's ``inter.broker.listener.name``."""
        listeners = self.listener_list()
        name = self.inter_broker_listener_name.strip().upper()
        for listener in listeners:
            if listener.name == name:
                return listener
        if name:
            raise ListenerError(
                f"--inter-broker-listener-name: {name} is not among --listeners "
                f"({', '.join(listener.name for listener in listeners)})")
        return listeners[0]

    def sasl_mechanisms(self) -> list[str]:
        return [m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",")
                if m.strip()]

    def super_user_list(self) -> list[str]:
        """``--super-users`` in Kafka's ``User:a;User:b`` form."""
        return [u.strip() for u in self.super_users.split(";") if u.strip()]

    def coordinator_config(self) -> CoordinatorConfig:
        return CoordinatorConfig(
            initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=self.group_min_session_timeout_ms,
            max_session_timeout_ms=self.group_max_session_timeout_ms,
            group_max_size=self.group_max_size,
            new_member_join_timeout_ms=self.new_member_join_timeout_ms,
            offsets_retention_ms=self.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=self.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=self.offset_metadata_max_bytes,
            connection_loss_grace_ms=self.connection_loss_grace_ms,
            ownership_fencing=self.ownership_fencing,
        )

    def storage_config(self) -> StorageConfig:
        return StorageConfig(
            fsync=FsyncPolicy(self.fsync),
            flush_interval_ms=self.flush_interval_ms,
            segment_bytes=self.segment_bytes,
            offsets_partitions=self.offsets_topic_num_partitions,
            retention_ms=self.log_retention_ms,
            retention_bytes=self.log_retention_bytes,
            max_partitions=self.max_partitions,
            offline_retry_ms=self.log_offline_retry_ms,
            replica_files=self.clustered,
        )


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    help: str
    check: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] = ()
    negative_flag: str = ""


def _at_least(lo: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def _between(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def _open_files(v: int) -> str | None:
    return None if v == 0 or v >= 16 else "must be 0 (derived from the limit) or >= 16"


def _port(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "must be a port number 0-65535"


def _port_or_off(v: int) -> str | None:
    return None if -1 <= v <= 65535 else "must be a port number 0-65535, or -1 to disable"


OPTIONS: tuple[Option, ...] = (
    Option("host", "address to listen on"),
    Option("port", "TCP port for clients (0 picks a free one)", _port),
    Option("advertised_host", "host name given to clients in Metadata (default: --host)"),
    Option("data_dir", "directory holding the logs and group metadata"),
    Option("metrics_port", "Prometheus /metrics HTTP port (0: any free port, -1: off)",
           _port_or_off),
    Option("metrics_partition_series",
           "export log end offset, committed offset and lag per partition too (a series "
           "per partition and per group and partition); off: summed per topic and per "
           "group and topic only, so series grow with topics x groups, not partitions"),
    Option("num_partitions", "partitions of a topic created without a count", _at_least(1)),
    Option("auto_create_topics", "create unknown topics named in Metadata requests"),
    Option("fsync", "when writes are fsynced before they are acknowledged",
           choices=("always", "interval", "never")),
    Option("flush_interval_ms", "fsync period with --fsync interval", _at_least(1)),
    Option("segment_bytes", "roll a log segment past this size", _at_least(1024)),
    Option("log_retention_ms", "delete topic data older than this (-1: keep)", _at_least(-1)),
    Option("log_retention_bytes", "cap each partition's size (-1: no cap)", _at_least(-1)),
    Option("log_retention_check_interval_ms", "how often topic retention runs", _at_least(1)),
    Option("max_open_files",
           "log files held open at once, reopened on use past that (0: half of the "
           "process's RLIMIT_NOFILE after 64 kept for the broker itself; the rest is for "
           "connections)", _open_files),
    Option("max_partitions",
           "partitions the broker hosts in all, internal ones included; creating more is "
           "refused (POLICY_VIOLATION)", _at_least(1)),
    Option("log_offline_retry_ms",
           "a partition offline after a failed fsync tries to come back on its next write "
           "once this long has passed", _at_least(0)),
    Option("offsets_topic_num_partitions",
           "__consumer_offsets partitions (fixed when the data dir is created)", _at_least(1)),
    Option("offsets_compact_min_records",
           "compact a __consumer_offsets partition once it holds this many records and "
           "more than twice its live keys", _at_least(10)),
    Option("group_initial_rebalance_delay_ms",
           "wait for more members before the first rebalance of an empty group", _at_least(0)),
    Option("group_min_session_timeout_ms", "smallest session timeout a member may ask for",
           _at_least(1)),
    Option("group_max_session_timeout_ms", "largest session timeout a member may ask for",
           _at_least(1)),
    Option("group_max_size",
           f"most members one group may have (at most {MAX_ARRAY_ITEMS}: a SyncGroup "
           "carries an assignment per member, and a request array holds at most that many)",
           _between(1, MAX_ARRAY_ITEMS)),
    Option("offsets_retention_minutes",
           "drop committed offsets of a group empty for this long", _at_least(1)),
    Option("offsets_retention_check_interval_ms", "how often offset retention runs",
           _at_least(1)),
    Option("offset_metadata_max_bytes", "longest metadata string on a committed offset",
           _at_least(0)),
    Option("new_member_join_timeout_ms",
           "how long a new member may wait in its first join", _at_least(1)),
    Option("connection_loss_grace_ms",
           "a dynamic member whose connections all closed is removed after this", _at_least(0)),
    Option("ownership_fencing",
           "refuse fetches and commits for partitions the member does not own",
           negative_flag="--no-ownership-fencing"),
    Option("max_frame_bytes", "largest frame accepted or sent", _at_least(MIN_FRAME_BYTES)),
    Option("max_connections", "refuse connections beyond this many", _at_least(1)),
    Option("max_in_flight_requests",
           "requests read ahead of their answers per connection", _at_least(1)),
    Option("connections_max_idle_ms", "close connections idle this long", _at_least(1)),
    Option("frame_read_timeout_ms",
           "close a connection holding a partial frame this long (slowloris)", _at_least(1)),
    Option("queued_max_request_bytes",
           "bytes of unfinished and queued requests held across all connections; a "
           "connection needing more stops being read, the newest are closed (at least "
           "--max-frame-bytes)", _at_least(MIN_FRAME_BYTES)),
    Option("loop_slice_ms",
           "how long one request's work may run before other connections get a turn of "
           "the event loop, in ms; 0 yields after every step", _at_least(0)),
    Option("log_format", "log output: json, console, or auto (console on a terminal)",
           choices=("auto", "json", "console")),
    Option("log_level", "least severe log level shown",
           choices=("debug", "info", "warning", "error")),
    Option("node_id", "this broker's id in a cluster, unique among its brokers (an int32, "
           "as Kafka's node ids are)", _between(0, (1 << 31) - 1)),
    Option("etcd_endpoints",
           "comma-separated etcd URLs (http://host:2379,...); set, the broker joins a "
           "cluster whose metadata lives there; empty: a single broker"),
    Option("cluster_name", "the cluster's name: its keys live under /groupwire/NAME/ in etcd"),
    Option("rack", "this broker's rack: replicas of a partition go to different racks"),
    Option("etcd_lease_ttl_ms",
           "a broker whose lease keep-alives stop is out of the cluster after this "
           "(rounded up to whole seconds)", _at_least(1000)),
    Option("etcd_watch_timeout_ms",
           "an etcd watch that brings nothing for this long is checked against a read and "
           "replaced (on the next endpoint) if it fell behind; 0: a third of "
           "--etcd-lease-ttl-ms", _at_least(0)),
    Option("etcd_cafile",
           "PEM CA certificates etcd's server certificate is checked against on https:// "
           "endpoints (default: the system's)"),
    Option("etcd_certfile",
           "PEM client certificate the broker presents to etcd on https:// endpoints "
           "(etcd's --client-cert-auth: mutual TLS)"),
    Option("etcd_keyfile", "PEM private key of --etcd-certfile (default: in that file)"),
    Option("default_replication_factor",
           "replicas of a topic created without a factor (cluster mode)", _at_least(1)),
    Option("offsets_topic_replication_factor",
           "replicas of each __consumer_offsets partition; created once this many brokers "
           "are live (cluster mode)", _at_least(1)),
    Option("min_insync_replicas",
           "in-sync replicas an acks=all produce needs (cluster mode)", _at_least(1)),
    Option("leader_imbalance_check_interval_ms",
           "how often the controller moves leaderships back to their preferred replicas "
           "(after an outage one broker may lead everything; Kafka's "
           "leader.imbalance.check.interval.seconds); 0: never", _at_least(0)),
    Option("leader_imbalance_per_broker_percentage",
           "a broker's preferred partitions another broker leads, in percent, above "
           "which that check moves them back", _between(0, 100)),
    Option("replica_lag_time_max_ms",
           "a follower not caught up for this long leaves the ISR", _at_least(1)),
    Option("replica_fetch_wait_max_ms",
           "longest a follower's fetch waits at the leader for new records", _at_least(0)),
    Option("replica_fetch_max_bytes",
           "bytes a follower asks for per partition in one fetch", _at_least(1024)),
    Option("listeners",
           "comma list of NAME://HOST:PORT, NAME one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
           "SASL_SSL (e.g. SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092); empty "
           "host: every interface, [::1] for IPv6 (default: PLAINTEXT://--host:--port)"),
    Option("advertised_listeners",
           "NAME://HOST:PORT per listener as Metadata names it to clients connected "
           "there; port 0: the bound one (default: --advertised-host, else the "
           "listener's host, 127.0.0.1 for every interface)"),
    Option("kafka_on_listeners",
           "Kafka clients may use --listeners too: each connection is told apart by its "
           "first frame (docs/protocol.md §13)", negative_flag="--no-kafka-on-listeners"),
    Option("kafka_listeners",
           "listeners that speak only Kafka's protocol, NAME://HOST:PORT as --listeners "
           "(e.g. PLAINTEXT://0.0.0.0:19092); empty: none, Kafka clients use --listeners"),
    Option("kafka_advertised_listeners",
           "NAME://HOST:PORT per --kafka-listeners entry as Metadata names it to Kafka "
           "clients connected there; port 0: the bound one"),
    Option("kafka_heartbeat_hold_ms",
           "longest a Kafka client's Heartbeat answer is held so that a rebalance is told "
           "at once rather than at its next heartbeat; any other request on its "
           "connection releases it (docs/protocol.md §13.5); 0: answered at once, as "
           "Kafka answers", _at_least(0)),
    Option("kafka_produce_validation",
           "which produced Kafka batches have their records walked before they are "
           "stored (decompressed, their lengths adding up to the batch's count, as "
           "Kafka checks every batch): strict, every batch; relaxed, uncompressed "
           "batches only, compressed ones passing on their header and CRC-32C (as "
           "Redpanda's default); crc, none (docs/protocol.md §13.4)",
           choices=VALIDATIONS),
    Option("producer_id_expiration_ms",
           "a partition forgets an idempotent producer whose last batch there is this old "
           "(Kafka's producer.id.expiration.ms): its next batch may start at any sequence",
           _at_least(1)),
    Option("transaction_state_partitions",
           "partitions of __transaction_state, made when the first transactional "
           "producer starts; a transactional id's coordinator is its partition's leader "
           "(Kafka's transaction.state.log.num.partitions); fixed once made",
           _at_least(1)),
    Option("transaction_max_timeout_ms",
           "longest transaction timeout a producer may ask for; a longer one is refused "
           "INVALID_TRANSACTION_TIMEOUT (Kafka's transaction.max.timeout.ms)",
           _at_least(1)),
    Option("transactional_id_expiration_ms",
           "a transactional id with no transaction for this long is forgotten (Kafka's "
           "transactional.id.expiration.ms)", _at_least(1)),
    Option("ssl_certfile", "PEM certificate chain of SSL and SASL_SSL listeners"),
    Option("ssl_keyfile", "PEM private key of --ssl-certfile"),
    Option("ssl_cafile", "PEM CA certificates client certificates (and in a cluster, "
           "the other brokers' certificates) are checked against"),
    Option("ssl_client_auth",
           "client certificates on SSL listeners: none, requested (checked if given; "
           "its CN is the principal), required",
           choices=("none", "requested", "required")),
    Option("ssl_handshake_timeout_ms", "close a connection whose TLS handshake takes longer",
           _at_least(1)),
    Option("sasl_enabled_mechanisms",
           "SASL mechanisms offered on SASL listeners, comma list of PLAIN, SCRAM-SHA-256, "
           "SCRAM-SHA-512 (PLAIN sends the password itself: use it over SASL_SSL only)"),
    Option("authentication_timeout_ms",
           "close a connection on a SASL listener not authenticated within this",
           _at_least(1)),
    Option("authorizer", "'acl' checks every request against the ACLs; '' allows all",
           choices=("", "acl")),
    Option("super_users", "principals no ACL applies to, Kafka's User:a;User:b form"),
    Option("inter_broker_listener_name",
           "the listener brokers of a cluster fetch from each other on, one of --listeners' "
           "names (default: the first); its address is the one each broker registers"),
    Option("inter_broker_sasl_mechanism",
           "SASL mechanism of the brokers' own connections to a SASL inter-broker listener "
           "(one of --sasl-enabled-mechanisms)", choices=SASL_MECHANISMS),
    Option("inter_broker_sasl_username",
           "the user brokers authenticate as to each other; give its principal "
           "CLUSTER_ACTION on the cluster or list it in --super-users"),
    Option("inter_broker_sasl_password_file",
           "file whose first line is --inter-broker-sasl-username's password (or the "
           "password itself in GROUPWIRE_INTER_BROKER_SASL_PASSWORD; never a flag)"),
)

PASSWORD_ENV = ENV_PREFIX + "INTER_BROKER_SASL_PASSWORD"
"""The inter-broker password, when not in ``--inter-broker-sasl-password-file``."""

_DEFAULTS = BrokerSettings()
_TYPES: dict[str, type] = {
    f.name: type(getattr(_DEFAULTS, f.name)) for f in fields(BrokerSettings)
}


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_of(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _parse(name: str, raw: str, source: str) -> Any:
    kind = _TYPES[name]
    if kind is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{source}: expected true or false, got {raw!r}")
    if kind is int:
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            raise SettingsError(f"{source}: expected an integer, got {raw!r}") from None
    if kind is Path or issubclass(kind, Path):
        return Path(raw)
    return raw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting; values stay None unless given, so env/defaults can apply."""
    for opt in OPTIONS:
        default = getattr(_DEFAULTS, opt.name)
        kind = _TYPES[opt.name]
        env = env_of(opt.name)
        if kind is bool:
            if opt.negative_flag:
                parser.add_argument(
                    opt.negative_flag, dest=opt.name, action="store_const", const="false",
                    default=None, help=f"{opt.help}: turn off (default on; env {env})",
                )
            else:
                parser.add_argument(
                    flag_of(opt.name), dest=opt.name, action="store_const", const="true",
                    default=None, help=f"{opt.help} (default off; env {env})",
                )
            continue
        extra = f" ({'|'.join(opt.choices)})" if opt.choices else ""
        # an empty default is described by the help text itself ("default: --host")
        shown = f"default {default}; " if default != "" else ""
        parser.add_argument(
            flag_of(opt.name), dest=opt.name, default=None, metavar=opt.name.upper(),
            help=f"{opt.help}{extra} ({shown}env {env})",
        )
    # No password is ever a flag (it would stay in the shell's history and in `ps`): this
    # one only exists so that it, or an abbreviation of the -file flag, is refused
    # without being echoed.
    parser.add_argument("--inter-broker-sasl-password", nargs="?", action=_NoPasswordFlag,
                        help=argparse.SUPPRESS)


class _NoPasswordFlag(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        parser.error("--inter-broker-sasl-password: a password is never a flag; use "
                     "--inter-broker-sasl-password-file or GROUPWIRE_INTER_BROKER_SASL_PASSWORD")


def resolve(args: argparse.Namespace | None, environ: Mapping[str, str] | None = None,
            ) -> BrokerSettings:
    """Build settings from parsed flags over environment over defaults, then validate."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        given = getattr(args, opt.name, None) if args is not None else None
        if given is not None:
            source = opt.negative_flag or flag_of(opt.name)
            values[opt.name] = _parse(opt.name, str(given), source)
        elif env_of(opt.name) in env:
            source = f"{flag_of(opt.name)} (from {env_of(opt.name)})"
            values[opt.name] = _parse(opt.name, env[env_of(opt.name)], source)
    values["inter_broker_sasl_password"] = _inter_broker_password(
        values.get("inter_broker_sasl_password_file", ""), env)
    settings = BrokerSettings(**values)
    validate(settings)
    return settings


def _inter_broker_password(path: str, env: Mapping[str, str]) -> str:
    """The file's first line, else the environment's value, else empty."""
    if not path:
        return env.get(PASSWORD_ENV, "")
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as exc:
        raise SettingsError(f"--inter-broker-sasl-password-file: cannot read {path!r}: "
                            f"{exc.strerror or exc}") from None


def validate(settings: BrokerSettings) -> None:
    for opt in OPTIONS:
        value = getattr(settings, opt.name)
        if opt.choices and value not in opt.choices:
            raise SettingsError(
                f"{flag_of(opt.name)}: expected one of {', '.join(opt.choices)}, got {value!r}"
            )
        if opt.check is not None:
            problem = opt.check(value)
            if problem:
                raise SettingsError(f"{flag_of(opt.name)}: {problem}, got {value}")
    if settings.queued_max_request_bytes < settings.max_frame_bytes:
        raise SettingsError(
            "--queued-max-request-bytes: must be at least --max-frame-bytes, so that "
            "every frame the broker accepts can be held"
        )
    validate_etcd(settings)
    if settings.group_min_session_timeout_ms > settings.group_max_session_timeout_ms:
        raise SettingsError(
            "--group-min-session-timeout-ms: must not exceed --group-max-session-timeout-ms"
        )
    validate_security(settings)


def validate_security(settings: BrokerSettings) -> None:
    """Listeners, TLS files and SASL mechanisms fit together (the broker checks again at
    start, for settings built without :func:`resolve`)."""
    try:
        listeners = settings.listener_list()
        check_advertised(listeners, settings.advertised_listener_list(),
                         "--advertised-listeners")
        kafka = settings.kafka_listener_list()
        check_advertised(kafka, settings.kafka_advertised_listener_list(),
                         "--kafka-advertised-listeners", "--kafka-listeners")
    except ListenerError as exc:
        raise SettingsError(str(exc)) from None
    listeners = listeners + kafka
    if any(listener.uses_tls for listener in listeners):
        if not settings.ssl_certfile or not settings.ssl_keyfile:
            raise SettingsError(
                "--ssl-certfile and --ssl-keyfile: an SSL or SASL_SSL listener needs both")
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
            path = getattr(settings, name)
            if path and not Path(path).is_file():
                raise SettingsError(f"{flag_of(name)}: no such file {path!r}")
    if settings.ssl_client_auth != "none" and not settings.ssl_cafile:
        raise SettingsError(
            f"--ssl-cafile: needed to check client certificates "
            f"(--ssl-client-auth {settings.ssl_client_auth})")
    mechanisms = settings.sasl_mechanisms()
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise SettingsError(
                f"--sasl-enabled-mechanisms: expected some of {', '.join(SASL_MECHANISMS)}, "
                f"got {mechanism!r}")
    if not mechanisms and any(listener.uses_sasl for listener in listeners):
        raise SettingsError(
            "--sasl-enabled-mechanisms: a SASL listener needs at least one mechanism")
    for user in settings.super_user_list():
        if not user.startswith("User:") or len(user) == len("User:"):
            raise SettingsError(
                f"--super-users: expected User:NAME;User:NAME..., got {user!r}")
    _validate_inter_broker(settings, mechanisms)


def _validate_inter_broker(settings: BrokerSettings, mechanisms: list[str]) -> None:
    """Cluster mode: the brokers' own connections can authenticate on their listener."""
    try:
        listener = settings.inter_broker_listener()
    except ListenerError as exc:
        raise SettingsError(str(exc)) from None
    if not settings.clustered or not listener.uses_sasl:
        return
    if not settings.inter_broker_sasl_username or not settings.inter_broker_sasl_password:
        raise SettingsError(
            f"--inter-broker-sasl-username and --inter-broker-sasl-password-file (or "
            f"{PASSWORD_ENV}): the {listener.name} inter-broker listener needs both")
    if settings.inter_broker_sasl_mechanism not in mechanisms:
        raise SettingsError(
            f"--inter-broker-sasl-mechanism: {settings.inter_broker_sasl_mechanism} is not "
            f"in --sasl-enabled-mechanisms ({', '.join(mechanisms)})")


def validate_etcd(settings: BrokerSettings) -> None:
    """``--etcd-endpoints`` all http:// or all https:// (a TLS cluster never falls back
    to plaintext on failover), and the TLS files only with https://, and present."""
    urls = etcd_urls(settings)
    schemes = set()
    for url in urls:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https") or not rest:
            raise SettingsError(
                f"--etcd-endpoints: expected http://HOST:PORT or https://HOST:PORT URLs, "
                f"got {url!r}")
        schemes.add(scheme)
    if len(schemes) > 1:
        raise SettingsError("--etcd-endpoints: all http:// or all https://, not both")
    files = ("etcd_cafile", "etcd_certfile", "etcd_keyfile")
    for name in files:
        path = getattr(settings, name)
        if not path:
            continue
        if schemes != {"https"}:
            raise SettingsError(
                f"{flag_of(name)}: given, but --etcd-endpoints are not https:// URLs")
        if not Path(path).is_file():
            raise SettingsError(f"{flag_of(name)}: no such file {path!r}")
    if settings.etcd_keyfile and not settings.etcd_certfile:
        raise SettingsError("--etcd-keyfile: needs --etcd-certfile")


def parse_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None,
                   ) -> BrokerSettings:
    parser = argparse.ArgumentParser(prog="groupwire broker")
    add_arguments(parser)
    return resolve(parser.parse_args(list(argv)), environ)


def etcd_urls(settings: BrokerSettings) -> list[str]:
    """``--etcd-endpoints`` as a list (empty in single-broker mode)."""
    return [u.strip() for u in settings.etcd_endpoints.split(",") if u.strip()]
