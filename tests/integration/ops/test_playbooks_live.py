"""Playbooks driving real migrations on the sandbox fleet: the shipped ones end to
end (split-host, move-shards with its approval, move-queue-partition under queue
load, rollback), a catch-up gate that holds while the source is written and
releases when it is quiet, and a `migrator run --sync` killed with SIGKILL in
the middle of the copy step, finished by `migrator playbook resume`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import config as config_mod
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from migrator.ops import playbook as pbm
from tests.integration.cli_helpers import run_cli

from .operator_support import count, host_conn, insert_pins, wait_for

PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
SHIPPED = ("split-host", "move-shards", "move-queue-partition", "rollback")
SEED_TABLES = ("pins", "boards", "users", "board_has_pins", "user_has_boards")


def drive(cfg, zk, run_id, *, timeout=240.0, until=("done", "failed")):
    """Advance a run in this process as `migrator run --sync` does; returns the last outcome."""
    deadline = time.monotonic() + timeout
    while True:
        out = pbm.advance(cfg, zk, run_id, poll_s=0.1, wait_budget_s=2)
        if out.status in until or time.monotonic() > deadline:
            return out


def start(zk, name_or_path, **params) -> str:
    path = name_or_path if isinstance(name_or_path, Path) else PLAYBOOKS / f"{name_or_path}.yaml"
    pb = pbm.load(path)
    return pbm.RunStore(zk).create(pb, pbm.bind_params(pb, {k: str(v) for k, v in params.items()}))


def run_state(zk, run_id) -> dict:
    st = pbm.RunStore(zk).get(run_id)[0]
    st.pop("text", None)
    return st


def same_rows(fleet, src: str, dst: str, dbs: tuple[str, ...], tables=SEED_TABLES) -> None:
    for db in dbs:
        for t in tables:
            assert count(fleet, dst, db, t) == count(fleet, src, db, t), (db, t)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_playbook_dry_run(fleet, name):
    sets = {"split-host": ["source=MySQL001A", "target=MySQL003A"],
            "move-shards": ["shards=4-7", "target=MySQL003A"],
            "move-queue-partition": ["queue=emails", "partition=1", "target=MySQL003A"],
            "rollback": ["migration=m-20260101-000000-abcdef"]}[name]
    args = ["run", str(PLAYBOOKS / f"{name}.yaml"), "--dry-run"]
    for s in sets:
        args += ["--set", s]
    res = run_cli(*args, config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    pb = pbm.load(PLAYBOOKS / f"{name}.yaml")
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"playbook {name}: {len(pb.steps)} steps")
    assert [ln.split(":")[0].split(". ")[1] for ln in lines[1:]] == [s.id for s in pb.steps]
    assert not pbm.RunStore(fleet.zk).list()  # a dry run stores nothing
    assert not MigrationStore(fleet.zk).list()
    missing = run_cli("run", str(PLAYBOOKS / f"{name}.yaml"), "--dry-run", config=fleet.config_path)
    assert missing.returncode != 0 and "--set" in missing.stderr and "Traceback" not in missing.stderr


def test_split_host_playbook_end_to_end(fleet):
    zk = fleet.zk
    epoch0 = ShardMapStore(zk).read().epoch
    run_id = start(zk, "split-host", source="MySQL001A", target="MySQL003A", freeze_budget_ms=800)
    out = drive(fleet.config, zk, run_id, until=("waiting", "done", "failed"))
    assert (out.status, out.step) == ("waiting", "approve-cutover")  # the cutover switches traffic: asked first
    run_cli("approve", run_id, "approve-cutover", config=fleet.config_path).check_returncode()
    out = drive(fleet.config, zk, run_id)
    st = run_state(zk, run_id)
    assert out.status == "done", (out, st)
    assert [st["steps"][s]["status"] for s in ("plan", "preflight", "copy", "catchup", "verify",
                                               "approve-cutover", "cutover", "cleanup")] == ["done"] * 8
    assert st["steps"]["cleanup"]["result"]["scheduled"]  # the tombstones are kept for the retention
    mid = st["context"]["migration"]
    mst, _ = MigrationStore(zk).state(mid)
    assert mst.phase == Phase.DONE and mst.freeze_ms > 0
    assert MigrationStore(zk).spec(mid).options.freeze_budget_ms == 800
    smap = ShardMapStore(zk).read()
    assert smap.epoch > epoch0
    assert [smap.master_of(s) for s in range(4)] == ["MySQL001A", "MySQL001A", "MySQL003A", "MySQL003A"]
    same_rows(fleet, "MySQL003A", "MySQL003B", ("db00002", "db00003"))


def test_move_shards_playbook_waits_for_approval(fleet):
    zk = fleet.zk
    run_id = start(zk, "move-shards", shards="6-7", target="MySQL003A")
    out = drive(fleet.config, zk, run_id, until=("waiting", "done", "failed"))
    assert (out.status, out.step) == ("waiting", "approve-cutover")
    st = run_state(zk, run_id)
    mid = st["context"]["migration"]
    assert MigrationStore(zk).state(mid)[0].phase == Phase.CONVERGED
    assert st["steps"]["approve-cutover"]["waiting_on"] == ["approval"]
    # still held: nothing moves without the approval
    assert pbm.advance(fleet.config, zk, run_id, poll_s=0.1, wait_budget_s=0.5).status == "waiting"
    assert ShardMapStore(zk).read().master_of(6) == "MySQL002A"
    insert_pins(fleet, "MySQL002A", "db00006", 7)  # written while waiting: the cutover's catch-up carries it
    res = run_cli("approve", run_id, "approve-cutover", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    out = drive(fleet.config, zk, run_id)
    assert out.status == "done", (out, run_state(zk, run_id))
    smap = ShardMapStore(zk).read()
    assert (smap.master_of(5), smap.master_of(6), smap.master_of(7)) == ("MySQL002A", "MySQL003A", "MySQL003A")
    assert count(fleet, "MySQL003A", "db00006", "pins") == 27


def test_rollback_playbook_after_a_split(fleet):
    zk = fleet.zk
    mid = command.plan_move(fleet.config, "2-3", "MySQL003A").spec.id
    command.run_copy(fleet.config, mid)
    command.catchup(fleet.config, mid)
    command.cutover(fleet.config, mid)
    assert ShardMapStore(zk).read().master_of(2) == "MySQL003A"
    insert_pins(fleet, "MySQL003A", "db00002", 4)  # written on the new master: rollback carries it back
    run_id = start(zk, "rollback", migration=mid)
    out = drive(fleet.config, zk, run_id, until=("waiting", "done", "failed"))
    assert (out.status, out.step) == ("waiting", "approve-rollback")
    run_cli("approve", run_id, "approve-rollback", config=fleet.config_path).check_returncode()
    out = drive(fleet.config, zk, run_id)
    assert out.status == "done", (out, run_state(zk, run_id))
    assert MigrationStore(zk).state(mid)[0].phase == Phase.ROLLED_BACK
    assert ShardMapStore(zk).read().master_of(2) == "MySQL001A"
    assert count(fleet, "MySQL001A", "db00002", "pins") == 24


def test_move_queue_partition_playbook_under_queue_load(fleet, tmp_path):
    from migrator.queue.catalog import QueueCatalog
    from migrator.queue.ledger import check_ledger
    from migrator.queue.load import run_load

    shard = 3  # its other tables hold rows: they stay on MySQL001A, only the partition's route moves
    stop = threading.Event()
    ledger = tmp_path / "ledger.sqlite"
    out_load: dict = {}

    def load() -> None:
        try:
            out_load["result"] = run_load(fleet.config, "op_q", 40, 600, ledger, stop, partitions=8, consumers=2,
                                          lease_seconds=10, drain_seconds=15)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            out_load["error"] = exc

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        wait_for(lambda: fleet.zk.client.exists(fleet.zk.path("queues", "op_q")) or "error" in out_load, 30)
        assert "error" not in out_load, out_load
        rec = QueueCatalog(fleet.zk).get("op_q", fresh=True).partitions_for_shard(shard)[0]
        time.sleep(1.0)  # some jobs in the partition before it moves
        run_id = start(fleet.zk, "move-queue-partition", queue="op_q", partition=rec.index, target="MySQL003A")
        out = drive(fleet.config, fleet.zk, run_id, until=("waiting", "done", "failed"))
        assert (out.status, out.step) == ("waiting", "approve-cutover"), out
        run_cli("approve", run_id, "approve-cutover", config=fleet.config_path).check_returncode()
        out = drive(fleet.config, fleet.zk, run_id)
        assert out.status == "done", (out, run_state(fleet.zk, run_id))
        smap = ShardMapStore(fleet.zk).read()
        assert smap.master_of_table(shard, rec.table) == "MySQL003A" and smap.master_of(shard) == "MySQL001A"
        assert count(fleet, "MySQL001A", f"db0000{shard}", "pins") > 0  # the shard's other tables stayed
        time.sleep(1.0)  # the load goes on against the moved partition
    finally:
        stop.set()
        t.join(60)
    assert "error" not in out_load, out_load
    rep = check_ledger(fleet.config, ledger)
    assert rep.enqueued > 0 and rep.lost == 0 and rep.double_bug == 0, rep


GATED = """name: gated-cutover
params:
  shards: {type: shards, required: true}
  target: {type: host, required: true}
steps:
  - id: plan
    call: plan_move
    with: {shards: "${shards}", target: "${target}"}
  - id: copy
    call: copy
  - id: cutover
    call: cutover
    gate: ["pass_events < 1 for 2 passes", "lag_s < 1 for 2 passes"]
    wait_with: catchup_pass
    timeout: 2m
handlers: []
"""


def test_catch_up_gate_holds_while_written_then_releases(fleet, tmp_path):
    zk = fleet.zk
    path = tmp_path / "gated-cutover.yaml"
    path.write_text(GATED)
    run_id = start(zk, path, shards="2-3", target="MySQL003A")
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            insert_pins(fleet, "MySQL001A", "db00002", 5)
            time.sleep(0.05)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    try:
        for _ in range(3):  # every pass sees the writer's events: the gate holds
            out = pbm.advance(fleet.config, zk, run_id, poll_s=0.1, wait_budget_s=1.0)
            assert (out.status, out.step) == ("waiting", "cutover"), out
        st = run_state(zk, run_id)
        assert "pass_events < 1 for 2 passes" in st["steps"]["cutover"]["waiting_on"]
        mid = st["context"]["migration"]
        passes = command.status(fleet.config, mid)["passes"]
        assert len(passes) >= 3 and all(p["events"] > 0 for p in passes[-2:])
        assert ShardMapStore(zk).read().master_of(2) == "MySQL001A"
    finally:
        stop.set()
        t.join(10)
    out = drive(fleet.config, zk, run_id, timeout=60)  # quiet source: two empty passes, then the cutover
    assert out.status == "done", (out, run_state(zk, run_id))
    assert ShardMapStore(zk).read().master_of(2) == "MySQL003A"
    same_rows(fleet, "MySQL003A", "MySQL003B", ("db00002", "db00003"))
    assert count(fleet, "MySQL003A", "db00002", "pins") >= 20 + 15  # the seed and at least three batches


KILLABLE = """name: held-copy
params:
  shards: {type: shards, required: true}
  target: {type: host, required: true}
steps:
  - id: plan
    call: plan_move
    with: {shards: "${shards}", target: "${target}"}
  - id: preflight
    call: preflight
  - id: go
    call: approval
  - id: copy
    call: copy
    on_failure: [abort]
  - id: catchup
    call: catchup
  - id: cutover
    call: cutover
    gate: ["lag_s < 1 for 2 passes"]
    wait_with: catchup_pass
handlers:
  - id: abort
    call: abort
"""


def test_killed_run_mid_copy_resumes_to_the_end(fleet, tmp_path):
    """`migrator run --sync` is SIGKILLed while its copy step runs (one source table is
    write-locked, so its chunk read waits); `migrator playbook resume` finishes the migration."""
    zk = fleet.zk
    fast = fleet.config.model_copy(deep=True)
    fast.zookeeper.session_timeout = 2.0  # the dead executor's ownership node expires quickly
    fast_path = tmp_path / "fast.toml"
    fast_path.write_text(config_mod.dump(fast))
    path = tmp_path / "held-copy.yaml"
    path.write_text(KILLABLE)
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fast_path), "run", str(path),
                             "--set", "shards=2-3", "--set", "target=MySQL003A", "--sync", "--yes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    locker = host_conn(fleet, "MySQL001A")
    try:
        run_id = wait_for(lambda: (pbm.RunStore(zk).list() or [None])[0])
        wait_for(lambda: run_state(zk, run_id)["steps"].get("go", {}).get("status") == "waiting", timeout=60)
        mid = run_state(zk, run_id)["context"]["migration"]
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES db00003.pins WRITE")  # the copy's read of this table waits
        run_cli("approve", run_id, "go", config=fleet.config_path).check_returncode()

        def mid_copy() -> bool:
            tables = command.status(fleet.config, mid)["copy"]["per_table"]
            done = {f"{t['db']}.{t['table']}" for t in tables if t.get("done")}
            return len(done) >= 5 and "db00003.pins" not in done

        wait_for(mid_copy, timeout=60, every=0.2)
        assert run_state(zk, run_id)["steps"]["copy"]["status"] == "running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with locker.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        locker.close()
    st = run_state(zk, run_id)
    assert st["status"] == "running" and st["steps"]["copy"]["status"] == "running"
    assert MigrationStore(zk).state(mid)[0].phase == Phase.COPYING
    res = run_cli("playbook", "resume", run_id, "--sync", config=fast_path, timeout=180)
    assert res.returncode == 0, (res.stdout, res.stderr)
    st = run_state(zk, run_id)
    assert st["status"] == "done", st
    assert st["steps"]["copy"]["attempts"] == 2  # the interrupted step ran again, from the checkpoints
    assert st["steps"]["go"]["attempts"] == 1 and st["steps"]["preflight"]["attempts"] == 1
    assert MigrationStore(zk).state(mid)[0].phase == Phase.DONE
    assert ShardMapStore(zk).read().master_of(3) == "MySQL003A"
    same_rows(fleet, "MySQL003A", "MySQL003B", ("db00002", "db00003"))
    assert count(fleet, "MySQL003A", "db00003", "pins") == 20


PAUSABLE = """name: pausable
params:
  shards: {type: shards, required: true}
  target: {type: host, required: true}
steps:
  - id: plan
    call: plan_move
    with: {shards: "${shards}", target: "${target}"}
  - id: go
    call: approval
  - id: copy
    call: copy
  - id: catchup
    call: catchup
"""


def test_run_waits_while_the_migration_is_paused(fleet, tmp_path):
    zk = fleet.zk
    path = tmp_path / "pausable.yaml"
    path.write_text(PAUSABLE)
    run_id = start(zk, path, shards="2-3", target="MySQL003A")
    assert pbm.advance(fleet.config, zk, run_id, poll_s=0.1, wait_budget_s=0.3).step == "go"
    mid = run_state(zk, run_id)["context"]["migration"]
    assert run_cli("pause", mid, config=fleet.config_path).returncode == 0
    run_cli("approve", run_id, "go", config=fleet.config_path).check_returncode()
    out = pbm.advance(fleet.config, zk, run_id, poll_s=0.1, wait_budget_s=0.5)
    assert (out.status, out.step, out.message) == ("waiting", "copy", "migration paused")
    st = run_state(zk, run_id)
    assert st["steps"]["copy"]["attempts"] == 0 and "migration paused" in st["steps"]["copy"]["waiting_on"][0]
    assert MigrationStore(zk).state(mid)[0].phase == Phase.PLANNED  # nothing was copied
    assert pbm.advance(fleet.config, zk, run_id, poll_s=0.1, wait_budget_s=0.3).status == "waiting"
    assert run_cli("resume", mid, config=fleet.config_path).returncode == 0  # (also queues the copy on RQ)
    out = drive(fleet.config, zk, run_id)
    assert out.status == "done", (out, run_state(zk, run_id))
    assert run_state(zk, run_id)["steps"]["copy"]["attempts"] == 1
    assert MigrationStore(zk).state(mid)[0].phase == Phase.CONVERGED


def test_interrupted_plan_step_adopts_the_stored_plan(fleet):
    """An executor killed right after the plan was stored (before the run recorded it): the
    resumed run adopts that migration instead of failing on its own shard locks."""
    zk = fleet.zk
    run_id = start(zk, "move-shards", shards="6-7", target="MySQL003A")
    store = pbm.RunStore(zk)
    st, version = store.get(run_id)
    st["steps"]["plan"] = {"status": "running", "attempts": 1, "started": time.time(), "first_seen": time.time()}
    st["status"] = "running"
    store.put(run_id, st, version)
    mid = command.plan_move(fleet.config, "6-7", "MySQL003A").spec.id  # what the dead executor stored
    out = drive(fleet.config, zk, run_id, until=("waiting", "done", "failed"))
    assert (out.status, out.step) == ("waiting", "approve-cutover"), out
    st = run_state(zk, run_id)
    assert st["context"]["migration"] == mid and st["steps"]["plan"]["attempts"] == 2
    assert MigrationStore(zk).list() == [mid]
