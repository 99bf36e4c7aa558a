"""`migrator status` on a live split run by a real `migrator worker` process:
phase, per-shard copy progress, copy rate and ETA, the catch-up pass table, the
freeze, and the workers with their current jobs; also `copy --sync` progress."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import pymysql

from migrator.ops import command, steps
from tests.integration.cli_helpers import run_cli

from .operator_support import finished_jobs, host_conn, planned, stop_process, wait_for


def writer(fleet, stop: threading.Event, counts: dict) -> None:
    """Insert pins into a moving shard on the source until the cutover renames the table away."""
    conn = host_conn(fleet, "MySQL001A")
    try:
        while not stop.is_set():
            try:
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"w\": 1}')")
                counts["ok"] = counts.get("ok", 0) + 1
            except pymysql.MySQLError:
                counts["stopped"] = True  # moved (1146) or fenced: the source no longer takes them
                return
            time.sleep(0.01)
    finally:
        conn.close()


def test_status_of_a_live_split_with_workers(fleet):
    name = f"op-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "MIGRATOR_ACTOR": f"{name}@test"}
    worker = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "worker",
                               "--name", name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    stop = threading.Event()
    counts: dict = {}
    t = threading.Thread(target=writer, args=(fleet, stop, counts), daemon=True)
    t.start()
    try:
        wait_for(lambda: name in run_cli("status", config=fleet.config_path).stdout, timeout=30, every=0.5)
        # the operator's foreground command: plans, hands over to the workers, follows live to the end
        split = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "split",
                                  "MySQL001A", "--to", "MySQL003A", "--yes"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "160"})
        mid = wait_for(lambda: (command.status(fleet.config)["migrations"] or [{}])[0].get("id"), timeout=30)

        def busy_seen() -> bool:
            out = json.loads(run_cli("status", "--json", config=fleet.config_path).stdout)
            w = next(w for w in out["workers"] if w["name"] == name)
            return w["state"] == "busy" and w["migration"] == mid and bool(w["job_description"])

        seen_busy = False
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            out = json.loads(run_cli("status", mid, "--json", config=fleet.config_path).stdout)
            if not seen_busy and out["phase"] not in ("done", "failed"):
                seen_busy = busy_seen()
            if out["phase"] in ("done", "failed", "aborted"):
                break
            time.sleep(0.3)
        assert out["phase"] == "done", (out["phase"], out["error"])
        split_out, split_err = split.communicate(timeout=30)
        assert split.returncode == 0, split_err
        assert f"{mid} done: write freeze" in split_out and "catch-up passes" in split_out
        stop.set()
        t.join(5)

        c = out["copy"]
        assert [s["db"] for s in c["per_shard"]] == ["db00002", "db00003"]
        assert all(s["done"] == s["tables"] >= 5 and s["rows"] > 0 for s in c["per_shard"])
        assert sum(s["rows"] for s in c["per_shard"]) == c["rows"]
        assert c["rows_per_s"] > 0 and c["eta_s"] == 0
        assert out["passes"] and sum(p["events"] for p in out["passes"]) > 0  # the writer's rows were caught up
        assert {"number", "events", "duration_s", "lag_s", "apply_rate"} <= set(out["passes"][0])
        assert out["predicted_freeze_ms"] is not None and out["freeze_ms"] > 0
        me = next(w for w in out["workers"] if w["name"] == name)
        assert me["state"] in ("idle", "busy") and me["queues"] == steps.worker_queues(fleet.hosts, None)

        text = run_cli("status", mid, config=fleet.config_path, env={"COLUMNS": "160"}).stdout
        for needle in ("phase done", "copy per shard", "db00003", "catch-up passes", "last write freeze",
                       "copy rate", name):
            assert needle in text, (needle, text)
        watched = run_cli("status", mid, "--watch", "--timeout", "10", config=fleet.config_path,
                          env={"COLUMNS": "160"}, timeout=30)
        assert watched.returncode == 0 and "catch-up passes" in watched.stdout
        listing = run_cli("status", config=fleet.config_path, env={"COLUMNS": "200"}).stdout
        assert mid[:12] in listing and name in listing
        assert counts.get("ok", 0) > 0
        assert seen_busy  # a worker was seen running one of this migration's jobs

        # rq-dashboard shows what each job is: a description naming the migration, and meta
        jobs = finished_jobs(fleet)
        step_names = {(j.meta or {}).get("step") for j in jobs}
        assert {"copy-start", "copy", "catch-up", "finish"} <= step_names, step_names
        for j in jobs:
            if j.func_name == "jobs.catch_up.run_passes" and not (j.meta or {}).get("step"):
                continue  # follow-up catch-up passes: their enqueue in jobs.catch_up sets no description yet
            assert mid in j.description and j.meta["migration"] == mid, (j.func_name, j.description, j.meta)
        assert all("password" not in json.dumps(j.meta, default=str).lower() for j in jobs)
    finally:
        stop.set()
        stop_process(worker)


def test_copy_sync_shows_progress_and_finishes(fleet):
    mid = planned(fleet)
    res = run_cli("copy", mid, "--sync", config=fleet.config_path, env={"COLUMNS": "120"})
    assert res.returncode == 0, res.stderr
    assert re.search(r"copy \d+/\d+ tables", res.stdout), res.stdout
    assert "copied" in res.stdout and "phase catching_up" in res.stdout
    st = command.status(fleet.config, mid)
    assert st["copy"]["done"] == st["copy"]["tables"]
