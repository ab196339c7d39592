"""The offsets-in-your-database example: consumers killed mid-stream, every record's
effect in the database exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .rawgroup import create_topic, produce

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "db_offsets"
sys.path.insert(0, str(EXAMPLE))

from store import Store  # noqa: E402

PG_URL = os.environ.get("GROUPWIRE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("GROUPWIRE_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
TOPIC = "ledger"
PARTITIONS = 3


def _reachable(url: str) -> str | None:
    """None if the database answers, else why the test must skip."""
    try:
        Store(url).close()
    except ImportError as exc:
        return f"driver not installed: {exc.name}"
    except Exception as exc:  # any connection failure means: no server here
        return f"no database at {url}: {type(exc).__name__}: {exc}"
    return None


def _database(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'example.db'}"
    url = PG_URL if kind == "postgresql" else MYSQL_URL
    why = _reachable(url)
    if why is not None:
        pytest.skip(why)
    return url


async def _until(check: Callable[[], bool], timeout: float = 60) -> None:
    """Wait for database state: no event to wait on, so poll it, bounded."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


async def _consumer(bootstrap: str, db: str, name: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE / "consumer.py"), "--bootstrap", bootstrap,
        "--topic", TOPIC, "--group", "ledger-app", "--db", db, "--name", name,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mariadb"])
async def test_killed_consumers_apply_every_record_exactly_once(
        kind: str, tmp_path: Path, start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    db = _database(kind, tmp_path)
    store = Store(db)
    store.reset()
    broker = await start_broker(group_initial_rebalance_delay_ms=0,
                                connection_loss_grace_ms=300)
    conn = await connect(target=broker)
    await create_topic(conn, TOPIC, PARTITIONS)
    bootstrap = f"127.0.0.1:{broker.port}"
    procs = [await _consumer(bootstrap, db, f"c{i}") for i in range(2)]
    produced = 0
    try:
        for round_ in range(30):
            for p in range(PARTITIONS):
                await produce(conn, TOPIC, p, [f"{round_}-{p}-{i}".encode() for i in range(10)])
                produced += 10
            if round_ == 10:
                await _until(lambda: len(store.results()) > 0)
                procs[0].send_signal(signal.SIGKILL)  # mid-stream
                procs.append(await _consumer(bootstrap, db, "c-replacement"))
            if round_ == 20:
                procs[1].send_signal(signal.SIGKILL)
                procs.append(await _consumer(bootstrap, db, "c-replacement-2"))
        await _until(lambda: len(store.results()) >= produced)
        rows = store.results()
        assert len(rows) == produced
        assert len(set(rows)) == produced  # no record applied twice
        for p in range(PARTITIONS):
            assert store.next_offset(TOPIC, p) == produced // PARTITIONS
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
        store.close()


def test_a_batch_the_database_picks_as_deadlock_victim_is_applied_once(
        tmp_path: Path) -> None:
    """MariaDB once killed a consumer with error 1213 when two wrote at once: the batch's
    transaction is rolled back and run again whole, so it is applied exactly once."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    attempts = 0

    def apply(db: Store) -> None:
        nonlocal attempts
        attempts += 1
        db.add_result("t", 0, 7, "seven")
        db.set_next_offset("t", 0, 8)
        if attempts == 1:
            raise RuntimeError(1213, "Deadlock found when trying to get lock")

    try:
        store.in_transaction(apply)
        assert attempts == 2
        assert store.results() == [("t", 0, 7)]
        assert store.next_offset("t", 0) == 8
        with pytest.raises(ValueError):  # any other failure is not retried
            store.in_transaction(lambda db: (_ for _ in ()).throw(ValueError("bad row")))
    finally:
        store.close()
