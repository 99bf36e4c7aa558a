"""The suite's own guard: a test that leaves a process running errors at teardown, and the
process is killed (so it cannot load the box or hold ports for the tests after it)."""

from __future__ import annotations

from pathlib import Path

import psutil

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_a_leftover_process_fails_its_test_and_is_killed(pytester, monkeypatch):
    monkeypatch.setenv("MIGRATOR_TEST_LEAK_GRACE_S", "1")
    pytester.makeconftest(CONFTEST.read_text())
    pidfile = pytester.path / "pid"
    pytester.makepyfile(f"""
        import subprocess

        def test_leaves_a_sleeper():
            p = subprocess.Popen(["sleep", "300"])
            open({str(pidfile)!r}, "w").write(str(p.pid))

        def test_cleans_up():
            p = subprocess.Popen(["sleep", "300"])
            p.terminate()
            p.wait()
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*left processes running (killed now)*sleep 300*"])
    pid = int(pidfile.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
