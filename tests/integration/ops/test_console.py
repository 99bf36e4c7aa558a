"""`migrator console` as an operator sees it: a real sandbox with a migration catching up, the console
started as a process, the page rendered by Debian's chromium headless (DOM after the page polled,
and a screenshot), its JSON equal to `migrator status --json`, and 401 without the token."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import httpx
import pytest

from migrator.ops import command
from migrator.ops.rebalance import command as rebalance
from tests.integration.cli_helpers import run_cli

from .operator_support import copied, insert_pins, stop_process, wait_for
from .test_operator_metrics import free_port

CHROMIUM = shutil.which("chromium")


def chromium(tmp_path, url: str, *extra: str) -> str:
    """Load ``url`` in headless chromium, let its scripts run for a while, return what it printed."""
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-crash-reporter", "--disable-breakpad", "--no-first-run", "--no-default-browser-check",
           "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
           "--virtual-time-budget=15000", "--window-size=1400,2200", *extra, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def without_workers(out: dict) -> dict:
    return {k: v for k, v in out.items() if k != "workers"}


@pytest.fixture
def console(fleet, tmp_path):
    """`migrator console` on the test's fleet, as a process; stopped at teardown. Yields its base URL."""
    port = free_port()
    log = (tmp_path / "console.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "console",
                             "--listen", f"127.0.0.1:{port}", "--measure-every", "2", "--window", "0.5"],
                            stdout=subprocess.PIPE, stderr=log, text=True, env=os.environ.copy())
    base = f"http://127.0.0.1:{port}"
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving the console on"), (line, (tmp_path / "console.log").read_text())
        wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200, timeout=30, every=0.2)
        yield base
    finally:
        stop_process(proc)
        log.close()


def measured(base: str, auth: dict) -> dict:
    def done():
        f = httpx.get(f"{base}/api/fleet", headers=auth, timeout=30).json()
        return f if f["measured"] else None

    return wait_for(done, timeout=60, every=0.5)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/setup installs it)")
def test_console_shows_the_fleet_and_a_running_migration(fleet, console, tmp_path):
    mid = copied(fleet)
    insert_pins(fleet, "MySQL001A", "db00002", 30)  # after the copy's start: the passes apply these
    command.catchup(fleet.config, mid, passes=2)
    st = command.status(fleet.config, mid)
    assert st["phase"] not in ("done", "failed") and st["passes"], st["phase"]
    token = fleet.credentials.queue_token
    assert token, "the sandbox secrets carry a queue token"

    base = console

    # every JSON endpoint refuses a request without the token, or with another one
    for path in ("/api/fleet", "/api/status", f"/api/status/{mid}", "/api/rebalances", "/api/plan"):
        for headers in ({}, {"Authorization": f"Bearer {token}x"}):
            r = httpx.get(base + path, headers=headers, timeout=10)
            assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", (path, r.text)
    auth = {"Authorization": f"Bearer {token}"}

    # the same data `migrator status [ID] --json` gives (the workers list aside: it is live)
    got = httpx.get(f"{base}/api/status/{mid}", headers=auth, timeout=30).json()
    cli = json.loads(run_cli("status", mid, "--json", config=fleet.config_path).stdout)
    assert without_workers(got) == without_workers(cli)
    listing = httpx.get(f"{base}/api/status", headers=auth, timeout=30).json()
    assert without_workers(listing) == without_workers(
        json.loads(run_cli("status", "--json", config=fleet.config_path).stdout))
    assert httpx.get(f"{base}/api/status/m-nope", headers=auth, timeout=30).status_code == 404
    # a plan is refused while a migration is under way, with the reason
    plan = httpx.get(f"{base}/api/plan", headers=auth, timeout=30)
    assert plan.status_code == 409 and mid in plan.json()["error"]["message"]

    f = measured(base, auth)
    assert {p["master"] for p in f["pairs"]} == {"MySQL001A", "MySQL002A"}
    assert all(p["bytes"] > 0 and p["shards"] == 4 for p in f["pairs"])
    assert f["epoch"] == fleet.smap.epoch and f["epoch_history"]
    assert f["spare_pairs"] == [["MySQL003A", "MySQL003B"]]

    # the page, as a browser renders it after polling
    dom = chromium(tmp_path, f"{base}/#token={token}", "--dump-dom")
    for pair in ("MySQL001A", "MySQL002A"):
        assert re.search(rf'<tr data-pair="{pair}">.*?{pair}', dom), pair
    row = re.search(rf'<tr data-migration="{re.escape(mid)}">(.*?)</tr>', dom)
    assert row, dom[-3000:]
    assert f'class="phase phase-{st["phase"]}">{st["phase"]}<' in row.group(1)
    start = dom.index(f'<div class="card" data-detail="{mid}">')
    card = dom[start:dom.index("freezes of past cutovers", start)]
    assert "catch-up passes" in card and 'class="chart passes"' in card  # the pass chart was drawn
    assert "db00002" in card and "db00003" in card  # the copy per shard
    assert '<form id="token-form" hidden="">' in dom  # the token was taken from the address
    assert token not in dom  # the token left the address and is nowhere in the page

    shot = tmp_path / "console.png"
    chromium(tmp_path, f"{base}/#token={token}", f"--screenshot={shot}")
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000

    # without the token the page asks for it and shows no fleet data
    bare = chromium(tmp_path, f"{base}/", "--dump-dom")
    assert '<form id="token-form">' in bare and "data-pair" not in bare and mid not in bare


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/setup installs it)")
def test_console_shows_a_rebalance_plan_before_and_after(fleet, console, tmp_path):
    token = fleet.credentials.queue_token
    auth = {"Authorization": f"Bearer {token}"}
    measured(console, auth)
    # the dry run of adding the spare pair, on the console's measurement
    r = httpx.get(f"{console}/api/plan", params={"add_pair": "MySQL003A"}, headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    preview = r.json()
    assert preview["add"] == ["MySQL003A"] and preview["moves"]
    assert all(m["target"] == "MySQL003A" for m in preview["moves"])
    assert preview["load_before"]["MySQL003A"] == 0 < preview["load_after"]["MySQL003A"]

    # started for real (its first moves handed to RQ): the console shows its loads and its moves in order
    rid = rebalance.start(fleet.config, rebalance.plan_live(fleet.config, add_pairs=["MySQL003A"], window_s=0.5))
    got = httpx.get(f"{console}/api/rebalances/{rid}/plan", headers=auth, timeout=30).json()
    assert got["id"] == rid and got["measured"] and got["objective"] == "bytes"
    assert got["load_before"]["MySQL003A"] == 0 < got["load_after"]["MySQL003A"]
    assert sum(got["load_before"].values()) == sum(got["load_after"].values())  # moved, not made
    assert [m["index"] for m in got["moves"]] == list(range(len(preview["moves"])))
    assert {m["state"] for m in got["moves"]} <= {"waiting", "running"}
    listing = httpx.get(f"{console}/api/rebalances", headers=auth, timeout=30).json()
    assert listing == rebalance.status(fleet.config)
    assert httpx.get(f"{console}/api/rebalances/rb-nope/plan", headers=auth, timeout=30).status_code == 404

    dom = chromium(tmp_path, f"{console}/#token={token}", "--dump-dom")
    start = dom.index(f'<div class="card" data-rebalance="{rid}">')
    card = dom[start:dom.index("plan preview", start)]
    assert card.count('class="chart"') == 1 and "before" in card and "after" in card
    assert card.count("<tr><td>") == len(got["moves"]) and "MySQL003A" in card
    shot = tmp_path / "rebalance.png"
    chromium(tmp_path, f"{console}/#token={token}", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
