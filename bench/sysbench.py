"""sysbench ``oltp_write_only`` as the benchmarks' ordinary writer (Debian package ``sysbench``).

Connects over TCP with the migration identity, like any client of the fleet, over TLS when the
config sets ``[mysql.tls]`` for the host. sysbench 1.0.20 has one TLS switch (``--mysql-ssl=on``)
and reads its files under fixed names from its working directory (``cacert.pem``,
``client-cert.pem``, ``client-key.pem``): it runs in a folder of links by those names to
the configured files, and needs a client certificate. Its client library encrypts but does not
verify the server's certificate.
An ``oltp_write_only`` transaction is four row changes: two updates, a
delete and an insert (sysbench 1.0.20), on ``--tables`` tables of ``--table-size``
rows in one shard database.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from bench.tls import sysbench_dir as _tls_dir

ROWS_PER_TXN = 4


def _base(host: Any, creds: Any, db: str, tables: int, table_size: int) -> list[str]:
    return ["sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-host={host.address}",
            f"--mysql-port={host.port}", f"--mysql-user={creds.mysql_user}", f"--mysql-db={db}",
            f"--tables={tables}", f"--table-size={table_size}", *(["--mysql-ssl=on"] if _tls_dir(host, creds) else [])]




def _env(creds: Any) -> dict[str, str]:
    # the password goes through the environment of the child (the client library reads MYSQL_PWD),
    # never its command line
    return {**os.environ, "MYSQL_PWD": creds.mysql_password}


def prepare(host: Any, creds: Any, db: str, *, tables: int = 4, table_size: int = 20_000) -> None:
    subprocess.run([*_base(host, creds, db, tables, table_size), "prepare"], check=True, capture_output=True,
                   env=_env(creds), cwd=_tls_dir(host, creds))


@dataclass
class Result:
    transactions: int
    seconds: float
    errors: int
    #: a background run's per-second reports: (monotonic end of the second, its latency percentile in ms,
    #: ``--percentile``)
    latency_ms: list[tuple[float, float]] = field(default_factory=list)
    #: ... and (monotonic end of the second, errors per second that second)
    errors_per_s: list[tuple[float, float]] = field(default_factory=list)

    @property
    def tps(self) -> float:
        return self.transactions / self.seconds if self.seconds else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.tps * ROWS_PER_TXN


def _parse(out: str) -> Result:
    txn = re.search(r"transactions:\s+(\d+)", out)
    secs = re.search(r"total time:\s+([\d.]+)s", out)
    errs = re.search(r"ignored errors:\s+(\d+)", out)
    return Result(int(txn.group(1)) if txn else 0, float(secs.group(1)) if secs else 0.0,
                  int(errs.group(1)) if errs else 0)


def run(host: Any, creds: Any, db: str, *, seconds: float, threads: int = 4, rate: int = 0,
        tables: int = 4, table_size: int = 20_000) -> Result:
    """Run for ``seconds`` (unthrottled unless ``rate``) and wait for it."""
    cmd = [*_base(host, creds, db, tables, table_size), f"--threads={threads}", f"--time={int(seconds)}",
           f"--rate={rate}", "run"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=_env(creds), cwd=_tls_dir(host, creds))
    return _parse(out.stdout)


class Background:
    """sysbench running while something else happens; :meth:`stop` ends it (SIGTERM) and returns its result."""

    def __init__(self, host: Any, creds: Any, db: str, *, threads: int = 4, rate: int = 0, tables: int = 4,
                 table_size: int = 20_000, ignore_errors: bool = True, prepared: bool = True, percentile: int = 99):
        cmd = [*_base(host, creds, db, tables, table_size), f"--threads={threads}", "--time=0", f"--rate={rate}",
               "--report-interval=1", f"--percentile={percentile}"]
        if not prepared:
            cmd.append("--db-ps-mode=disable")
        if ignore_errors:
            cmd.append("--mysql-ignore-errors=all")  # a fenced table answers 1317 or 1146: keep writing
        self.started = time.monotonic()
        self.proc = subprocess.Popen([*cmd, "run"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=_env(creds), start_new_session=True,
                                     cwd=_tls_dir(host, creds))

    def stop(self) -> Result:
        """Stop it; the result comes from its per-second reports (a terminated sysbench prints no summary)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # started in its own session: SIGINT is ignored there
        out, _ = self.proc.communicate(timeout=60)
        tps = [float(m.group(1)) for m in re.finditer(r"\] thds: \d+ tps: ([\d.]+)", out or "")]
        errs = [float(m.group(1)) for m in re.finditer(r"err/s: ([\d.]+)", out or "")]
        lat = [(self.started + float(m.group(1)), float(m.group(2)))
               for m in re.finditer(r"\[ (\d+)s \].*?lat \(ms,\d+%\): ([\d.]+)", out or "")]
        errs_at = [(self.started + float(m.group(1)), float(m.group(2)))
                   for m in re.finditer(r"\[ (\d+)s \].*?err/s: ([\d.]+)", out or "")]
        return Result(int(sum(tps)), float(len(tps)), int(sum(errs)), lat, errs_at)
