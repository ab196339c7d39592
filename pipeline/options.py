"""The data source's options, parsed and checked before Spark plans anything.

Pure (no pyspark, no I/O) so every rule is unit-tested. Spark hands options over with
case-insensitive keys; names here keep Spark's Kafka spelling (``startingOffsets``) and
every error names the option it is about, so a typo fails the query at once instead of
being ignored. ``isolationLevel`` is also accepted under its Kafka name, ``isolation.level``
(or Spark-Kafka's ``kafka.isolation.level``). The security options are Kafka's client
properties (``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password``
or ``sasl.jaas.config``, ``ssl.truststore.location`` or ``ssl.cafile`` ...); only
:meth:`ClientSecurity.config`, called where a connection is made, reads a file.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from groupwire.client.fetcher import ISOLATION_LEVELS, READ_UNCOMMITTED
from groupwire.client.security import (
    DEFAULT_SASL_MECHANISM,
    PLAINTEXT,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    SecurityConfig,
)
from groupwire.client.types import parse_bootstrap
from groupwire.pipeline.offsets import OffsetSpec, parse_offset_spec

DEFAULT_FETCH_MAX_BYTES: Final = 4 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30000

_SOURCE_OPTIONS: Final = (
    "bootstrap", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets",
    "maxOffsetsPerTrigger", "failOnDataLoss", "minPartitions", "fetchMaxBytes",
    "requestTimeoutMs", "isolationLevel",
)
_KAFKA_NAMES: Final = {"isolation.level": "isolationLevel"}
"""Source options also given by their Kafka consumer property name (Spark-Kafka passes
``kafka.isolation.level`` to its consumers), so an existing query's options carry over."""
_SINK_OPTIONS: Final = ("bootstrap", "topic", "requestTimeoutMs", "lingerMs",
                        "maxBatchBytes", "transactionalIdPrefix", "transactionTimeoutMs",
                        "checkpointLocation", "path")
# Spark adds the last two itself for some writes; they mean nothing to this sink.

DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 60000
"""Kafka's ``transaction.timeout.ms`` default: an exactly-once task's transaction left open
by a crash blocks read_committed readers of its partitions at most this long."""

SECURITY_OPTIONS: Final = (
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
    "sasl.jaas.config", "ssl.truststore.location", "ssl.keystore.location",
    "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "ssl.cafile", "ssl.certfile", "ssl.keyfile",
)
"""Kafka's client property names, read by the source and the sink alike (also with
Spark-Kafka's ``kafka.`` prefix, so an existing query's options carry over)."""
_SSL_ALIASES: Final = {"ssl.cafile": "ssl.truststore.location",
                       "ssl.certfile": "ssl.keystore.location",
                       "ssl.keyfile": "ssl.key.location"}
_SSL_FILES: Final = ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.location")
_SECRET: Final = ("sasl.password", "sasl.jaas.config", "ssl.key.password")

Mode = Literal["batch", "stream"]

_MAX_PREFIX: Final = 200
"""A transactional id (and the marker group named like it) is the prefix, a dash and the
task's partition number: kept well inside a group id's and a log line's comfort."""


class OptionError(ValueError):
    """An unknown option or a bad value; the message names the option."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A read's or write's security settings as Kafka client properties (canonical names).

    Plain strings, because the options travel pickled to Spark's workers and an
    ``SSLContext`` does not pickle: each worker builds its own with :meth:`config`.
    """

    properties: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # Spark logs plans and partitions: never a secret
        shown = ", ".join(f"{k}={'***' if k in _SECRET else v}" for k, v in self.properties)
        return f"ClientSecurity({shown})"

    @property
    def protocol(self) -> str:
        return dict(self.properties).get("security.protocol", PLAINTEXT)

    def config(self) -> SecurityConfig:
        """The SDK's settings, the TLS context loaded here (on the worker that connects);
        a missing or unreadable file is an OptionError naming the option and this host."""
        props = dict(self.properties)
        if self.protocol in ("SSL", "SASL_SSL"):
            for name in _SSL_FILES:
                path = props.get(name)
                if path and not Path(path).is_file():
                    raise OptionError(f"option {name!r}: no such file {path!r} on "
                                      f"{socket.gethostname()}")
        try:
            return SecurityConfig.from_properties(props)
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(f"TLS options on {socket.gethostname()}: "
                              f"{getattr(exc, 'reason', None) or exc}") from exc


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What a read needs, checked. ``topics`` xor ``pattern`` is set."""

    bootstrap: str
    topics: tuple[str, ...] | None
    pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    fetch_max_bytes: int
    request_timeout_ms: int
    security: ClientSecurity = ClientSecurity()
    isolation_level: str = READ_UNCOMMITTED
    """Kafka's: ``read_uncommitted`` reads to the high watermark, transactions' records
    whatever their outcome; ``read_committed`` only below the last stable offset, without
    aborted transactions' records. Transaction markers are never rows."""

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this read subscribes to."""
        if self.topics is not None:
            return topic in self.topics
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What a write needs; ``topic`` is the default for rows without a topic column.

    ``transactional_id_prefix`` set makes the sink exactly-once (each write task one
    transaction, :mod:`groupwire.pipeline.writer`); None keeps it at-least-once."""

    bootstrap: str
    topic: str | None
    request_timeout_ms: int
    linger_ms: int
    max_batch_bytes: int
    security: ClientSecurity = ClientSecurity()
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS


def _normalise(options: Mapping[str, str], known: tuple[str, ...], what: str) -> dict[str, str]:
    by_lower = {name.lower(): name for name in (*known, *SECURITY_OPTIONS)}
    out: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered.startswith("kafka.") and (lowered[6:] in SECURITY_OPTIONS
                                             or lowered[6:] in _KAFKA_NAMES):
            lowered = lowered[6:]  # Spark-Kafka's spelling of the same property
        alias = _KAFKA_NAMES.get(lowered)
        if alias is not None and alias in known:
            lowered = alias.lower()
        name = by_lower.get(lowered)
        if name is None:
            raise OptionError(f"unknown {what} option {key!r}; known: {', '.join(known)} "
                              f"and the security options {', '.join(SECURITY_OPTIONS)}")
        if name in out:
            raise OptionError(f"option {name!r} given twice (as {key!r} too)")
        out[name] = value
    return out


def _jaas_value(jaas: str, key: str) -> str | None:
    found = re.search(rf'\b{key}\s*=\s*"([^"]*)"', jaas)
    return found.group(1) if found else None


def parse_security(opts: Mapping[str, str]) -> ClientSecurity:
    """The security options among ``opts`` (names as :func:`_normalise` leaves them),
    checked without reading any file: the driver may not hold the workers' files."""
    props: dict[str, str] = {}
    for name in SECURITY_OPTIONS:
        if name not in opts:
            continue
        canonical = _SSL_ALIASES.get(name, name)
        if canonical in props:
            raise OptionError(f"options {canonical!r} and {name!r} name the same file; "
                              "give one")
        props[canonical] = str(opts[name]).strip()
    protocol = props.get("security.protocol", PLAINTEXT).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise OptionError(f"option 'security.protocol': expected one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}, got {props['security.protocol']!r}")
    mechanism = props.get("sasl.mechanism", DEFAULT_SASL_MECHANISM).upper()
    if mechanism not in SASL_MECHANISMS:
        raise OptionError(f"option 'sasl.mechanism': expected one of "
                          f"{', '.join(SASL_MECHANISMS)}, got {props['sasl.mechanism']!r}")
    if "security.protocol" in props:
        props["security.protocol"] = protocol
    if "sasl.mechanism" in props:
        props["sasl.mechanism"] = mechanism
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    ssl_given = sorted(k for k in props if k.startswith("ssl."))
    if ssl_given and not tls:
        raise OptionError(f"option {ssl_given[0]!r}: only used with security.protocol SSL "
                          f"or SASL_SSL (it is {protocol})")
    sasl_given = sorted(k for k in props if k.startswith("sasl."))
    if sasl:
        jaas = props.get("sasl.jaas.config", "")
        for key in ("username", "password"):
            if not (props.get(f"sasl.{key}") or _jaas_value(jaas, key)):
                raise OptionError(f"security.protocol {protocol} needs option "
                                  f"'sasl.{key}' (or sasl.jaas.config with {key}=\"...\")")
    elif sasl_given:
        raise OptionError(f"option {sasl_given[0]!r}: only used with security.protocol "
                          f"SASL_PLAINTEXT or SASL_SSL (it is {protocol})")
    check = props.get("ssl.endpoint.identification.algorithm")
    if check is not None and check.lower() not in ("", "https"):
        raise OptionError("option 'ssl.endpoint.identification.algorithm': expected https "
                          f"(check the broker's host name) or empty (do not), got {check!r}")
    return ClientSecurity(tuple(sorted(props.items())))


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    text = opts.get(name)
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"option {name!r}: expected a positive integer, got {text!r}"
                          ) from None
    if value <= 0:
        raise OptionError(f"option {name!r}: expected a positive integer, got {text!r}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = opts.get(name)
    if text is None:
        return default
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r}: expected true or false, got {text!r}")
    return lowered == "true"


def _isolation_level(opts: Mapping[str, str]) -> str:
    text = opts.get("isolationLevel")
    if text is None:
        return READ_UNCOMMITTED
    level = str(text).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise OptionError(f"option 'isolationLevel': expected {' or '.join(ISOLATION_LEVELS)}, "
                          f"got {text!r}")
    return level


def _bootstrap(opts: Mapping[str, str]) -> str:
    text = opts.get("bootstrap")
    if text is None or not str(text).strip():
        raise OptionError("option 'bootstrap' is required (HOST:PORT[,HOST:PORT...])")
    try:
        parse_bootstrap(str(text))
    except ValueError as exc:
        raise OptionError(f"option 'bootstrap': {exc}") from None
    return str(text).strip()


def parse_source_options(options: Mapping[str, str], mode: Mode) -> SourceOptions:
    """Check a read's options; ``mode`` decides which offsets make sense (as Kafka's)."""
    opts = _normalise(options, _SOURCE_OPTIONS, "source")
    bootstrap = _bootstrap(opts)
    subscribe, pattern = opts.get("subscribe"), opts.get("subscribePattern")
    if (subscribe is None) == (pattern is None):
        raise OptionError("give exactly one of the options 'subscribe' (comma-separated "
                          "topics) and 'subscribePattern' (a regular expression)")
    topics: tuple[str, ...] | None = None
    if subscribe is not None:
        topics = tuple(sorted({t.strip() for t in subscribe.split(",") if t.strip()}))
        if not topics:
            raise OptionError("option 'subscribe': no topic given")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern': bad regular expression: {exc}"
                              ) from None
    starting = parse_offset_spec("startingOffsets", opts.get("startingOffsets"),
                                 default="earliest" if mode == "batch" else "latest")
    ending = parse_offset_spec("endingOffsets", opts.get("endingOffsets"), default="latest")
    if mode == "batch":
        if starting == "latest":
            raise OptionError("option 'startingOffsets': 'latest' is not allowed in a batch "
                              "read (it would read nothing)")
        if ending == "earliest":
            raise OptionError("option 'endingOffsets': 'earliest' is not allowed in a batch "
                              "read (it would read nothing)")
        for spec, name, banned, word in ((starting, "startingOffsets", -1, "latest"),
                                         (ending, "endingOffsets", -2, "earliest")):
            if isinstance(spec, dict):
                for topic, parts in spec.items():
                    for part, off in parts.items():
                        if off == banned:
                            raise OptionError(
                                f"option {name!r}: {topic}[{part}] is {banned} ({word}), "
                                "not allowed in a batch read")
    elif "endingOffsets" in opts:
        raise OptionError("option 'endingOffsets' is for batch reads only; a stream reads "
                          "on as records arrive")
    min_partitions = _positive_int(opts, "minPartitions")
    return SourceOptions(
        bootstrap=bootstrap, topics=topics, pattern=pattern, starting=starting,
        ending=ending, max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=min_partitions,
        fetch_max_bytes=_positive_int(opts, "fetchMaxBytes") or DEFAULT_FETCH_MAX_BYTES,
        request_timeout_ms=(_positive_int(opts, "requestTimeoutMs")
                            or DEFAULT_REQUEST_TIMEOUT_MS),
        security=parse_security(opts), isolation_level=_isolation_level(opts))


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a write's options."""
    opts = _normalise(options, _SINK_OPTIONS, "sink")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic': empty topic name")
    linger = opts.get("lingerMs")
    linger_ms = 5
    if linger is not None:
        try:
            linger_ms = int(linger)
        except ValueError:
            raise OptionError(f"option 'lingerMs': expected an integer, got {linger!r}"
                              ) from None
        if linger_ms < 0:
            raise OptionError(f"option 'lingerMs': expected 0 or more, got {linger!r}")
    prefix = opts.get("transactionalIdPrefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise OptionError("option 'transactionalIdPrefix': empty; give a name unique "
                              "to this query (its tasks' transactional ids start with it)")
        if len(prefix) > _MAX_PREFIX:
            raise OptionError(f"option 'transactionalIdPrefix': at most {_MAX_PREFIX} "
                              f"characters, got {len(prefix)}")
    timeout_ms = _positive_int(opts, "transactionTimeoutMs")
    if timeout_ms is not None and prefix is None:
        raise OptionError("option 'transactionTimeoutMs' is only used with "
                          "'transactionalIdPrefix' (exactly-once writes)")
    return SinkOptions(
        bootstrap=_bootstrap(opts), topic=topic.strip() if topic else None,
        request_timeout_ms=(_positive_int(opts, "requestTimeoutMs")
                            or DEFAULT_REQUEST_TIMEOUT_MS),
        linger_ms=linger_ms,
        max_batch_bytes=_positive_int(opts, "maxBatchBytes") or 1048576,
        security=parse_security(opts), transactional_id_prefix=prefix,
        transaction_timeout_ms=timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS)
