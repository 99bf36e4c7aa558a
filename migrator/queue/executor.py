"""Shard-map aware statement execution for the queue service.

Every queue statement runs through :meth:`ShardExecutor.run`, which resolves
the shard's master with :class:`migrator.fleet.router.ShardRouter` and retries
(tenacity) on the errors a migration causes:

* the shard is **frozen** for a cutover: a write waits (bounded, default 10 s)
  for the flip and re-resolves the master;
* MySQL **1146** (table doesn't exist), **1049** (unknown database) or
  **1317** (query interrupted): the table moved (the cutover's write fence
  ends every writer waiting on it at the flip with 1317, then renames the
  table away, and later stale writers get 1146; nothing of them is written).
  Refresh the map and retry on the new master. A table is never created in
  answer to 1146;
* a lost connection, a deadlock or a lock-wait timeout: retry.

When the bound runs out the caller gets :class:`ShardUnavailable` (retryable).
Connections are pooled per host; statements use qualified ``db.table`` names
so one connection serves every shard on its host. Sessions run in UTC so
``DATETIME(6)`` values map to epoch seconds directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pymysql
from pymysql.constants import CLIENT
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from migrator.errors import MySQLUnavailable, ShardFrozen, ShardMapError
from migrator.fleet.config import Credentials
from migrator.fleet.model import Host
from migrator.fleet.mysql import (
    ER_LOCK_DEADLOCK,
    ER_LOCK_WAIT_TIMEOUT,
    MOVED_CODES,
)
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.queue.errors import ShardUnavailable

R = TypeVar("R")

LOST_CODES = {2003, 2006, 2013, 2014, 2055, 1927}  # 1927: connection killed
RETRY_CODES = {ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT}


class _Retry(Exception):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class ConnectionPool:
    """Idle connections per host (LIFO), opened lazily with the queue's session settings."""

    def __init__(self, credentials: Credentials, *, max_idle: int = 16):
        self.credentials = credentials
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[pymysql.connections.Connection]] = {}

    @staticmethod
    def _key(host: Host) -> tuple[str, str, int]:
        return host.name, host.address, host.port

    def acquire(self, host: Host) -> pymysql.connections.Connection:
        with self._lock:
            idle = self._idle.get(self._key(host))
            if idle:
                return idle.pop()
        return mysql_connect(host, self.credentials, None, autocommit=True, connect_timeout=3,
                             read_timeout=30, write_timeout=30,
                             init_command="SET time_zone = '+00:00'", client_flag=CLIENT.FOUND_ROWS)

    def release(self, host: Host, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(self._key(host), [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        _close(conn)

    def close(self) -> None:
        with self._lock:
            conns = [c for lst in self._idle.values() for c in lst]
            self._idle.clear()
        for c in conns:
            _close(c)


def _close(conn: pymysql.connections.Connection) -> None:
    try:
        conn.close()
    except Exception:  # closing a broken socket
        pass


class ShardExecutor:
    """Run a function against the current master of a shard, following moves."""

    def __init__(self, router: ShardRouter, credentials: Credentials, *, frozen_wait: float = 10.0,
                 retry_for: float | None = None, on_moved: Callable[[int], None] | None = None):
        self.router = router
        self.pool = ConnectionPool(credentials)
        self.frozen_wait = frozen_wait
        self.retry_for = retry_for if retry_for is not None else frozen_wait + 5.0
        self.on_moved = on_moved
        #: counters for tests and metrics
        self.moved_retries = 0
        self.frozen_waits = 0

    def run(self, shard: int, fn: Callable[[pymysql.connections.Connection], R], *, write: bool = True,
            what: str = "queue statement", guard: Callable[[], object] | None = None,
            table: str | None = None) -> R:
        """Run ``fn(conn)`` on the shard's master, retrying as described above.

        ``table``: the table ``fn`` works on, when the shard map may route it on its own (a queue
        partition's jobs table): then its route, not the shard's range, says where and whether frozen.

        ``guard`` is called after a "table moved" error, before waiting: it
        raises if the operation no longer makes sense (the queue was deleted),
        so a caller does not wait out the whole bound for a table that is gone
        for good.
        """
        deadline = time.monotonic() + self.retry_for
        retrying = Retrying(
            stop=stop_after_delay(self.retry_for),
            wait=wait_exponential(multiplier=0.02, max=0.5),
            retry=retry_if_exception_type(_Retry),
            reraise=False,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(shard, fn, write, deadline, guard, table)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            why = last.why if isinstance(last, _Retry) else str(last)
            raise ShardUnavailable(
                f"shard {shard}: {what} failed for {self.retry_for:.0f}s ({why}); the shard may be moving "
                "or its master down: retry later"
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, shard: int, fn: Callable[[pymysql.connections.Connection], R], write: bool,
              deadline: float, guard: Callable[[], object] | None, table: str | None) -> R:
        if write and self.router.is_frozen(shard, table):
            self.frozen_waits += 1
            try:
                self.router.wait_unfrozen(shard, timeout=max(0.0, min(self.frozen_wait, deadline - time.monotonic())),
                                          table=table)
            except ShardFrozen:
                raise ShardUnavailable(
                    f"shard {shard} stayed frozen for {self.frozen_wait:.0f}s (a cutover is running); retry later"
                ) from None
        try:
            host = self.router.master_for(shard, table)
        except ShardMapError as exc:
            raise _Retry(str(exc)) from None
        try:
            conn = self.pool.acquire(host)
        except MySQLUnavailable as exc:
            self._refresh()
            raise _Retry(exc.message) from None
        try:
            result = fn(conn)
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            if code in MOVED_CODES:
                self.pool.release(host, conn) if _usable(conn) else _close(conn)
                self.moved_retries += 1
                epoch = self.router.epoch
                self._refresh(hosts=False)  # the table moved: the map says where; the hosts are watched
                if self.on_moved:
                    self.on_moved(shard)
                if guard is not None:
                    guard()
                if self.router.epoch == epoch:
                    # fenced but not flipped yet: wait (bounded) for the new map
                    self.router.wait_for_epoch((epoch or 0) + 1,
                                               timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                raise _Retry(f"{host.name}: {exc.args[-1]} (table moved; map refreshed)") from None
            if code in RETRY_CODES:
                self.pool.release(host, conn) if _usable(conn) else _close(conn)
                raise _Retry(f"{host.name}: {exc.args[-1]}") from None
            if code in LOST_CODES or isinstance(exc, pymysql.err.InterfaceError) or code is None:
                _close(conn)
                self._refresh()
                raise _Retry(f"{host.name}: connection lost ({exc})") from None
            _close(conn)
            raise
        except BaseException:
            _close(conn)
            raise
        self.pool.release(host, conn)
        return result

    def _refresh(self, *, hosts: bool = True) -> None:
        try:
            self.router.refresh(hosts=hosts)
        except Exception:  # ZooKeeper hiccup: the watch will catch up
            pass

    def close(self) -> None:
        self.pool.close()


def _usable(conn: pymysql.connections.Connection) -> bool:
    try:
        conn.rollback()
        return bool(conn.open)
    except Exception:
        return False
