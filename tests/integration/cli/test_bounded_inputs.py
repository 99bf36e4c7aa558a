"""Inputs refused before the network, the documented exit codes, and the confirmations, through the real CLI.

Every value that can be refused locally (a shard range beyond the id format, a migration id that is not one,
a host or queue name, a job state, a negative duration or count, a playbook's values) is refused in one line
with exit code 2 and without waiting on ZooKeeper: the config these cases run with points at a port nothing
listens on, where a command that does reach for the network waits its 5 s connect timeout (checked too).
Then one cause of each exit code of docs/operations.md, and the questions the commands that change a live
queue or re-copy rows ask. Cases already covered in test_bad_inputs.py are not repeated.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from migrator.engine.migration import MigrationStore
from migrator.errors import ExitCode
from migrator.fleet.ids import TYPE_JOB, encode
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from tests.integration.cli.test_bad_inputs import assert_one_line, refused, run_here
from tests.integration.cli_helpers import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[3]
#: well under ZooKeeper's 5 s connect wait, generous for a busy 2-core box (an answer takes milliseconds)
LOCAL_S = 3.0
MID = "m-20260101-000000-abcdef"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def _config(tmp_path: Path, zk_port: int) -> Path:
    """A valid config (credentials included) with ZooKeeper at ``zk_port`` and a Redis nobody answers."""
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[mysql]\nuser = "u"\npassword = "p"\n')
    secrets.chmod(0o600)
    cfg = tmp_path / "migrator.toml"
    cfg.write_text(f'[zookeeper]\nhosts = "127.0.0.1:{zk_port}"\n\n'
                   f'[redis]\nurl = "redis://127.0.0.1:{_closed_port()}/0"\n\n'
                   '[credentials]\nfile = "secrets.toml"\n')
    return cfg


@pytest.fixture
def unreachable(tmp_path) -> Path:
    """A valid config (credentials included) whose ZooKeeper and Redis nobody answers."""
    return _config(tmp_path, _closed_port())


def _playbook(tmp_path: Path, body: str) -> str:
    p = tmp_path / "p.yaml"
    p.write_text("name: t\nsteps:\n" + body)
    return str(p)


# (arguments, what the one line names); each exits 2
LOCAL = [
    (("move", "--shards", "0-99999999999999999999", "--to", "MySQL003A"), ("--shards", "65535")),
    (("move", "--shards", "1-70000", "--to", "MySQL003A"), ("shard 70000", "65535")),
    (("move", "--shards", "5-2", "--to", "MySQL003A"), ("--shards 5-2", "empty")),
    (("move", "--shards", "4-7", "--to", "MySQL003A/../x"), ("--to", "not a valid host name")),
    (("split", "no such host"), ("not a valid host name",)),
    (("rebalance", "--drain", "x;y"), ("--drain x;y", "not a valid host name")),
    (("status", "../../etc"), ("../../etc", "not a migration id")),
    (("abort", "../../etc", "--yes"), ("not a migration id",)),
    (("pause", "m-1"), ("m-1", "not a migration id")),
    (("set", "m-20260101-000000-abcdef/../x", "--max-lag", "1"), ("not a migration id",)),
    (("rollback", "../x", "--yes"), ("not a migration id",)),
    (("verify", "../x"), ("not a migration id",)),
    (("history", "../x"), ("not a migration id",)),
    (("playbook", "status", "../x"), ("not a playbook run id",)),
    (("queue", "pause", "q-1", "--yes"), ("queue q-1", "not a valid queue name")),
    (("queue", "show", "../../etc"), ("not a valid queue name",)),
    (("move-partition", "--queue", "a.b", "--partition", "0", "--to", "MySQL003A"), ("--queue a.b",)),
    (("queue", "purge", "q", "--state", "BOGUS", "--yes"), ("--state BOGUS", "NEW, IPR, OK, FAIL")),
    (("queue", "scan", "q", "--state", "DONE!"), ("--state DONE!",)),
    (("partitions", "maintain", "--queue", "a-b"), ("--queue a-b",)),
    (("partitions", "pause", "70000"), ("SHARD", "65535")),
    (("status", "--interval", "-1"), ("--interval", "greater than 0")),
    (("status", MID, "--watch", "--timeout", "-1"), ("--timeout", "at least 0")),
    (("rebalance", "--threshold", "-1"), ("--threshold", "at least 0")),
    (("rebalance", "--max-concurrent", "0"), ("--max-concurrent",)),
    (("queue", "load", "--rate", "-3"), ("--rate", "at least 0")),
    (("queue", "load", "--url", "notaurl"), ("--url notaurl", "http://")),
    (("queue", "worker", "--queue", "q", "--handler", "m:f", "--url", "ftp://x"), ("--url",)),
    (("queue", "create", "q", "--lease", "-1"), ("lease_seconds",)),
    (("split", "MySQL001A", "--detach"), ("--detach goes with --yes",)),
    (("rebalance", "--detach"), ("--detach goes with --yes",)),
]


def _local(unreachable: Path, *args: str) -> tuple[str, float]:
    t0 = time.monotonic()
    code, _out, err = run_here("--config", str(unreachable), *args)
    took = time.monotonic() - t0
    return assert_one_line(code, err, exit_code=2), took


@pytest.mark.parametrize(("args", "needles"), LOCAL, ids=lambda v: " ".join(v)[:50] if isinstance(v, tuple)
                         and v and v[0] not in ("--shards",) else None)
def test_refused_locally_in_one_line_without_waiting(unreachable, args, needles):
    line, took = _local(unreachable, *args)
    for n in needles:
        assert n in line, (n, line)
    assert took < LOCAL_S, (took, line)


def test_the_config_of_these_cases_does_wait_for_the_network(unreachable):
    """The control: a command that needs ZooKeeper waits its connect timeout there, then exits 4."""
    t0 = time.monotonic()
    code, _out, err = run_here("--config", str(unreachable), "status", MID)
    assert_one_line(code, err, "cannot reach ZooKeeper", exit_code=ExitCode.UNREACHABLE)
    assert time.monotonic() - t0 >= 4.5


def test_a_fat_fingered_range_answers_at_once_through_the_script(unreachable):
    t0 = time.monotonic()
    res = run_cli("move", "--shards", "0-99999999999999999999", "--to", "MySQL003A", config=unreachable, timeout=60)
    assert_one_line_error(res, "65535")
    assert res.returncode == 2 and time.monotonic() - t0 < 30  # a process start on a busy box; it hung before


def test_a_refused_queue_load_writes_no_ledger(unreachable, tmp_path):
    ledger = tmp_path / "ledger.db"
    for bad in (("--duration", "-5"), ("--url", "notaurl"), ("--consumers", "-1")):
        _line, took = _local(unreachable, "queue", "load", "--ledger", str(ledger), *bad)
        assert took < LOCAL_S
        assert not ledger.exists(), bad


@pytest.mark.parametrize(("body", "needle"), [
    ("  - id: s\n    call: sleep\n    with: {seconds: 1}\n    timeout: -30\n", "timeout: must be at least 0"),
    ("  - id: s\n    call: sleep\n    with: {seconds: 1}\n    retries: -2\n", "retries: must be at least 0"),
    ("  - id: s\n    call: sleep\n    with: {seconds: -5}\n", "seconds: must be at least 0"),
    ("  - id: p\n    call: plan_move\n    with: {shards: '1', target: MySQL003A}\n"
     "  - id: c\n    call: cutover\n    with: {freeze_budget_ms: -5}\n", "freeze_budget_ms"),
    ("  - id: p\n    call: use_migration\n    with: {id: ../../etc}\n", "not a migration id"),
], ids=["timeout", "retries", "sleep", "freeze_budget_ms", "migration id"])
def test_run_dry_run_refuses_what_the_cli_refuses(unreachable, tmp_path, body, needle):
    line, took = _local(unreachable, "run", _playbook(tmp_path, body), "--dry-run")
    assert needle in line and took < LOCAL_S, (took, line)


def test_run_dry_run_refuses_a_bad_shard_set(unreachable):
    line, took = _local(unreachable, "run", str(ROOT / "playbooks" / "move-shards.yaml"), "--set", "shards=5-2",
                        "--set", "target=MySQL003A", "--dry-run")
    assert "shard range 5-2 is empty" in line and took < LOCAL_S, (took, line)


def test_run_dry_run_looks_the_hosts_up(fleet):
    res = run_cli("run", str(ROOT / "playbooks" / "move-shards.yaml"), "--set", "shards=4-7", "--set",
                  "target=NoSuchHost", "--dry-run", config=fleet.config_path)
    assert_one_line_error(res, "host NoSuchHost is not in the host registry")
    assert res.returncode == 2
    ok = run_cli("run", str(ROOT / "playbooks" / "move-shards.yaml"), "--set", "shards=4-7", "--set",
                 "target=MySQL003A", "--dry-run", config=fleet.config_path)
    assert ok.returncode == 0, ok.stderr


# -- every documented exit code, by one of its causes --------------------------------------------------------

def test_exit_codes_without_a_fleet(unreachable, tmp_path):
    code, out, _err = run_here("--version")
    assert code == ExitCode.OK and out.startswith("migrator ")
    assert_one_line(*run_here("status", "--no-such-flag")[::2], exit_code=ExitCode.USAGE)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert_one_line(*run_here("sandbox", "down", "--dir", str(mine), "--purge")[::2], "not a sandbox this tool made",
                    exit_code=ExitCode.REFUSED)
    garbage = tmp_path / "garbage.toml"
    garbage.write_text('[zookeeper]\nhosts = "this is not:a host list"\n')
    assert_one_line(*run_here("--config", str(garbage), "status")[::2], "zookeeper.hosts",
                    "not a ZooKeeper connection string", exit_code=ExitCode.CONFIG)
    assert_one_line(*run_here("--config", str(tmp_path / "none.toml"), "status")[::2], "does not exist",
                    exit_code=ExitCode.CONFIG)
    # 4 (unreachable): test_the_config_of_these_cases_does_wait_for_the_network


def test_ctrl_c_exits_130(tmp_path):
    """Ctrl-C while the CLI waits on ZooKeeper. The ZooKeeper it is given accepts the connection and never
    answers, so the test knows when the CLI is waiting (past its start-up, on a busy machine too) and sends
    SIGINT then, not after a guessed sleep."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)
        hole.settimeout(120)
        cfg = _config(tmp_path, hole.getsockname()[1])
        # as from an interactive shell: a test run started in the background of a non-interactive shell
        # ignores SIGINT, and a child inherits that (POSIX), so the CLI would never see the Ctrl-C
        proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(cfg), "status", MID],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            conn, _ = hole.accept()  # the CLI is connecting to ZooKeeper: its handlers are in place
            with conn:
                time.sleep(0.2)
                proc.send_signal(signal.SIGINT)
                _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert_one_line(proc.returncode, err, "interrupted")


def test_exit_codes_with_a_fleet(fleet, tmp_path):
    """1, 3 and 7 (1 and 3 also in test_bad_inputs.py: verify, the questions)."""
    cfg = fleet.config_path
    res = run_cli("split", "MySQL001A", "--yes", "--no-start", config=cfg)
    assert res.returncode == 0, res.stderr
    [mid] = MigrationStore(fleet.zk).list()
    # 7: the watch ended at its --timeout while the migration is not final
    res = run_cli("status", mid, "--watch", "--timeout", "1", "--interval", "0.2", config=cfg)
    assert_one_line_error(res, "stopped watching", "--timeout 1")
    assert res.returncode == ExitCode.STILL_RUNNING
    res = run_cli("status", "--watch", "--timeout", "1", "--interval", "0.2", config=cfg)
    assert res.returncode == ExitCode.STILL_RUNNING, res.stderr
    # 3: a question nobody can answer
    res = run_cli("abort", mid, config=cfg)
    assert_one_line_error(res, "not confirmed")
    assert res.returncode == ExitCode.REFUSED
    # 3: not converged yet (a cutover of a migration that has not even copied)
    res = run_cli("cutover", mid, "--yes", config=cfg)
    assert_one_line_error(res, "not converged")
    assert res.returncode == ExitCode.REFUSED
    # 1: a check that failed (a ledger whose enqueues were lost)
    assert run_cli("abort", mid, "--yes", config=cfg).returncode == 0
    ledger = tmp_path / "ledger.db"
    res = run_cli("queue", "load", "--queue", "exitcodes", "--rate", "50", "--duration", "1", "--ledger",
                  str(ledger), config=cfg)
    assert res.returncode == 0, res.stderr
    import sqlite3

    with sqlite3.connect(ledger) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert "enqueued" in tables, tables
        db.execute("INSERT INTO enqueued (key, job_id, t_call, t_ack) VALUES ('lost', ?, 0, 0)",
                   (encode(0, TYPE_JOB, 10 ** 9),))  # acknowledged, never seen again
    res = run_cli("queue", "ledger", "check", "--ledger", str(ledger), config=cfg)
    assert res.returncode == ExitCode.FAILED, (res.stdout, res.stderr)
    # 5: credentials the fleet does not take is test_bad_inputs.py::test_missing_credentials
    # 6: test_not_converging_exits_6


def test_credentials_refused_exit_5_and_a_dead_host_4(fleet, tmp_path):
    """5: the secrets hold a password MySQL refuses (fix the secrets, not wait for the network); 4: a host
    that does not answer. Neither leaves anything behind."""
    secrets = fleet.sandbox.secrets_file.read_text()
    wrong = tmp_path / "wrong-secrets.toml"
    wrong.write_text("\n".join('password = "not-the-password"' if ln.strip().startswith("password") and
                               "mysql" in section else ln
                               for section, ln in _sections(secrets)) + "\n")
    wrong.chmod(0o600)
    assert wrong.read_text() != secrets
    cfg = tmp_path / "wrong.toml"
    cfg.write_text(fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(wrong)))
    refused(fleet, "split", "MySQL001A", "--yes", "--no-start", needles=("refused the credentials",),
            config=cfg, code=ExitCode.CONFIG)
    dead_a, dead_b = _closed_port(), _closed_port()
    refused(fleet, "topology", "add-pair", f"MySQL901A=127.0.0.1:{dead_a}", f"MySQL901B=127.0.0.1:{dead_b}",
            needles=("MySQL901A",), code=ExitCode.UNREACHABLE)


def test_a_split_whose_migration_ends_aborted_exits_1(fleet):
    """1: the migration a following ``split --yes`` waits on ends without being done (an operator aborts it
    while its pipeline waits for a worker): one line naming the phase it ended in."""
    from tests.integration.ops.operator_support import redis_of

    cfg = fleet.config_path
    split = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(cfg), "split", "MySQL001A",
                              "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        store = MigrationStore(fleet.zk)
        deadline = time.monotonic() + 60
        while not store.list() and split.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        [mid] = store.list()
        res = run_cli("abort", mid, "--yes", config=cfg)
        assert res.returncode == 0, res.stderr
        out, err = split.communicate(timeout=60)
    finally:
        if split.poll() is None:
            split.kill()
            split.wait()
        redis_of(fleet).flushdb()  # the pipeline's job: nobody runs it after this test
    assert split.returncode == ExitCode.FAILED, (split.returncode, out, err)
    assert_one_line(split.returncode, err, mid, "aborted", exit_code=ExitCode.FAILED)


def test_a_redis_that_does_not_answer_exits_4(fleet, tmp_path):
    """4: Redis does not answer (redis-py connects at the first command: a worker finds out at start)."""
    dead = _closed_port()
    text = "\n".join(f'url = "redis://127.0.0.1:{dead}/0"' if section == "[redis]" and ln.strip().startswith("url")
                     else ln for section, ln in _sections(fleet.config_path.read_text()))
    assert f":{dead}/0" in text
    cfg = tmp_path / "dead-redis.toml"
    cfg.write_text(text + "\n")
    refused(fleet, "worker", "--burst", "--no-settle", "--queue", "exitcodes", needles=("Redis did not answer",),
            config=cfg, code=ExitCode.UNREACHABLE)


def _sections(text: str) -> list[tuple[str, str]]:
    """Each line of a TOML text with the table it is in."""
    out, section = [], ""
    for ln in text.splitlines():
        if ln.strip().startswith("["):
            section = ln.strip()
        out.append((section, ln))
    return out


def test_not_converging_exits_6(fleet):
    """6: catch-up cannot keep up with the writes. A row lock on the target holds the pass that applies the
    source's latest write for longer than the source took to write it (its apply rate below the write rate);
    the migration is planned to judge that after one such pass instead of three."""
    from migrator.engine.migration import Options
    from migrator.fleet.mysql import connect as mysql_connect
    from migrator.ops import command

    cfg = fleet.config_path
    spec = command.plan_split(fleet.config, "MySQL001A", options=Options(not_converging_passes=1)).spec
    command.run_copy(fleet.config, spec.id)
    db = spec.databases[0]
    target, source = fleet.hosts[spec.target_master], fleet.hosts[spec.source_master]
    with mysql_connect(target, fleet.credentials) as holder, holder.cursor() as hold, \
            mysql_connect(target, fleet.credentials) as watch, watch.cursor() as look:
        hold.execute("BEGIN")
        hold.execute(f"SELECT local_id FROM {db}.pins ORDER BY local_id LIMIT 1 FOR UPDATE")
        with mysql_connect(source, fleet.credentials) as c, c.cursor() as cur:
            cur.execute(f"UPDATE {db}.pins SET data = '{{\"slow\": 1}}' ORDER BY local_id LIMIT 1")
        written = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(cfg), "catchup", spec.id,
                                 "--sync"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            deadline = time.monotonic() + 90
            while True:  # the pass's apply waits on the held row
                look.execute("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'")
                if look.fetchone()[0] or proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert proc.poll() is None, proc.communicate()
            # the pass lasts well over the time since the write (its write-rate window), and over 5 s
            time.sleep(max(8.0, 2 * (time.monotonic() - written) + 2))
            holder.rollback()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert_one_line(proc.returncode, err, "not converging", spec.id, exit_code=ExitCode.NOT_CONVERGING)
    assert not out.strip(), out
    st, _ = MigrationStore(fleet.zk).state(spec.id)
    assert "not converging" in (st.error or ""), st
    assert run_cli("abort", spec.id, "--yes", config=cfg).returncode == 0


def test_a_bad_queue_url_is_a_usage_error_and_a_dead_one_unreachable(fleet, tmp_path):
    ledger = tmp_path / "l.db"
    res = run_cli("queue", "load", "--url", "htp:/x", "--ledger", str(ledger), config=fleet.config_path)
    assert_one_line_error(res, "--url")
    assert res.returncode == ExitCode.USAGE and not ledger.exists()
    res = run_cli("queue", "load", "--url", f"http://127.0.0.1:{_closed_port()}", "--duration", "1",
                  "--ledger", str(ledger), config=fleet.config_path)
    assert_one_line_error(res)
    assert res.returncode == ExitCode.UNREACHABLE and not ledger.exists(), res.stderr


# -- questions where a live thing changes --------------------------------------------------------------------

def test_queue_pause_and_update_ask_first(fleet):
    cfg = fleet.config_path
    assert run_cli("queue", "create", "askme", config=cfg).returncode == 0
    res = run_cli("queue", "pause", "askme", config=cfg)
    assert_one_line_error(res, "not confirmed", "pause queue askme", "give --yes")
    assert res.returncode == 3
    res = run_cli("queue", "update", "askme", "--lease", "60", config=cfg)
    assert_one_line_error(res, "not confirmed", "lease_seconds from 30.0 to 60.0")
    shown = json.loads(run_cli("queue", "show", "askme", config=cfg).stdout)
    assert not shown["config"]["paused"] and shown["config"]["lease_seconds"] == 30
    assert run_cli("queue", "pause", "askme", "-y", config=cfg).returncode == 0
    assert run_cli("queue", "update", "askme", "--lease", "60", "--yes", config=cfg).returncode == 0
    shown = json.loads(run_cli("queue", "show", "askme", config=cfg).stdout)
    assert shown["config"]["paused"] and shown["config"]["lease_seconds"] == 60


def test_demo_asks_before_it_deletes_an_existing_sandbox(tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "state.json").write_text(json.dumps({"dir": str(sb), "base_port": 1, "pairs": 1, "spare_pairs": 0,
                                               "shards": 2, "rows": 0, "procs": {}}))
    res = run_cli("demo", "--dir", str(sb))
    if "not a sandbox state file" in res.stderr:
        pytest.fail(f"the test's state file is not one the sandbox reads: {res.stderr}")
    assert_one_line_error(res, "not confirmed", "delete that directory", "give --yes")
    assert res.returncode == 3 and (sb / "state.json").exists()


def test_a_secrets_file_readable_by_others_is_warned_about_once(unreachable, tmp_path):
    (tmp_path / "secrets.toml").chmod(0o644)
    code, _out, err = run_here("--config", str(unreachable), "status", "--interval", "-1")
    assert code == 2 and "warning" not in err  # refused before the secrets were read
    env = {k: v for k, v in os.environ.items() if k != "MIGRATOR_QUEUE_TOKEN"}
    # `queue broker` reads the secrets (twice) and, finding no queue token, refuses at once
    res = run_cli("queue", "broker", config=unreachable, env=env, timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and "token" in lines[-1], res.stderr
    warnings = [ln for ln in lines if ln.startswith("warning: ")]
    assert len(warnings) == 1, res.stderr
    assert "secrets.toml" in warnings[0] and "0644" in warnings[0] and "chmod 600" in warnings[0]
    (tmp_path / "secrets.toml").chmod(0o600)
    res = run_cli("queue", "broker", config=unreachable, env=env, timeout=60)
    assert "warning" not in res.stderr and res.returncode != 0, res.stderr


# -- topology init checks everything before it writes anything -----------------------------------------------

def test_topology_init_writes_no_host_when_it_refuses(zk_root, sandbox, tmp_path):
    _cfg, cfg_path, _creds, zk = zk_root
    hosts = [h.model_dump() for h in sandbox.hosts().values()]
    good_map = tmp_path / "map.json"
    good_map.write_text(json.dumps([{"range": [0, 3], "master": "MySQL001A", "slave": "MySQL001B"},
                                    {"range": [4, 7], "master": "MySQL002A", "slave": "MySQL002B"}]))
    # a map naming a host neither registered nor in the hosts file: nothing is written, hosts included
    lonely = tmp_path / "lonely.json"
    lonely.write_text(json.dumps([h for h in hosts if h["name"].startswith("MySQL001")]))
    res = run_cli("topology", "init", "--from", str(good_map), "--hosts", str(lonely), config=cfg_path)
    assert_one_line_error(res, "MySQL002A")
    assert HostRegistry(zk).all() == {} and not ShardMapStore(zk).exists()
    # the first init registers the hosts with the map
    hosts_file = tmp_path / "hosts.json"
    hosts_file.write_text(json.dumps(hosts))
    res = run_cli("topology", "init", "--from", str(good_map), "--hosts", str(hosts_file), "--json",
                  config=cfg_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ranges"] == 2, res.stdout  # --json: one document, nothing else
    before = HostRegistry(zk).all()
    # a re-run with a stale hosts file is refused before any live entry is re-pointed
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps([{**h, "address": "10.9.9.9"} for h in hosts]))
    res = run_cli("topology", "init", "--from", str(good_map), "--hosts", str(stale), config=cfg_path)
    assert_one_line_error(res, "already exists", "nothing was written")
    assert HostRegistry(zk).all() == before
