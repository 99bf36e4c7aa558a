"""The root options where an operator types them: after the subcommand as well as before it.

``migrator status ID -c prod.toml`` must read prod.toml, exactly as ``migrator -c prod.toml status ID`` does.
The environment points ``$MIGRATOR_CONFIG`` at a file that does not exist, so a ``-c`` left unread would fail.
"""

from __future__ import annotations

import json

from tests.integration.cli_helpers import run_cli


def test_config_after_the_subcommand(fleet, tmp_path):
    cfg = str(fleet.config_path)
    env = {"MIGRATOR_CONFIG": str(tmp_path / "missing.toml")}
    planned = run_cli("move", "--shards", "2-3", "--to", "MySQL003A", "--yes", "--no-start", "--json",
                      "--config", cfg, env=env)
    assert planned.returncode == 0, planned.stderr
    mid = json.loads(planned.stdout)["id"]

    after = run_cli("status", mid, "--json", "-c", cfg, env=env)
    assert after.returncode == 0, after.stderr
    before = run_cli("-c", cfg, "status", mid, "--json", env=env)
    assert before.returncode == 0, before.stderr
    a, b = json.loads(after.stdout), json.loads(before.stdout)
    assert a["id"] == b["id"] == mid and a["phase"] == b["phase"]

    # --config=PATH and -v after the subcommand too; the subcommand's own options keep their values
    listed = run_cli("status", f"--config={cfg}", "-v", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert mid in listed.stdout

    # without it the missing default config is what is read: the test would notice a -c that was ignored
    missing = run_cli("status", mid, "--json", env=env)
    assert missing.returncode != 0
