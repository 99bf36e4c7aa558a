"""Run the `migrator` CLI: the real script in a subprocess, as an operator would (:func:`run_cli`), or its
entry point in the test's process (:func:`run_cli_here`).

A subprocess spends 1.4-2.6 s of CPU importing the engine before it parses a word: the tests whose subject
is what a command answers (its lines, its exit code, what it changed) run it here, through the same
``migrator.cli.main.run`` and its one error handler; the tests about the process itself (the script as a
shell runs it, its signals, a command that follows for a while) run the script.
"""

from __future__ import annotations

import contextlib
import io
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


def run_cli_here(*args: str, config=None, env=None, timeout: float | None = None) -> subprocess.CompletedProcess:  # noqa: ARG001
    """:func:`run_cli` in this process: ``migrator.cli.main.run`` with ``env`` set meanwhile and stdout and
    stderr captured (the same entry point and handler as the ``migrator`` script; stdin is no terminal)."""
    from migrator.cli.main import run

    argv = [*(["--config", str(config)] if config is not None else []), *args]
    out, err = io.StringIO(), io.StringIO()
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = run(argv)
            except SystemExit as exc:  # what the script would exit with
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["migrator", *argv], code, out.getvalue(), err.getvalue())


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
