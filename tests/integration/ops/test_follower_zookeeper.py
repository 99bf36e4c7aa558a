"""The commands that launch and follow a migration ride through ZooKeeper going away.

``migrator split --yes`` (as an operator runs it, in a subprocess, with a real ``migrator worker``) while
the sandbox's ZooKeeper is paused (SIGSTOP) for 20 s during the copy, past every session timeout (10 s for
the CLI and the workers, 4 s for a cutover's lease): the follower keeps following (on a new session when
the server expired its own, which it does in most runs), says in one line that ZooKeeper is back, and ends
with exit 0 once the migration is done; the worker's step that ZooKeeper went away under is scheduled
again and the migration finishes. A follower whose ZooKeeper stays away past ``--zk-patience`` exits 4
with one line that says what to run. A launch that ZooKeeper went away under leaves its migration
``planned``, and the same command run again takes it up and runs it to the end.

The GTID layout does not matter here (followers and launches only read and write ZooKeeper); run in both
layouts once, they pass in both, and they are not in the every_layout list.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import config as config_mod
from migrator.ops import command
from tests.fleet import pause_zookeeper
from tests.integration.cli_helpers import assert_one_line_error
from tests.integration.ops.operator_support import stop_process, wait_for

#: past every session timeout of the sandbox's config (10 s) and of a cutover's lease (4 s)
PAUSE_S = 20.0
#: a config of the fleet whose sessions time out after this: a pause past it is seen within about a second
SHORT_SESSION_S = 2.0


def _cli(fleet, *args: str, config: Path | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(config or fleet.config_path), *args],
                            **popen)


def _worker(fleet, tmp_path: Path, name: str) -> subprocess.Popen:
    return _cli(fleet, "worker", "--name", name, stdout=open(tmp_path / f"{name}.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT)


def _short_sessions(fleet, tmp_path: Path) -> Path:
    """The fleet's config with sessions of :data:`SHORT_SESSION_S` (the CLI under test loses ZooKeeper fast)."""
    cfg = config_mod.load(fleet.config_path)
    cfg.zookeeper.session_timeout = SHORT_SESSION_S
    path = tmp_path / "short-sessions.toml"
    path.write_text(config_mod.dump(cfg))
    return path


def _phase_is(fleet, phase: Phase):
    store = MigrationStore(fleet.zk)

    def check() -> str | None:
        ids = store.list()
        return ids[0] if ids and store.state(ids[0])[0].phase == phase else None

    return check


def test_a_split_follows_through_zookeeper_paused_past_every_session(fleet, tmp_path):
    worker = _worker(fleet, tmp_path, "zk-pause-1")
    log = tmp_path / "split.log"
    split, resumer = None, None
    try:
        with open(log, "w") as out:
            # one-row first chunks: the copy lasts long enough to be paused in
            split = _cli(fleet, "split", "MySQL001A", "--to", "MySQL003A", "--yes", "--chunk-rows", "1",
                         "--chunk-target-ms", "10", stdout=out, stderr=subprocess.PIPE, text=True)
        migration_id = wait_for(_phase_is(fleet, Phase.COPYING), timeout=120, every=0.02)
        resumer = pause_zookeeper(fleet.sandbox, PAUSE_S)
        _, err = split.communicate(timeout=180)
    finally:
        if resumer is not None:
            resumer.join(60)
        if split is not None and split.poll() is None:
            stop_process(split)
        stop_process(worker)
    text = log.read_text()
    assert split.returncode == 0, (err, text, (tmp_path / "zk-pause-1.log").read_text()[-4000:])
    # one line for the one outage; whether the server expired the session or took the client's reconnection
    # first once it runs again is its own race (most runs: expired), and the follower goes on either way
    back = [ln for ln in text.splitlines() if "ZooKeeper is back after" in ln]
    assert len(back) == 1, text
    assert f"{migration_id} done: write freeze" in text, text
    assert MigrationStore(fleet.zk).state(migration_id)[0].phase == Phase.DONE


def test_a_follower_gives_up_with_one_line_once_zookeeper_stays_away_past_its_patience(fleet, tmp_path):
    migration_id = command.plan_move(fleet.config, "2-3", "MySQL003A").spec.id  # stored, never started
    watch = _cli(fleet, "status", migration_id, "--watch", "--zk-patience", "2",
                 config=_short_sessions(fleet, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    resumer = None
    try:
        assert "phase planned" in watch.stdout.readline()  # it follows
        t0 = time.monotonic()
        resumer = pause_zookeeper(fleet.sandbox, 6.0)
        out, err = watch.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if resumer is not None:
            resumer.join(60)
        if watch.poll() is None:
            stop_process(watch)
    res = subprocess.CompletedProcess(watch.args, watch.returncode, out, err)
    assert res.returncode == 4, (out, err)
    assert_one_line_error(res, "did not answer for 2s (--zk-patience)", f"`migrator status {migration_id} --watch`")
    assert took < 6.0, took  # while ZooKeeper was still away: the patience, not the pause, ended it
    command.abort(fleet.config, migration_id)


def test_a_launch_zookeeper_went_away_under_is_taken_up_by_the_same_command(fleet, tmp_path):
    split_args = ("split", "MySQL001A", "--to", "MySQL003A", "--yes")
    first = _cli(fleet, *split_args, "--zk-patience", "2", config=_short_sessions(fleet, tmp_path),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    resumer = None
    try:  # no worker yet: ZooKeeper goes away while the migration is stored and not started
        migration_id = wait_for(_phase_is(fleet, Phase.PLANNED), timeout=60, every=0.01)
        resumer = pause_zookeeper(fleet.sandbox, 8.0)
        out, err = first.communicate(timeout=60)
    finally:
        if resumer is not None:
            resumer.join(60)
        if first.poll() is None:
            stop_process(first)
    assert first.returncode == 4, (out, err)
    assert_one_line_error(subprocess.CompletedProcess(first.args, 4, out, err), "(--zk-patience)", "same command")
    assert MigrationStore(fleet.zk).state(migration_id)[0].phase == Phase.PLANNED

    worker = _worker(fleet, tmp_path, "zk-launch-1")
    try:
        again = subprocess.run([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), *split_args],
                               capture_output=True, text=True, timeout=180)
    finally:
        stop_process(worker)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert f"taking up {migration_id}" in again.stdout, again.stdout
    assert [m["id"] for m in command.status(fleet.config)["migrations"]] == [migration_id]
    assert MigrationStore(fleet.zk).state(migration_id)[0].phase == Phase.DONE
