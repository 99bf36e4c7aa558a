"""Run the real `migrator` CLI in a subprocess, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args: str, config=None, env=None, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "migrator"]
    if config is not None:
        cmd += ["--config", str(config)]
    cmd += list(args)
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def rq_env(config) -> dict[str, str]:
    """The environment for the plain ``rq`` command line on this fleet's Redis (its URL with the
    credentials in ``RQ_REDIS_URL``: the environment, never the command line ``ps`` shows)."""
    from migrator.fleet.redis_client import url_with_credentials

    return {**os.environ, "RQ_REDIS_URL": url_with_credentials(config)}
