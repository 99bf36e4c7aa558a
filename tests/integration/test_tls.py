"""MySQL TLS on the real sandbox (MariaDB with its own CA and ``require_secure_transport=ON``):
a plaintext client is refused while the configured TLS is accepted, replication and the binlog
dump run over verified TLS, and preflight fails with one line on a wrong CA (fleet-wide or
for one host) and on a host that requires TLS while the config sets none.

Elsewhere: the settings themselves (``tests/unit/fleet/test_mysql_tls.py``); no private key
in ZooKeeper, Redis, logs or job meta (``tests/integration/test_security.py``).
"""

from __future__ import annotations

import pymysql
import pytest

from migrator.engine.binlog.reader import LocalReader
from migrator.fleet import config as config_mod
from migrator.fleet.mysql import MySQLTLSFailed, binlog_pos, connect, tls_of
from migrator.fleet.tls import MySQLTLSOverride, MySQLTLSSettings
from migrator.ops import command
from migrator.sandbox.tls import make_ca

from .cli_helpers import assert_one_line_error, run_cli


@pytest.fixture(autouse=True)
def _tls_sandbox(sandbox):
    if not sandbox.state.tls:
        pytest.fail("the shared sandbox runs without TLS: these tests need `migrator sandbox up` (TLS is "
                    "the default); a MIGRATOR_TEST_SANDBOX made with --no-tls cannot run them")


def _with_tls(fleet, tmp_path, tls: MySQLTLSSettings | None):
    """A config file like the fleet's with other ``[mysql.tls]`` settings."""
    cfg = fleet.config.model_copy(deep=True)
    cfg.mysql.tls = tls
    p = tmp_path / "other.toml"
    p.write_text(config_mod.dump(cfg))
    return config_mod.load(p), p


def test_plaintext_client_is_refused_and_the_configured_tls_is_verified(fleet):
    host = fleet.hosts["MySQL001A"]
    creds = fleet.credentials
    with pytest.raises(pymysql.err.OperationalError) as exc:
        pymysql.connect(host=host.address, port=host.port, user=creds.mysql_user, password=creds.mysql_password,
                        ssl_disabled=True, connect_timeout=5)
    assert exc.value.args[0] in (1045, 3159, 4036), exc.value.args  # MariaDB answers "access denied"
    tls = tls_of(host, creds)
    assert tls is not None and tls.verify_hostname and tls.cert is not None
    with connect(host, creds) as c, c.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1], "the toolkit's connection is not TLS"
        cur.execute("SELECT @@global.require_secure_transport")
        assert cur.fetchone()[0] == 1


def test_replication_and_the_binlog_dump_run_over_verified_tls(fleet):
    for name in ("MySQL001A", "MySQL001B", "MySQL003A"):
        with fleet.sandbox.root_conn(name) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            st = cur.fetchone()
        assert (st["Master_SSL_Allowed"], st["Master_SSL_Verify_Server_Cert"]) == ("Yes", "Yes"), name
        assert st["Slave_IO_Running"] == "Yes", (name, st["Last_IO_Error"])
    host = fleet.hosts["MySQL001A"]
    with connect(host, fleet.credentials) as c:
        start = binlog_pos(c)
        with c.cursor() as cur:
            cur.execute("INSERT INTO db00000.pins (data) VALUES ('{}')")
        end = binlog_pos(c)
    with LocalReader(host.address, host.port, fleet.credentials.mysql_user, fleet.credentials.mysql_password,
                     start, ["db00000"], tls=tls_of(host, fleet.credentials)) as rd:
        txns = [t for t in rd.transactions(end) if t is not None]
        assert rd.position == end
    assert len(txns) == 1 and len(txns[0].changes) == 1, txns


def test_wrong_ca_fails_preflight_with_one_line(fleet, tmp_path):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    wrong = make_ca(tmp_path / "wrong", "not the sandbox CA")
    good = fleet.config.mysql.tls
    cfg, path = _with_tls(fleet, tmp_path, good.model_copy(update={"ca": wrong}))
    with pytest.raises(MySQLTLSFailed, match="did not verify"):
        connect(fleet.hosts["MySQL001A"], config_mod.load_credentials(cfg))
    res = command.preflight(cfg, spec.id)
    lines = [c.line() for c in res.failures]
    assert len(lines) == 1, res.lines()
    line = lines[0]
    assert line.startswith("FAIL tls: the TLS certificate of ") and str(wrong) in line and "mysql.tls.ca" in line
    for name in (spec.source_master, spec.source_passive, spec.target_master, spec.target_passive):
        assert name in line, line
    cli = run_cli("preflight", spec.id, config=path)
    assert cli.returncode != 0
    fails = [ln for ln in cli.stdout.splitlines() if "FAIL" in ln]
    assert len(fails) == 1 and "did not verify" in fails[0], cli.stdout
    # one host's override is wrong: the line names that host only
    cfg, _ = _with_tls(fleet, tmp_path,
                       good.model_copy(update={"hosts": {spec.target_master: MySQLTLSOverride(ca=wrong)}}))
    res = command.preflight(cfg, spec.id)
    assert [c.name for c in res.failures] == ["tls"], res.lines()
    assert spec.target_master in res.failures[0].message and spec.source_master not in res.failures[0].message
    assert command.preflight(fleet.config, spec.id).ok


def test_a_host_requiring_tls_without_settings_fails_preflight_with_one_line(fleet, tmp_path):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    cfg, _ = _with_tls(fleet, tmp_path, None)
    res = command.preflight(cfg, spec.id)
    assert [c.name for c in res.failures] == ["tls"], res.lines()
    msg = res.failures[0].message
    assert "require secure transport" in msg and "[mysql.tls]" in msg and spec.target_master in msg, msg
    # a host the settings turn off is named; the others pass
    cfg, _ = _with_tls(fleet, tmp_path, fleet.config.mysql.tls.model_copy(
        update={"hosts": {spec.source_passive: MySQLTLSOverride(enabled=False)}}))
    res = command.preflight(cfg, spec.id)
    assert [c.name for c in res.failures] == ["tls"] and spec.source_passive in res.failures[0].message, res.lines()
    assert spec.source_master not in res.failures[0].message


def test_a_missing_tls_file_is_one_line_from_the_cli(fleet, tmp_path):
    text = fleet.config_path.read_text().replace(str(fleet.config.mysql.tls.ca), str(tmp_path / "gone.pem"))
    path = tmp_path / "broken.toml"
    path.write_text(text)
    assert_one_line_error(run_cli("status", config=path), "mysql.tls.ca", "gone.pem", "does not exist")
