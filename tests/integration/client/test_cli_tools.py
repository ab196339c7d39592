"""``groupwire topics|groups|produce|consume`` against a real broker: the command's own
``main(argv)``, run in a thread, since each command runs its own event loop while the
broker serves on the test's."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.cli.main import main
from groupwire.cli.output import iso_ms
from groupwire.client.admin import Admin
from groupwire.client.connection import Connection
from groupwire.client.types import TopicPartition
from groupwire.protocol.hashing import partition_for_key

from ..rawgroup import RawMember


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # rich folds cells in narrow captures


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout, and the command's own stderr lines (the in-process broker logs
    to the same captured streams; its lines are left out)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    own = "".join(line + "\n" for line in err.splitlines() if line.startswith("groupwire "))
    return code, out, own


async def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = await run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])  # one line; broker logs come before


async def test_topics_create_list_describe(capsys: pytest.CaptureFixture[str],
                                          bootstrap: str) -> None:
    b = ("--bootstrap", bootstrap)
    assert await run_json(capsys, "topics", "create", "orders", "--partitions", "3", *b) == {
        "created": {"orders": 3}, "existing": []}
    code, _, err = await run(capsys, "topics", "create", "orders", *b)
    assert code == 1 and err.count("\n") == 1 and "TOPIC_ALREADY_EXISTS" in err
    assert err.count("topic 'orders'") == 1, err  # said once, not "X: X already exists"
    code, _, err = await run(capsys, "topics", "create", "", *b)
    assert code == 1 and "INVALID_TOPIC_EXCEPTION: invalid topic name ''" in err
    assert err.count("''") == 1, err
    code, out, _ = await run(capsys, "topics", "create", "orders", "--if-not-exists", *b)
    assert code == 0 and "topic 'orders' already exists" in out and "created" not in out
    assert await run_json(capsys, "topics", "create", "orders", "more", "--if-not-exists",
                          *b) == {"created": {"more": 1}, "existing": ["orders"]}
    assert await run_json(capsys, "topics", "list", *b) == [
        {"name": "more", "partitions": 1, "internal": False},
        {"name": "orders", "partitions": 3, "internal": False}]
    listed = await run_json(capsys, "topics", "list", "--internal", *b)
    assert {t["name"] for t in listed} == {"more", "orders", "__consumer_offsets",
                                           "__group_events"}
    code, out, _ = await run(capsys, "topics", "list", *b)
    assert code == 0 and "orders" in out and "3" in out
    described = await run_json(capsys, "topics", "describe", "orders", *b)
    assert described == [{"name": "orders", "internal": False, "partitions": [
        {"partition": p, "start_offset": 0, "end_offset": 0} for p in range(3)]}]


async def test_produce_from_stdin_and_value(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, bootstrap: str,
                                           admin: Admin) -> None:
    await admin.create_topics("lines", 4)
    b = ("--bootstrap", bootstrap)
    monkeypatch.setattr("sys.stdin", io.StringIO("k1=a\nk2=b\nk1=c\n"))
    produced = await run_json(capsys, "produce", "--topic", "lines", "--key-separator", "=",
                              *b)
    assert [r["partition"] for r in produced] == [
        partition_for_key(k, 4) for k in (b"k1", b"k2", b"k1")]
    one = await run_json(capsys, "produce", "--topic", "lines", "--value", "x",
                         "--partition", "2", *b)
    assert one == [{"topic": "lines", "partition": 2,
                    "offset": sum(r["partition"] == 2 for r in produced)}]
    code, out, _ = await run(capsys, "produce", "--topic", "lines", "--value", "y", *b)
    assert code == 0 and "produced 1 record(s) to lines" in out
    code, _, err = await run(capsys, "produce", "--topic", "nope", "--value", "y",
                             "--timeout-ms", "300", *b)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and err.count("\n") == 1


async def test_groups_list_describe_lag_reset_delete(capsys: pytest.CaptureFixture[str],
                                                    broker: Broker, bootstrap: str,
                                                    admin: Admin) -> None:
    await admin.create_topics("work", 2)
    b = ("--bootstrap", bootstrap)
    await run(capsys, "produce", "--topic", "work", "--partition", "0", "--value", "a", *b)
    conn = await Connection.open("127.0.0.1", broker.port, client_id="member")
    m = RawMember(conn, "crew", ["work"])
    try:
        assert (await m.join_group()).error_code == 0
        assert (await m.sync({m.member_id: [("work", [0, 1])]})).error_code == 0
        assert (await m.commit({("work", 0): 0})).topics[0].partitions[0].error_code == 0
        assert await run_json(capsys, "groups", "list", *b) == [
            {"group_id": "crew", "protocol_type": "consumer", "state": "Stable"}]
        (desc,) = await run_json(capsys, "groups", "describe", "crew", *b)
        assert desc["state"] == "Stable" and desc["leader_id"] == m.member_id
        assert desc["members"][0]["assignment"] == [
            {"topic": "work", "partition": 0}, {"topic": "work", "partition": 1}]
        assert desc["rebalances"][-1]["reason"] == "member-joined"
        code, out, _ = await run(capsys, "groups", "describe", "crew", *b)
        assert code == 0 and "work[0,1]" in out and "member-joined" in out
        started = desc["rebalances"][-1]["started_ms"]
        assert str(started) not in out and iso_ms(started) in out  # a time, not epoch ms
        assert await run_json(capsys, "groups", "lag", "crew", *b) == [
            {"topic": "work", "partition": 0, "committed": 0, "end": 1, "lag": 1},
            {"topic": "work", "partition": 1, "committed": None, "end": 0, "lag": None}]
        code, _, err = await run(capsys, "groups", "reset-offsets", "crew", "--to-latest", *b)
        assert code == 1 and "is Stable" in err and err.count("\n") == 1
        code, _, err = await run(capsys, "groups", "delete", "crew", *b)
        assert code == 1 and "NON_EMPTY_GROUP" in err and err.count("\n") == 1
        assert "only an Empty group can be deleted" in err and err.count("crew") == 1, err
        assert (await m.leave()).error_code == 0
    finally:
        await conn.close()
    plan = [{"topic": "work", "partition": 0, "current": 0, "new": 1},
            {"topic": "work", "partition": 1, "current": None, "new": 0}]
    assert await run_json(capsys, "groups", "reset-offsets", "crew", "--to-latest",
                          "--topic", "work", *b) == {
        "group": "crew", "executed": False, "offsets": plan}
    # a dry run by default: nothing was committed
    assert (await admin.list_consumer_group_offsets("crew"))[TopicPartition("work", 0)
                                                             ].offset == 0
    code, out, _ = await run(capsys, "groups", "reset-offsets", "crew", "--to-latest",
                             "--topic", "work", *b)
    assert code == 0 and "dry run" in out and "work\t0\t0\t1" in out
    assert await run_json(capsys, "groups", "reset-offsets", "crew", "--to-latest",
                          "--topic", "work", "--execute", *b) == {
        "group": "crew", "executed": True, "offsets": plan}
    assert (await admin.list_consumer_group_offsets("crew"))[TopicPartition("work", 0)
                                                             ].offset == 1
    assert await run_json(capsys, "groups", "delete", "crew", *b) == {"crew": None}
    assert await run_json(capsys, "groups", "list", *b) == []


async def test_a_group_that_does_not_exist_is_said_so(capsys: pytest.CaptureFixture[str],
                                                     bootstrap: str, admin: Admin) -> None:
    await admin.create_topics("work", 1)
    b = ("--bootstrap", bootstrap)
    for argv in (["groups", "describe", "ghost"], ["groups", "lag", "ghost"],
                 ["groups", "reset-offsets", "ghost", "--to-earliest", "--topic", "work"],
                 ["groups", "describe", "ghost", "--json"]):
        code, out, err = await run(capsys, *argv, *b)
        assert code == 1 and err.count("\n") == 1, argv
        assert "group 'ghost' does not exist" in err and "Dead" not in out, argv
    assert (await admin.describe_groups("ghost"))[0].state == "Dead"  # nothing was created
    code, _, err = await run(capsys, "groups", "reset-offsets", "ghost", "--to-earliest",
                             "--allow-new-group", *b)
    assert code == 1 and "--topic" in err
    assert await run_json(capsys, "groups", "reset-offsets", "ghost", "--to-earliest",
                          "--topic", "work", "--allow-new-group", "--execute", *b) == {
        "group": "ghost", "executed": True,
        "offsets": [{"topic": "work", "partition": 0, "current": None, "new": 0}]}
    assert await admin.list_consumer_group_offsets("ghost") != {}


async def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await run(capsys, "topics", "list", "--bootstrap", "127.0.0.1:1",
                               "--timeout-ms", "200")
    assert code == 1 and out == "" and err.count("\n") == 1 and "no broker reachable" in err


async def test_consume_without_and_with_a_group(capsys: pytest.CaptureFixture[str],
                                                bootstrap: str) -> None:
    b = ("--bootstrap", bootstrap)
    assert (await run(capsys, "topics", "create", "feed", "--partitions", "2", *b))[0] == 0
    for value in ("a", "b", "c"):
        code, _, _ = await run(capsys, "produce", "--topic", "feed", "--value", value,
                               "--partition", "0", *b)
        assert code == 0
    code, out, _ = await run(capsys, "consume", "--topic", "feed", "--from-beginning",
                             "--max-messages", "3", "--json", *b)
    assert code == 0
    # the in-process broker logs to the same captured stdout: keep the JSON lines
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["partition"], r["offset"], r["value"]) for r in rows] == [
        (0, 0, "a"), (0, 1, "b"), (0, 2, "c")]
    code, out, _ = await run(capsys, "consume", "--topic", "feed", "--group", "cli-readers",
                             "--from-beginning", "--max-messages", "3", "--json", *b)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0 and [r["value"] for r in rows] == ["a", "b", "c"]
    lag = await run_json(capsys, "groups", "lag", "cli-readers", *b)
    # a group member commits what it consumed: partition 0 is read to its end
    by_partition = {row["partition"]: row for row in lag}
    assert (by_partition[0]["committed"], by_partition[0]["end"], by_partition[0]["lag"]) == (
        3, 3, 0)
    for group in ([], ["--group", "g"]):  # with a group too: refused, not waited on
        code, _, err = await run(capsys, "consume", "--topic", "nope", "--max-messages", "1",
                                 *group, *b)
        assert code == 1 and "unknown topic 'nope'" in err and err.count("\n") == 1


async def test_consume_says_what_it_waits_for_on_a_terminal(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        bootstrap: str) -> None:
    """Without --from-beginning only new records come: a person at a terminal is told so,
    rather than left looking at nothing."""
    b = ("--bootstrap", bootstrap)
    await run(capsys, "topics", "create", "quiet", *b)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["consume", "--topic", "quiet",
                                          "--idle-timeout-ms", "100", *b])
    err = capsys.readouterr().err
    assert code == 0 and "waiting for new records on 'quiet'" in err
    assert "--from-beginning" in err
    code = await asyncio.to_thread(main, ["consume", "--topic", "quiet", "--from-beginning",
                                          "--idle-timeout-ms", "100", *b])
    assert code == 0 and "waiting for new records" not in capsys.readouterr().err
