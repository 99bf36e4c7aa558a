"""The queue CLI as an operator runs it (subprocesses against the real fleet)."""

from __future__ import annotations

import json

from tests.integration.cli_helpers import assert_one_line_error, run_cli


def test_queue_cli_admin_load_and_ledger(fleet, tmp_path):
    cfg = fleet.config_path
    res = run_cli("queue", "create", "cliq", "--partitions", "2", config=cfg)
    assert res.returncode == 0, res.stderr
    assert "cliq partition 1: shard" in res.stdout
    assert_one_line_error(run_cli("queue", "create", "cliq", config=cfg), "already exists")
    res = run_cli("queue", "enqueue", "cliq", "a", "b", "--idempotency-key", "op-7", config=cfg)
    assert res.returncode == 0 and len(res.stdout.split()) == 2, res.stderr
    # the same command run again with the same idempotency key enqueues nothing twice
    again = run_cli("queue", "enqueue", "cliq", "a", "b", "--idempotency-key", "op-7", "--json", config=cfg)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["jobs"] == [{"id": int(i), "deduplicated": True} for i in res.stdout.split()]

    ledger = tmp_path / "l.db"
    res = run_cli("queue", "load", "--queue", "cliload", "--rate", "100", "--duration", "1", "--ledger", str(ledger),
                  config=cfg)
    assert res.returncode == 0, res.stderr
    res = run_cli("queue", "ledger", "check", "--ledger", str(ledger), "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    rep = json.loads(res.stdout)
    assert rep["ok"] and rep["lost"] == 0 and rep["enqueued"] >= 20, rep

    res = run_cli("partitions", "pause", "3", config=cfg)
    assert res.returncode == 0 and fleet.zk.client.exists(f"{fleet.root}/maintenance/paused/3")
    res = run_cli("partitions", "maintain", "--dry-run", config=cfg)
    assert res.returncode == 0 and "jobs_cliq_p0" in res.stdout, res.stderr
    # without --yes it plans (as every command that changes the fleet), with it it acts
    res = run_cli("partitions", "maintain", "--json", config=cfg)
    assert res.returncode == 0 and json.loads(res.stdout)["dry_run"] is True, res.stdout + res.stderr
    res = run_cli("partitions", "maintain", "--yes", "--json", config=cfg)
    assert res.returncode == 0 and json.loads(res.stdout)["dry_run"] is False, res.stdout + res.stderr
    assert run_cli("partitions", "maintain", "--yes", "--dry-run", config=cfg).returncode == 2
    run_cli("partitions", "resume", "3", config=cfg)
    assert not fleet.zk.client.exists(f"{fleet.root}/maintenance/paused/3")
    assert run_cli("queue", "delete", "cliq", "--yes", config=cfg).returncode == 0
