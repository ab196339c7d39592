"""The data source's security options: Kafka's names in, a picklable value out, the TLS
context built only where a connection is made (a Spark worker)."""

from __future__ import annotations

import argparse
import json
import pickle
import ssl
from pathlib import Path

import pytest
import trustme

from groupwire.pipeline.offsets import OffsetRange
from groupwire.pipeline.options import (
    ClientSecurity,
    OptionError,
    parse_security,
    parse_sink_options,
    parse_source_options,
)
from groupwire.pipeline.report.options import (
    CLIENT_PROPERTIES_ENV,
    ReportError,
    build_parser,
    security_options,
)

READ = {"bootstrap": "127.0.0.1:9093", "subscribe": "orders"}
WRITE = {"bootstrap": "127.0.0.1:9093", "topic": "orders"}


@pytest.fixture(scope="module")
def cafile(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pki") / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)


def test_without_security_options_reads_and_writes_stay_plaintext() -> None:
    for opts in (parse_source_options(READ, "batch"), parse_sink_options(WRITE)):
        assert opts.security == ClientSecurity()
        config = opts.security.config()
        assert config.security_protocol == "PLAINTEXT" and config.tls_context() is None


def test_source_and_sink_take_the_same_kafka_names(cafile: str) -> None:
    given = {"security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512",
             "sasl.username": "alice", "sasl.password": "s3cret", "ssl.cafile": cafile}
    source = parse_source_options({**READ, **given}, "batch").security
    sink = parse_sink_options({**WRITE, **given}).security
    assert source == sink
    assert dict(source.properties) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "s3cret",
        "ssl.truststore.location": cafile}
    config = source.config()
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("alice", "s3cret")
    assert isinstance(config.ssl_context, ssl.SSLContext)
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_spark_kafka_prefixed_names_and_a_jaas_line_work_too() -> None:
    """An existing Spark-Kafka query's options (``kafka.`` prefix, JAAS) carry over, in
    whatever case Spark hands them."""
    opts = parse_source_options({
        **READ, "KAFKA.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                  'required username="bob" password="pw";'}, "stream")
    config = opts.security.config()
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("bob", "pw")
    assert config.tls_context() is None


def test_the_options_pickle_without_a_context_and_hide_secrets(cafile: str) -> None:
    """What travels to a worker is strings; the context is made there, from the file."""
    pytest.importorskip("pyarrow", reason="the read task's module needs the spark extra")
    from groupwire.pipeline.reading import ReadTask

    opts = parse_source_options({**READ, "security.protocol": "SASL_SSL",
                                 "sasl.username": "alice", "sasl.password": "s3cret",
                                 "ssl.truststore.location": cafile}, "batch")
    task = ReadTask(bootstrap=opts.bootstrap, range=OffsetRange("orders", 0, 0, 5),
                    fail_on_data_loss=True, fetch_max_bytes=1024,
                    request_timeout_ms=1000, security=opts.security)
    shipped = pickle.loads(pickle.dumps(task))
    assert shipped.security == opts.security
    assert all(isinstance(v, str) for _, v in shipped.security.properties)
    assert isinstance(shipped.security.config().ssl_context, ssl.SSLContext)
    assert "s3cret" not in repr(opts) and "s3cret" not in repr(shipped)


def test_a_missing_tls_file_is_named_where_the_context_is_built(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    security = parse_security({"security.protocol": "SSL",
                               "ssl.truststore.location": missing})  # not read here
    with pytest.raises(OptionError, match=r"'ssl.truststore.location': no such file .*nope"):
        security.config()


@pytest.mark.parametrize(("options", "named"), [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
      "sasl.username": "a", "sasl.password": "b"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.password": "b"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a"}, "sasl.password"),
    ({"ssl.cafile": "/ca.pem"}, "ssl.truststore.location"),
    ({"security.protocol": "SSL", "sasl.username": "a"}, "sasl.username"),
    ({"security.protocol": "SSL", "ssl.cafile": "/a", "ssl.truststore.location": "/b"},
     "ssl.truststore.location"),
    ({"security.protocol": "PLAINTEXT", "kafka.security.protocol": "PLAINTEXT"},
     "security.protocol"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
     "ssl.endpoint.identification.algorithm"),
    ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
])
def test_bad_security_options_fail_naming_the_option(options: dict[str, str],
                                                     named: str) -> None:
    for parse in (lambda o: parse_source_options({**READ, **o}, "batch"),
                  lambda o: parse_sink_options({**WRITE, **o})):
        with pytest.raises(OptionError, match=named.replace(".", r"\.")):
            parse(options)


def _job_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["--out", "/tmp/x", *argv])


def test_the_report_job_takes_its_parents_properties_and_a_command_config(
        tmp_path: Path) -> None:
    parent = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
              "sasl.password": "from-env", "client.id": "ignored"}
    env = {CLIENT_PROPERTIES_ENV: json.dumps(parent)}
    assert security_options(_job_args(), env) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
        "sasl.password": "from-env"}
    props = tmp_path / "client.properties"
    props.write_text("bootstrap.servers=b:9092\nsasl.password=from-file\n")
    assert security_options(_job_args("--command-config", str(props)), env)[
        "sasl.password"] == "from-file"
    assert security_options(_job_args(), {}) == {}
    with pytest.raises(ReportError, match=CLIENT_PROPERTIES_ENV):
        security_options(_job_args(), {CLIENT_PROPERTIES_ENV: "[1]"})
