"""Each refusal of a cutover names its real cause and the way out, checked against the cause itself.

- blocked by a lock: a client holds an open transaction on a moving table; the freeze runs out while the
  fence waits for that lock, and the refusal (and the attempt in the record) names the connection: id,
  user, host, how long, what it runs, and says to wait for it or end it, never to raise the budget;
- over budget with a slow drain: the freeze runs out while it drains to the sentinel; the refusal says
  to let catch-up converge (or raise the budget);
- the target's standby lags: named with the standby and its master;
- lag inside the source pair: ``test_passive_fence.py::test_a_lagging_link_inside_the_source_pair_refuses_
  the_cutover_and_loses_nothing`` checks both of its refusals ("lag inside the source pair").

Every refusal leaves the source serving and the migration converged; the pipeline's retry window is in
``test_cutover_retry_window_names_the_blocker`` below.
"""

from __future__ import annotations

import time

import pytest

from migrator.engine.cutover import cutover
from migrator.engine.cutover.blockers import read_blockers
from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import Options, Phase
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import prepare_converged

MOVING = (2, 3)


class OpenTransaction:
    """A client's open transaction on a moving table: an UPDATE, uncommitted (as the issue's client held)."""

    def __init__(self, host, creds, sql: str = "UPDATE db00002.pins SET data = data WHERE local_id = 1"):
        self.conn = mysql_connect(host, creds)
        with self.conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            self.id = int(cur.fetchone()[0])
            cur.execute("BEGIN")
            cur.execute(sql)

    def end(self) -> None:
        self.conn.rollback()
        self.conn.close()


def _last_attempt(prep) -> dict:
    node, _ = prep.store.get_progress(prep.spec.id, "cutover_attempts")
    return node["attempts"][-1]


def _serving(fleet, prep) -> None:
    smap = ShardMapStore(fleet.zk).read()
    assert all(smap.master_of(s) == prep.spec.source_master and not smap.is_frozen(s) for s in prep.spec.shards)
    assert prep.store.state(prep.spec.id)[0].phase == Phase.CONVERGED


def test_the_cli_exits_3_for_a_cutover_a_lock_blocks(fleet):
    """Exit 3 (refused: end the blocker, then run it again) through ``migrator cutover``, one line naming the
    connection; the source keeps serving."""
    from migrator.errors import ExitCode
    from tests.integration.cli_helpers import assert_one_line_error, run_cli

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=500, cutover_retry_s=0))
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    client = OpenTransaction(prep.source, fleet.credentials)
    try:
        res = run_cli("cutover", prep.spec.id, "--yes", config=fleet.config_path)
    finally:
        client.end()
    assert_one_line_error(res, f"connection {client.id}")
    assert res.returncode == ExitCode.REFUSED, (res.returncode, res.stderr)
    _serving(fleet, prep)


def test_the_cli_exits_3_for_a_freeze_over_its_budget(fleet):
    """Exit 3 through ``migrator cutover`` when the freeze cannot keep its budget (1 ms: no freeze can), one
    line naming the budget; the source keeps serving."""
    from migrator.errors import ExitCode
    from tests.integration.cli_helpers import assert_one_line_error, run_cli

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=1, cutover_retry_s=0))
    res = run_cli("cutover", prep.spec.id, "--yes", config=fleet.config_path)
    assert_one_line_error(res, "budget")
    assert res.returncode == ExitCode.REFUSED, (res.returncode, res.stderr)
    _serving(fleet, prep)


def test_the_cli_exits_3_for_a_concurrent_change_of_the_shard_map(fleet):
    """Exit 3 through ``migrator cutover`` when an operator changes the moving ranges in the shard map while
    they are frozen (here: unfreezes them by hand). A client's open transaction holds the fence, so the edit
    lands inside the freeze, then the client ends; the flip is refused, one line says the map changed during
    the freeze, and the source keeps serving."""
    import threading

    from migrator.errors import ExitCode
    from tests.integration.cli_helpers import assert_one_line_error, run_cli

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20_000, cutover_retry_s=0))
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    maps = ShardMapStore(fleet.zk)
    client = OpenTransaction(prep.source, fleet.credentials)
    out: list = []
    cli = threading.Thread(target=lambda: out.append(run_cli("cutover", prep.spec.id, "--yes",
                                                             config=fleet.config_path, timeout=120)))
    cli.start()
    try:
        deadline = time.monotonic() + 60
        while not all(maps.read().is_frozen(s) for s in MOVING):
            assert cli.is_alive() and time.monotonic() < deadline, out and out[0].stderr
            time.sleep(0.02)
        cur = maps.read()  # the operator's edit, a real compare-and-set by another ZooKeeper client
        new = cur
        for lo, hi in cur.frozen:
            if any(lo <= s <= hi for s in MOVING):
                new = new.without_frozen(lo, hi)
        maps.cas(new, cur.epoch, reason="a concurrent operator edit")
    finally:
        client.end()
        cli.join(150)
    res = out[0]
    assert_one_line_error(res, "the shard map changed during the freeze")
    assert res.returncode == ExitCode.REFUSED, (res.returncode, res.stderr)
    _serving(fleet, prep)


def test_a_lock_held_on_a_moving_table_is_named_with_its_connection(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=500))
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    client = OpenTransaction(prep.source, fleet.credentials)
    try:
        time.sleep(1.1)  # open for a while, as the client was
        with pytest.raises((FreezeBudgetExceeded, CutoverAborted)) as info:
            cutover(fleet.config, prep.spec.id)
    finally:
        client.end()
    msg = str(info.value)
    assert "while the fence waited for the moving tables' locks" in msg, msg
    user = fleet.credentials.mysql_user
    assert f"connection {client.id} ({user}@" in msg and "db00002.pins" in msg, msg
    assert f"KILL {client.id}" in msg and "on " + prep.spec.source_master in msg, msg
    assert "raise freeze_budget_ms" not in msg and "converge" not in msg, msg
    attempt = _last_attempt(prep)
    [b] = [b for b in attempt["blockers"] if b["id"] == client.id]
    assert b["user"] == user and b["host"] and b["seconds"] >= 1 and b["server"] == prep.spec.source_master
    assert "db00002.pins" in b["holds"] and b["statement"] == "", b  # idle in its transaction
    assert "idle in a transaction" in msg, msg
    assert attempt["outcome"].startswith("aborted: the freeze overran")
    assert f"connection {client.id}" in (prep.store.state(prep.spec.id)[0].error or "")
    _serving(fleet, prep)
    # the blocker gone, the same cutover goes through
    cutover(fleet.config, prep.spec.id)
    assert ShardMapStore(fleet.zk).read().master_of(2) == prep.spec.target_master


def test_the_blocker_reader_without_the_metadata_lock_plugin(fleet):
    """Without ``metadata_lock_info`` the server cannot say which tables a transaction holds: the open
    transactions are named, as such."""
    host = fleet.hosts["MySQL001A"]
    client = OpenTransaction(host, fleet.credentials)
    try:
        time.sleep(1.1)
        with mysql_connect(host, fleet.credentials) as conn:
            precise = read_blockers(conn, [("db00002", "pins")], server="MySQL001A")
            other_table = read_blockers(conn, [("db00003", "pins")], server="MySQL001A")
            fallback = read_blockers(conn, [("db00002", "pins")], server="MySQL001A", use_plugin=False)
    finally:
        client.end()
    assert [b.id for b in precise] == [client.id] and "db00002.pins" in precise[0].holds
    assert client.id not in [b.id for b in other_table]
    [b] = [b for b in fallback if b.id == client.id]
    assert "open transaction" in b.holds and b.seconds >= 1 and "metadata_lock_info" in b.holds
    assert "idle in a transaction" in b.describe() or "UPDATE" in b.describe()


class SlowDrainUnderFence:
    """The cutover's drainer, slowed only for the drain under the fence (after ``fenced`` is set); every
    other verb of :class:`~migrator.engine.verify.drainers.Drainer` is the inner drainer's."""

    def __init__(self, inner, delay_s: float):
        self.inner, self.delay_s, self.fenced = inner, delay_s, False

    def drain_to(self, gtid, timeout, *, save=True):
        if self.fenced:
            time.sleep(self.delay_s)
        return self.inner.drain_to(gtid, timeout, save=save)

    def progress(self):
        return self.inner.progress()

    def open(self):
        self.inner.open()
        return self

    def warm(self):
        self.inner.warm()

    def follow(self):
        return self.inner.follow()

    @property
    def following(self):
        return self.inner.following

    def reached(self, target):
        return self.inner.reached(target)

    def stop_following(self):
        self.inner.stop_following()

    @property
    def position(self):
        return self.inner.position

    def collect(self, keys):
        return self.inner.collect(keys)

    def collected(self):
        return self.inner.collected()

    def close(self):
        self.inner.close()


def test_a_slow_drain_says_to_let_catch_up_converge(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=500))
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    slow = SlowDrainUnderFence(prep.drainer, 1.5)

    def fenced(_run):
        slow.fenced = True

    with pytest.raises(FreezeBudgetExceeded) as info:
        cutover(fleet.config, prep.spec.id, drainer=slow, hooks=CutoverHooks(after_fence=fenced))
    msg = str(info.value)
    assert "in its drain step" in msg and "let catch-up converge further" in msg, msg
    assert "connection " not in msg and "KILL" not in msg, msg
    assert _last_attempt(prep).get("blockers") in (None, []), _last_attempt(prep)
    _serving(fleet, prep)


def test_a_lagging_target_standby_is_named(fleet, monkeypatch):
    from migrator.engine.cutover.run import CutoverRun

    prep = prepare_converged(fleet, (5,))
    spec = prep.spec
    sb = fleet.sandbox
    wait = CutoverRun.check_target_passive
    monkeypatch.setattr(CutoverRun, "check_target_passive", lambda self, timeout=30.0: wait(self, timeout=2.0))
    sb.set_link_delay(spec.target_passive, 3600)
    try:
        with mysql_connect(prep.target, fleet.credentials) as t, t.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS lag_probe")  # a write of the target master it lags behind
        with pytest.raises(CutoverAborted) as info:
            cutover(fleet.config, spec.id)
    finally:
        sb.set_link_delay(spec.target_passive, 0)
        with mysql_connect(prep.target, fleet.credentials) as t, t.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS lag_probe")
    msg = str(info.value)
    assert f"the target's standby {spec.target_passive} has not applied {spec.target_master}'s writes" in msg, msg
    assert "it lags" in msg and "repair the target pair's replication" in msg, msg
    _serving(fleet, prep)


def test_cutover_retry_window_names_the_blocker(fleet):
    """The pipeline keeps trying a cutover a lock keeps refusing, with backoff, for the window the operator
    set; then it stops with the last refusal, which names the blocking connection."""
    from jobs import pipeline

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=500, cutover_retry_s=120))
    mid, cfg = prep.spec.id, str(fleet.config_path)
    prep.store.set_phase(mid, Phase.CONVERGED, predicted_freeze_ms=10.0)
    client = OpenTransaction(prep.source, fleet.credentials)
    try:
        out = pipeline.finish(mid, cfg)
        assert out["retry_in_s"] == pipeline.BACKOFF.first_s and "trying again in" in out["next"], out
        assert f"connection {client.id}" in out["error"], out["error"]
        out = pipeline.finish(mid, cfg, attempt=3, since=time.time() - 10)  # backs off: 2, 4, 8, 16 s
        assert out["retry_in_s"] == 16, out
        with pytest.raises(pipeline.CutoverRetriesOver) as info:
            pipeline.finish(mid, cfg, attempt=4, since=time.time() - 100)  # 100 s + 32 s is past the 120 s window
    finally:
        client.end()
    msg = str(info.value)
    assert f"connection {client.id}" in msg and "tried the cutover 5 times" in msg, msg
    assert f"migrator set {mid} --cutover-retry-s" in msg, msg
    _serving(fleet, prep)
    out = pipeline.finish(mid, cfg)  # the blocker gone: the next attempt cuts over
    assert out.get("cutover") and ShardMapStore(fleet.zk).read().master_of(2) == prep.spec.target_master, out
