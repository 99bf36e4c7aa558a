"""The bounded form of a statement that takes a metadata lock (:mod:`migrator.engine.mdl`)."""

from __future__ import annotations

from migrator.engine.mdl import Attempts, LockWait, bounded_sql
from migrator.engine.migration import Options


def test_the_tag_stays_first_and_the_try_is_the_servers_bound():
    assert bounded_sql("/* migrator:cutover */ CREATE TRIGGER a.b BEFORE INSERT ON a.t FOR EACH ROW BEGIN END",
                       0.25) == ("/* migrator:cutover */ SET STATEMENT max_statement_time=0.250 FOR CREATE TRIGGER "
                                 "a.b BEFORE INSERT ON a.t FOR EACH ROW BEGIN END")
    assert bounded_sql("DROP TRIGGER IF EXISTS a.b", 1) == "SET STATEMENT max_statement_time=1.000 FOR DROP TRIGGER " \
                                                          "IF EXISTS a.b"


def test_a_try_is_half_the_freeze_budget_at_most_one_second():
    assert LockWait.of(Options()).try_s == 0.25
    assert LockWait.of(Options(freeze_budget_ms=60_000)).try_s == 1.0
    assert LockWait.of(Options(freeze_budget_ms=10)).try_s == 0.05
    w = LockWait.of(Options(lock_retry_s=7, kill_blockers=True, kill_blockers_max_rows=3))
    assert (w.retry_s, w.kill_holders, w.kill_max_rows) == (7.0, True, 3)
    assert not LockWait.of(Options()).kill_holders


def test_attempts_add_up():
    a, b = Attempts(tries=2, busy=1, longest_try_ms=10), Attempts(tries=3, slow=1, longest_try_ms=30,
                                                                  killed=[{"id": 5}])
    a.add(b)
    assert a.to_dict() == {"tries": 5, "busy": 1, "slow": 1, "longest_try_ms": 30.0, "killed": [{"id": 5}]}


def test_only_a_clients_connection_is_a_client():
    from migrator.engine.mdl import Blocker

    def holder(user: str, command: str) -> Blocker:
        return Blocker("B", 9, user, "", 5, "", "db00002.pins (MDL_SHARED_WRITE)", 0, command)

    assert holder("app", "Sleep").client and holder("app", "Query").client
    for user, command in (("system user", "Slave_SQL"), ("system user", "Slave_worker"), ("system user", "Slave_IO"),
                          ("event_scheduler", "Daemon"), ("system user", "Daemon"), ("repl", "Binlog Dump GTID")):
        assert not holder(user, command).client, (user, command)
