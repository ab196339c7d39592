"""The data source, the sink and ``groupwire report`` against a SASL_SSL broker with ACLs:
Kafka's option names in, each worker authenticating with a TLS context it builds itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupwire.client.admin import Admin
from groupwire.client.security import SecurityConfig, create_ssl_context
from tests.integration.security.secured_proc import SecuredBroker, start_secured_broker
from tests.spark.helpers import unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

USER, PASSWORD = "spark", "spark-secret"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    broker = start_secured_broker(tmp_path_factory.mktemp("spark-secured"),
                                  {USER: PASSWORD}, USER, "--fsync", "never")
    try:
        yield broker
    finally:
        broker.proc.kill()


def _create_topic(broker: SecuredBroker, name: str, partitions: int) -> None:
    security = SecurityConfig(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                              sasl_plain_username=USER, sasl_plain_password=PASSWORD,
                              ssl_context=create_ssl_context(cafile=broker.cafile))

    async def go() -> None:
        async with Admin(broker.bootstrap, security=security) as admin:
            await admin.create_topics(name, partitions)

    asyncio.run(go())


def _options(broker: SecuredBroker, password: str = PASSWORD) -> dict[str, str]:
    return {"bootstrap": broker.bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": password, "ssl.cafile": str(broker.cafile)}


def test_rows_written_and_read_over_sasl_ssl(spark: Any, secured: SecuredBroker) -> None:
    topic = unique_topic("secured")
    _create_topic(secured, topic, 2)
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    df = spark.createDataFrame(rows, "key binary, value binary").repartition(2)
    df.write.format("groupwire").options(**_options(secured)).option("topic", topic) \
        .mode("append").save()
    # Spark-Kafka's spelling and a JAAS line, as an existing query would pass them
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{USER}" password="{PASSWORD}";')
    got = (spark.read.format("groupwire").option("bootstrap", secured.bootstrap)
           .option("kafka.security.protocol", "SASL_SSL")
           .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
           .option("kafka.sasl.jaas.config", jaas)
           .option("kafka.ssl.truststore.location", str(secured.cafile))
           .option("subscribe", topic).load().select("key", "value").collect())
    assert sorted((bytes(r.key), bytes(r.value)) for r in got) == sorted(rows)


def test_a_wrong_password_fails_the_write_naming_the_cause(
        spark: Any, secured: SecuredBroker) -> None:
    topic = unique_topic("secured-refused")
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as failed:
        df.write.format("groupwire").options(**_options(secured, "not-it")) \
            .option("topic", topic).mode("append").save()
    assert "not-it" not in str(failed.value)


def test_the_report_job_reads_group_events_of_a_secured_broker(
        spark: Any, secured: SecuredBroker, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's options as ``groupwire report`` hands them over (the environment), read
    by the job and passed to the source: its workers authenticate with them."""
    from groupwire.cli.child_security import child_env
    from groupwire.pipeline.report.job import read_events
    from groupwire.pipeline.report.options import build_parser, options_from

    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.username": USER, "sasl.password": PASSWORD,
             "ssl.truststore.location": str(secured.cafile)}
    for name, value in child_env(props).items():
        monkeypatch.setenv(name, value)
    opts = options_from(build_parser().parse_args(
        ["--bootstrap", secured.bootstrap, "--out", str(tmp_path)]))
    assert opts.security == props and PASSWORD not in repr(opts)
    assert read_events(spark, opts.bootstrap, opts.security).count() >= 0  # it was read
    with pytest.raises(Exception, match="groupwire broker"):  # plaintext on a TLS port
        read_events(spark, opts.bootstrap).count()
