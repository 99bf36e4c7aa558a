"""kill -9 every copy worker mid-copy, lose Redis, resume from ZooKeeper alone.

Real ``rq worker`` processes (forking: each job runs in a work horse) copy a
split while a writer keeps writing; when part of the rows are copied, the
workers and their horses are killed with SIGKILL and Redis is flushed. A new
worker resumes from the record (``command.resume``) and the copy finishes from
the chunk checkpoints: finished tables are not copied again, partly copied
tables continue after their ``last_key``, and every untouched row is on the
target.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from migrator.engine.copy import table_progress
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.fleet import redis_client
from migrator.ops import command, steps
from tests.conftest import SEED
from tests.integration.cli_helpers import rq_env
from tests.integration.engine.support import Writer, missing_or_different, snapshot_dbs

RQ = str(Path(sys.executable).with_name("rq"))


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _worker(config, log: Path, *, burst: bool) -> subprocess.Popen:
    """A plain ``rq worker`` on the source pair's queue (every test here splits MySQL001A)."""
    args = [RQ, "worker", "--name", f"w{os.getpid()}-{time.monotonic_ns()}"]
    if burst:
        args.append("--burst")
    return subprocess.Popen([*args, steps.pair_queue("MySQL001A")], stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=str(Path(__file__).resolve().parents[3]),
                            env=rq_env(config))


def _kill9(proc: subprocess.Popen) -> None:
    for child in _children(proc.pid):  # the work horses (own process group)
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.kill()
    proc.wait(10)


@pytest.mark.parametrize("fleet", [3000], indirect=True)
def test_kill9_all_workers_mid_copy_then_resume_from_zookeeper(fleet, conns, tmp_path):
    opts = Options(chunk_rows=40, chunk_max_rows=60, chunk_target_ms=10, copy_workers=2)
    spec = command.plan_split(fleet.config, "MySQL001A", options=opts).spec
    src = conns("MySQL001A")
    before = snapshot_dbs(src, spec.databases)
    total = sum(len(rows) for rows in before.values())
    log = tmp_path / "rq.log"
    writer = Writer(fleet.hosts["MySQL001A"], fleet.credentials, list(spec.shards), SEED).start()
    workers = []
    try:
        command.start_copy(fleet.config, spec.id, slice_s=1.0)
        workers = [_worker(fleet.config, log, burst=False) for _ in range(2)]
        deadline = time.monotonic() + 120
        copied = 0
        def mid_copy(p: dict) -> bool:
            # well inside a table: many chunks behind it and many still to go when the kill lands
            left = int(p.get("est_rows") or 0) - int(p.get("rows") or 0)
            return bool(p.get("last_key")) and not p.get("done") and left > 10 * opts.chunk_max_rows

        while time.monotonic() < deadline:
            progress = table_progress(fleet.zk, spec.id)
            copied = sum(p.get("rows", 0) for p in progress)
            if copied >= 0.25 * total and any(mid_copy(p) for p in progress):
                break
            time.sleep(0.02)
        for w in workers:
            _kill9(w)
        at_kill = {(p["db"], p["table"]): p for p in table_progress(fleet.zk, spec.id)}
        assert copied >= 0.25 * total, f"copy did not get going: {copied}/{total}; log:\n{log.read_text()[-3000:]}"
        assert not all(p["done"] for p in at_kill.values()), "the copy finished before the kill: make it slower"
        partial = [k for k, p in at_kill.items() if p["last_key"] and not p["done"]]
        st, _ = MigrationStore(fleet.zk).state(spec.id)
        assert st.phase == Phase.COPYING

        # Redis is lost with the dead workers' jobs: resume from the ZooKeeper record only
        redis_client.connect(fleet.config).flushdb()
        out = command.resume(fleet.config, spec.id)
        assert out["job"]
        resumed = _worker(fleet.config, log, burst=True)
        workers = [resumed]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            st, _ = MigrationStore(fleet.zk).state(spec.id)
            if st.phase != Phase.COPYING:
                break
            time.sleep(0.1)
        assert st.phase == Phase.CATCHING_UP, f"{st}; log:\n{log.read_text()[-3000:]}"
    finally:
        writer.stop()
        for w in workers:
            if w.poll() is None:
                _kill9(w)

    final = {(p["db"], p["table"]): p for p in table_progress(fleet.zk, spec.id)}
    assert all(p["done"] for p in final.values())
    for k, p in at_kill.items():
        if p["done"]:  # finished before the kill: not copied again
            assert final[k]["rows"] == p["rows"] and final[k]["chunks"] == p["chunks"], k
            assert final[k]["start_gtid"] == p["start_gtid"]
        elif p["start_gtid"]:
            assert final[k]["start_gtid"] == p["start_gtid"], k  # the first position is kept
    # partly copied tables went on from their checkpoint: at most one chunk per table
    # (the one in flight at the kill) is copied twice, never the whole prefix
    copied_rows = sum(p["rows"] for p in final.values())
    at_kill_rows = sum(p["rows"] for p in at_kill.values())
    print(f"rows: before {total}, at kill {at_kill_rows}, copied in all {copied_rows}, "
          f"writer inserted {writer.inserted}")
    assert copied_rows <= total + writer.inserted + opts.chunk_max_rows * len(partial), (copied_rows, total)
    assert partial, "no table was mid-copy at the kill"
    problems = missing_or_different(before, conns("MySQL003A"), writer.touched)
    assert not problems, problems[:5]


@pytest.mark.parametrize("fleet", [3000], indirect=True)
def test_kill9_one_worker_and_resume_while_the_other_still_copies(fleet, conns, tmp_path):
    """Resuming while a live worker still copies enqueues duplicates of its
    tables: the compare-and-set on the progress node lets one of them advance
    each table, and the result is the same."""
    opts = Options(chunk_rows=40, chunk_max_rows=60, chunk_target_ms=10)
    spec = command.plan_split(fleet.config, "MySQL001A", options=opts).spec
    before = snapshot_dbs(conns("MySQL001A"), spec.databases)
    total = sum(len(rows) for rows in before.values())
    log = tmp_path / "rq.log"
    writer = Writer(fleet.hosts["MySQL001A"], fleet.credentials, list(spec.shards), SEED + 1).start()
    workers = []
    try:
        command.start_copy(fleet.config, spec.id, slice_s=1.0)
        workers = [_worker(fleet.config, log, burst=False) for _ in range(2)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum(p.get("rows", 0) for p in table_progress(fleet.zk, spec.id)) >= 0.3 * total:
                break
            time.sleep(0.02)
        _kill9(workers[0])
        assert not all(p["done"] for p in table_progress(fleet.zk, spec.id))
        assert command.resume(fleet.config, spec.id)["job"]  # Redis kept: the live worker's jobs are duplicated
        workers.append(_worker(fleet.config, log, burst=False))  # the replacement runs duplicates concurrently
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and MigrationStore(fleet.zk).state(spec.id)[0].phase == Phase.COPYING:
            time.sleep(0.1)
        assert MigrationStore(fleet.zk).state(spec.id)[0].phase == Phase.CATCHING_UP, log.read_text()[-3000:]
    finally:
        writer.stop()
        for w in workers:
            if w.poll() is None:
                _kill9(w)
    final = table_progress(fleet.zk, spec.id)
    copied_rows = sum(p["rows"] for p in final)
    assert copied_rows <= total + writer.inserted + opts.chunk_max_rows * len(final), (copied_rows, total)
    problems = missing_or_different(before, conns("MySQL003A"), writer.touched)
    assert not problems, problems[:5]
