"""The audit trail on the real fleet: every phase change names the real actor
(with the component that made it), every shard-map change its old and new epoch,
and `migrator history ID` shows both."""

from __future__ import annotations

import json

from migrator.engine.migration import MigrationStore
from migrator.ops import command
from tests.integration.cli_helpers import run_cli

from .operator_support import planned


def test_every_transition_names_the_actor_and_the_map_change_its_epochs(fleet, monkeypatch):
    monkeypatch.setenv("MIGRATOR_ACTOR", "alice@ops-console")
    mid = planned(fleet)
    monkeypatch.setenv("MIGRATOR_ACTOR", "worker-7@migrator-host")  # the copy and catch-up run elsewhere
    command.run_copy(fleet.config, mid)
    command.catchup(fleet.config, mid)
    monkeypatch.setenv("MIGRATOR_ACTOR", "bob@ops-console")
    command.cutover(fleet.config, mid)

    st, _ = MigrationStore(fleet.zk).state(mid)
    moves = [(h["from"], h["to"], h["who"], h.get("component")) for h in st.history]
    assert moves[0] == (None, "planned", "alice@ops-console", None)
    assert ("copying", "catching_up", "worker-7@migrator-host", "copy") in moves
    assert ("catching_up", "converged", "worker-7@migrator-host", "catch_up") in moves
    assert moves[-1][1] == "done" and moves[-1][2] == "bob@ops-console"
    assert all(h["who"] in ("alice@ops-console", "worker-7@migrator-host", "bob@ops-console") for h in st.history)

    res = run_cli("history", mid, "--json", config=fleet.config_path, env={"MIGRATOR_ACTOR": "carol@audit"})
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    phases = [r for r in rows if r["what"] == "migration"]
    assert [r["to"] for r in phases] == [h["to"] for h in st.history]
    assert [r["when"] for r in rows] == sorted(r["when"] for r in rows)
    flips = [r for r in rows if r["what"] == "shard_map"]
    assert flips, rows
    assert all(r["who"] == "bob@ops-console" for r in flips)
    assert all(r["new_epoch"] == r["old_epoch"] + 1 for r in flips)
    assert st.flipped_epoch in {r["new_epoch"] for r in flips}
    text = run_cli("history", mid, config=fleet.config_path)
    assert "worker-7@migrator-host" in text.stdout and "by catch_up" in text.stdout
    assert "epoch" in text.stdout
