"""The application's database: results and each partition's next offset, in one place.

One small adapter over DB-API drivers: SQLite (stdlib, the default), PostgreSQL
(psycopg) and MariaDB/MySQL (PyMySQL), chosen by the URL's scheme.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS consumed_offsets (
        topic VARCHAR(255) NOT NULL, part INTEGER NOT NULL, next_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, part))""",
    # no unique key on purpose: a record applied twice would show up as two rows
    """CREATE TABLE IF NOT EXISTS results (
        topic VARCHAR(255) NOT NULL, part INTEGER NOT NULL, record_offset BIGINT NOT NULL,
        value_text VARCHAR(255) NOT NULL)""",
)


RETRIES = 5
"""Attempts at one batch's transaction when the database asks for a retry."""


def _retryable(exc: Exception) -> bool:
    """A deadlock or serialization failure: MySQL/MariaDB error 1213 or 1205, SQLSTATE
    40001/40P01 (PostgreSQL), or SQLite's "database is locked"."""
    code = getattr(exc, "args", (None,))[0] if exc.args else None
    sqlstate = getattr(exc, "sqlstate", None)
    return (code in (1205, 1213) or sqlstate in ("40001", "40P01")
            or "database is locked" in str(exc))


class Store:
    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.kind = parsed.scheme or "sqlite"
        self.conn: Any
        if self.kind == "sqlite":
            # sqlite:///relative.db or sqlite:////absolute/path.db, as SQLAlchemy reads them
            path = parsed.path[1:] if parsed.path.startswith("/") else (parsed.path or url)
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.mark = "?"
        elif self.kind in ("postgresql", "postgres"):
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)
            self.mark = "%s"
        elif self.kind in ("mysql", "mariadb"):
            import pymysql  # type: ignore[import-untyped]

            self.conn = pymysql.connect(
                host=parsed.hostname or "127.0.0.1", port=parsed.port or 3306,
                user=parsed.username or "root", password=parsed.password or "",
                database=parsed.path.lstrip("/") or "test", autocommit=True)
            self.mark = "%s"
        else:
            raise ValueError(f"unsupported database URL {url!r}")
        for statement in SCHEMA:
            self._run(statement)

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        try:
            cur.execute(sql.replace("?", self.mark), params)
            return list(cur.fetchall()) if cur.description else []
        finally:
            cur.close()

    def next_offset(self, topic: str, partition: int) -> int | None:
        rows = self._run("SELECT next_offset FROM consumed_offsets WHERE topic = ? AND part = ?",
                         (topic, partition))
        return int(rows[0][0]) if rows else None

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        self._run("BEGIN")
        try:
            yield self
        except BaseException:
            self._run("ROLLBACK")
            raise
        self._run("COMMIT")

    def in_transaction(self, work: Callable[[Store], None]) -> None:
        """Run ``work`` in one transaction; run it again, whole, if the database chose it
        as a deadlock victim or could not serialize it. InnoDB does that to one of two
        consumers writing neighbouring rows at once; the rollback undid everything, so
        retrying applies the batch once."""
        for attempt in range(1, RETRIES + 1):
            try:
                with self.transaction():
                    work(self)
                return
            except Exception as exc:
                if attempt == RETRIES or not _retryable(exc):
                    raise

    def add_result(self, topic: str, partition: int, offset: int, value: str) -> None:
        self._run("INSERT INTO results (topic, part, record_offset, value_text) "
                  "VALUES (?, ?, ?, ?)", (topic, partition, offset, value))

    def set_next_offset(self, topic: str, partition: int, offset: int) -> None:
        """Inside a transaction: insert or update the partition's row."""
        if self.kind in ("mysql", "mariadb"):
            upsert = " ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset)"
        else:  # PostgreSQL and SQLite (3.24+)
            upsert = " ON CONFLICT (topic, part) DO UPDATE SET next_offset = excluded.next_offset"
        self._run("INSERT INTO consumed_offsets (topic, part, next_offset) VALUES (?, ?, ?)"
                  + upsert, (topic, partition, offset))

    def results(self) -> list[tuple[str, int, int]]:
        return [(str(t), int(p), int(o)) for t, p, o in
                self._run("SELECT topic, part, record_offset FROM results")]

    def reset(self) -> None:
        self._run("DELETE FROM results")
        self._run("DELETE FROM consumed_offsets")

    def close(self) -> None:
        self.conn.close()
