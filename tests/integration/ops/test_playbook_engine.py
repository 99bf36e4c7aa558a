"""The playbook engine on real ZooKeeper and Redis: gates hold and release,
approvals, failure handlers, resume after a killed executor, RQ execution.

These use the engine's own steps (sleep, approval, use_migration); playbooks
that drive real migrations are exercised in the engine tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from migrator.fleet import config as config_mod
from migrator.fleet import redis_client
from migrator.ops import playbook as pbm
from tests.integration.cli_helpers import rq_env, run_cli

PB_APPROVAL = """name: gated
params:
  pause: {type: float, default: 0.05}
steps:
  - id: first
    call: sleep
    with: {seconds: "${pause}"}
  - id: ok-to-go
    call: approval
  - id: last
    call: sleep
    with: {seconds: 0.01}
"""

PB_LONG = """name: long
steps:
  - id: one
    call: sleep
    with: {seconds: 0.05}
  - id: two
    call: sleep
    with: {seconds: 4}
  - id: three
    call: sleep
    with: {seconds: 0.05}
"""

PB_FAIL = """name: failing
steps:
  - id: pick
    call: use_migration
    with: {id: m-20260101-000000-abcdef}
  - id: boom
    call: abort
    retries: 1
    on_failure: [cleanup-after]
  - id: never
    call: sleep
    with: {seconds: 0}
handlers:
  - id: cleanup-after
    call: sleep
    with: {seconds: 0}
"""


def short_session_config(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    fast = cfg.model_copy(deep=True)
    fast.zookeeper.session_timeout = 2.0
    p = tmp_path / "fast.toml"
    p.write_text(config_mod.dump(fast))
    return p


def write(tmp_path, name, text):
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def run_state(zk, run_id):
    return pbm.RunStore(zk).get(run_id)[0]


def wait_for(pred, timeout=20.0, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not met in time")


def test_approval_gate_holds_then_releases(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    pb = pbm.load(write(tmp_path, "gated", PB_APPROVAL))
    store = pbm.RunStore(zk)
    run_id = store.create(pb, pbm.bind_params(pb, {}))
    out = pbm.advance(cfg, zk, run_id, poll_s=0.05, wait_budget_s=0.5)
    assert (out.status, out.step) == ("waiting", "ok-to-go")
    st = run_state(zk, run_id)
    assert st["steps"]["first"]["status"] == "done"
    assert st["steps"]["ok-to-go"]["waiting_on"] == ["approval"]
    assert "last" not in st["steps"]
    # still held on a second try
    assert pbm.advance(cfg, zk, run_id, poll_s=0.05, wait_budget_s=0.3).status == "waiting"
    res = run_cli("approve", run_id, "ok-to-go", "--json", config=cfg_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)  # --json: one document on stdout, nothing else
    assert pbm.advance(cfg, zk, run_id, poll_s=0.05, wait_budget_s=0.5).status == "done"
    st = run_state(zk, run_id)
    assert [st["steps"][s]["status"] for s in ("first", "ok-to-go", "last")] == ["done"] * 3
    assert st["steps"]["first"]["attempts"] == 1
    bad = run_cli("approve", run_id, "no-such-step", config=cfg_path)
    assert bad.returncode != 0 and "no step 'no-such-step'" in bad.stderr


def test_failure_runs_retries_then_handler(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    pb = pbm.load(write(tmp_path, "failing", PB_FAIL))
    run_id = pbm.RunStore(zk).create(pb, {})
    out = pbm.advance(cfg, zk, run_id, wait_budget_s=1)
    assert (out.status, out.step) == ("failed", "boom")
    st = run_state(zk, run_id)
    assert st["steps"]["boom"]["attempts"] == 2  # one try + one retry
    assert st["handlers_run"] == ["cleanup-after"] and st["steps"]["cleanup-after"]["status"] == "done"
    assert "never" not in st["steps"]


def test_resume_after_killed_executor(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    fast = short_session_config(zk_root, tmp_path)
    path = write(tmp_path, "long", PB_LONG)
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fast), "run", str(path),
                             "--sync", "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = wait_for(lambda: (pbm.RunStore(zk).list() or [None])[0])
        wait_for(lambda: run_state(zk, run_id)["steps"].get("two", {}).get("status") == "running")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    st = run_state(zk, run_id)
    assert st["status"] == "running" and st["steps"]["one"]["status"] == "done"
    res = run_cli("playbook", "resume", run_id, "--sync", "--json", config=fast, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)  # --json: one document on stdout, nothing else
    st = run_state(zk, run_id)
    assert st["status"] == "done"
    assert st["steps"]["one"]["attempts"] == 1  # finished steps are not redone
    assert st["steps"]["two"]["attempts"] == 2  # the interrupted step ran again
    assert st["steps"]["three"]["status"] == "done"


def test_playbook_runs_on_an_rq_worker(zk_root, tmp_path):
    from rq import Queue

    cfg, cfg_path, creds, zk = zk_root
    r = redis_client.connect(cfg)
    r.flushdb()
    path = write(tmp_path, "short", PB_LONG.replace("seconds: 4", "seconds: 0.1"))
    # without --yes a dry run: nothing is created
    res = run_cli("run", str(path), config=cfg_path)
    assert res.returncode == 0 and "nothing started" in res.stderr and pbm.RunStore(zk).list() == [], res
    res = run_cli("run", str(path), "--yes", config=cfg_path)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.split()[2]
    assert len(Queue("migrator", connection=r)) == 1
    worker = subprocess.run([os.path.join(os.path.dirname(sys.executable), "rq"), "worker", "--burst",
                             "--worker-class", "migrator.ops.worker.Worker", "migrator"],
                            capture_output=True, text=True, timeout=120, env=rq_env(cfg),
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert worker.returncode == 0, worker.stderr
    assert run_state(zk, run_id)["status"] == "done"
    status = run_cli("playbook", "status", run_id, config=cfg_path)
    assert "done" in status.stdout and "three" in status.stdout
    status = run_cli("playbook", "status", run_id, "--json", config=cfg_path)
    assert json.loads(status.stdout)["status"] == "done", status.stdout  # one document, nothing else
    r.flushdb()


def test_bad_playbook_rejected_before_anything_runs(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    bad = write(tmp_path, "bad", "name: bad\nsteps:\n  - id: a\n    call: sleep\n    with: {seconds: 0}\n"
                                 "  - id: b\n    call: warp_drive\n")
    res = run_cli("run", str(bad), config=cfg_path)
    assert res.returncode == 2 and "bad.yaml:7" in res.stderr and "warp_drive" in res.stderr
    assert pbm.RunStore(zk).list() == []
    res = run_cli("run", "playbooks/split-host.yaml", "--set", "source=MySQL001A", "--set", "bogus=1",
                  config=cfg_path)
    assert res.returncode == 2 and "no param 'bogus'" in res.stderr


PB_SLOW = """name: slow
steps:
  - id: stuck
    call: sleep
    with: {seconds: 5}
    timeout: 1s
    retries: 3
    on_failure: [after]
handlers:
  - id: after
    call: sleep
    with: {seconds: 0}
"""


def test_step_running_past_its_timeout_fails_without_retry(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    pb = pbm.load(write(tmp_path, "slow", PB_SLOW))
    run_id = pbm.RunStore(zk).create(pb, {})
    t0 = time.monotonic()
    out = pbm.advance(cfg, zk, run_id, wait_budget_s=1)
    assert time.monotonic() - t0 < 4
    assert (out.status, out.step) == ("failed", "stuck")
    st = run_state(zk, run_id)
    assert "timeout" in st["error"] and st["steps"]["stuck"]["attempts"] == 1  # no retry on top of it
    assert st["handlers_run"] == ["after"]
