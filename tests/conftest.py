"""Shared test fixtures.

Integration tests run against one real sandbox fleet per test session (MariaDB
pairs, ZooKeeper, Redis started from Debian packages by
:class:`migrator.sandbox.Sandbox`). Each test gets its own ZooKeeper root, a
flushed Redis database and freshly seeded shard databases, and drops what it
made. Set ``MIGRATOR_TEST_SANDBOX=DIR`` to reuse a running sandbox across
sessions while developing.

``MIGRATOR_TEST_GTID_LAYOUT`` (``per-server``, the default, or ``shared``) and
``MIGRATOR_TEST_PARALLEL_REPLICATION`` (applier threads per pair link, default
0) choose the GTID layout of every sandbox the session starts: ``scripts/test``
runs the cutover, fence, lease, cleanup and rollback tests, their fault cells
and the nemesis seeds once more under the shared layout with parallel
replication (MariaDB's defaults, as production fleets run them).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

SEED = int(os.environ.get("MIGRATOR_TEST_SEED", random.randrange(1 << 30)))
#: the GTID layout of every sandbox this session starts (:data:`migrator.sandbox.GTID_LAYOUTS`)
GTID_LAYOUT = os.environ.get("MIGRATOR_TEST_GTID_LAYOUT", "per-server")
PARALLEL_THREADS = int(os.environ.get("MIGRATOR_TEST_PARALLEL_REPLICATION", "0") or 0)


def layout_params() -> dict:
    """The sandbox parameters of this session's GTID layout (for every ``Sandbox.up`` a test makes)."""
    return {"gtid_layout": GTID_LAYOUT, "parallel_threads": PARALLEL_THREADS}
#: why the shared sandbox was rebuilt during this session (shown in the summary)
REBUILDS: list[str] = []


#: test processes still running after a test ended (killed, and the test errors at teardown)
LEAK_GRACE_S = float(os.environ.get("MIGRATOR_TEST_LEAK_GRACE_S", "15"))


def _descendants() -> dict[int, str]:
    import psutil

    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out[p.pid] = " ".join(p.cmdline())[:200]
        except psutil.Error:
            pass
    return out


#: sandboxes a module-scoped fixture keeps for several tests (their servers are not a test's leftovers)
LIVE_SANDBOXES: list = []


@contextmanager
def own_sandbox(prefix: str, **params):
    """A sandbox of a test module's own (started with ``params``), kept for all its tests and listed in
    :data:`LIVE_SANDBOXES` meanwhile; stopped and removed at the end."""
    from migrator.sandbox import Sandbox, find_base_port

    d = Path(tempfile.mkdtemp(prefix=prefix))
    sb = Sandbox(d / "sandbox")
    try:
        sb.up(**{**layout_params(), **params}, base_port=find_base_port(100), log=lambda *_: None)
        LIVE_SANDBOXES.append(sb)  # its servers (pairs added by a test too) outlive each test, by design
        yield sb
    finally:
        if sb in LIVE_SANDBOXES:
            LIVE_SANDBOXES.remove(sb)
        sb.down()
        shutil.rmtree(d, ignore_errors=True)


def _sandbox_pids(request) -> set[int]:
    """The servers of the shared sandbox (started by the session, or rebuilt inside a test's setup)
    and of the sandboxes in :data:`LIVE_SANDBOXES`, as their state files say now."""
    sandboxes = list(LIVE_SANDBOXES)
    if "sandbox" in request.fixturenames:
        sandboxes.append(request.getfixturevalue("sandbox"))
    out: set[int] = set()
    for sb in sandboxes:
        st = getattr(sb, "state", None)
        out |= {p.pid for p in st.procs.values() if p.pid} if st else set()
    return out


@pytest.fixture(autouse=True)
def ends_its_processes(request):
    """Every test ends the processes it started: checked after it (and its fixtures) finished.
    A leftover is killed and reported, so it cannot load the box or hold ports for later tests."""
    import psutil

    before = set(_descendants())
    yield
    keep = before | _sandbox_pids(request)
    deadline = time.monotonic() + LEAK_GRACE_S  # a process told to stop may take a moment
    while True:
        left = {pid: cmd for pid, cmd in _descendants().items() if pid not in keep}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    if left:
        pytest.fail("the test left processes running (killed now): "
                    + "; ".join(f"{pid}: {cmd}" for pid, cmd in left.items()), pytrace=False)


def pytest_report_header(config):  # noqa: ARG001
    par = f", {PARALLEL_THREADS} parallel applier threads per pair link" if PARALLEL_THREADS else ""
    return [f"migrator test seed: {SEED} (replay with MIGRATOR_TEST_SEED={SEED})",
            f"sandbox GTID layout: {GTID_LAYOUT}{par} (MIGRATOR_TEST_GTID_LAYOUT, MIGRATOR_TEST_PARALLEL_REPLICATION)"]


def pytest_terminal_summary(terminalreporter):
    for line in REBUILDS:
        terminalreporter.write_line(f"sandbox rebuilt: {line}")


def ensure_healthy(sb) -> None:
    """Rebuild the shared sandbox when a server died or a pair stopped replicating.

    A test that breaks the fleet (on purpose or not) must not make every later
    test fail: the next test finds out here, says why once, and gets a new fleet.
    """
    problems = sb.problems()
    if problems:
        rebuild(sb, "; ".join(problems))


def rebuild(sb, reason: str) -> None:
    REBUILDS.append(reason)
    print(f"\nsandbox in {sb.dir} is broken ({reason}); rebuilding it")
    st = sb.state
    params = dict(pairs=st.pairs, spare_pairs=st.spare_pairs, shards=st.shards, rows=st.rows,
                  base_port=st.base_port, gtid_layout=st.gtid_layout, parallel_threads=st.parallel_threads)
    sb.down(purge=True)
    sb.up(**params, log=lambda *_: None)


#: the tests whose promises depend on how the fleet numbers its transactions: ``scripts/test`` runs them
#: again (``-m every_layout``) with MariaDB's default of one GTID domain shared by every server and
#: parallel replication on the pair links. Entries are node-id prefixes: the cutover, passive-fence,
#: lease, cleanup, rollback and tail-position tests, the fault cells of the cutover and of the
#: infrastructure, and the nemesis seed that lags a link inside the source pair.
EVERY_LAYOUT = (
    "tests/integration/engine/test_cutover.py", "tests/integration/engine/test_passive_fence.py",
    "tests/integration/engine/test_cutover_lease.py", "tests/integration/engine/test_cutover_faults.py",
    "tests/integration/engine/test_cleanup.py", "tests/integration/engine/test_rollback.py",
    "tests/integration/engine/test_catch_up.py", "tests/faults/test_infrastructure_faults.py",
    "tests/integration/engine/test_fast_apply.py",
    "tests/integration/engine/test_cutover_queue_partition.py",
    "tests/integration/engine/test_handover.py",
    "tests/integration/engine/test_handover_applier.py",
    "tests/integration/engine/test_big_transactions.py::test_wide_rows_are_applied_within_the_byte_bound",
    "tests/integration/engine/test_client_waits.py::test_a_report_on_a_member_never_makes_a_client_wait",
    "tests/integration/test_nemesis.py::test_split_survives_the_seeds_faults[2]",
    "tests/integration/test_nemesis.py::test_the_fixed_seeds_cover_every_fault",
)
#: left out of the second run to keep CI within its time: each is a variant whose layout-dependent path
#: another test of the list already takes there (the same waits, the same settle), and each runs in the
#: first run
EVERY_LAYOUT_BUT = (
    # every step of the freeze killed in turn (97 s); the steps that wait for a peer are killed by
    # test_killed_after_the_flip_is_finished and the rollback's flip-back kills
    "tests/integration/engine/test_cutover_lease.py::test_killed_at_each_step_before_the_flip",
    # ZooKeeper paused at the flip: [lost_answer] runs (the outcome nobody saw), not the two others
    "tests/integration/engine/test_cutover_faults.py::test_zookeeper_paused_at_the_flip_keeps_the_fences_closed_until_settled[answers]",
    "tests/integration/engine/test_cutover_faults.py::test_zookeeper_paused_at_the_flip_keeps_the_fences_closed_until_settled[no_answer]",
    "tests/integration/engine/test_cutover_faults.py::test_zookeeper_paused_at_the_flip_back_keeps_the_fences_closed_until_settled[answers]",
    "tests/integration/engine/test_cutover_faults.py::test_zookeeper_paused_at_the_flip_back_keeps_the_fences_closed_until_settled[no_answer]",
    # the copy restarted under a target restart: no peer wait on that path
    "tests/faults/test_infrastructure_faults.py::test_target_restarted_during_copy",
    # an abort racing a hand-over: which spec the abort reads, no peer wait on that path
    "tests/integration/engine/test_handover.py::test_an_abort_that_races_a_hand_over_leaves_the_new_batch_its_copy",
)


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    root = Path(__file__).resolve().parent.parent
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        if path.startswith(("tests/integration", "tests/faults")):
            item.add_marker(pytest.mark.integration)
        nodeid = path + item.nodeid[item.nodeid.index("::"):] if "::" in item.nodeid else path
        if nodeid.startswith(EVERY_LAYOUT) and not nodeid.startswith(EVERY_LAYOUT_BUT):
            item.add_marker(pytest.mark.every_layout)


@pytest.fixture(scope="session")
def sandbox():
    from migrator.sandbox import Sandbox, find_base_port

    reuse = os.environ.get("MIGRATOR_TEST_SANDBOX")
    if reuse:
        sb = Sandbox(reuse)
        if not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), **layout_params())
        yield sb
        return
    d = Path(tempfile.mkdtemp(prefix="migrator-test-"))
    sb = Sandbox(d / "sandbox")
    try:
        sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None,
              **layout_params())
        yield sb
    finally:
        sb.down()
        if os.environ.get("MIGRATOR_KEEP_SANDBOX"):
            print(f"sandbox kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fleet(sandbox, tmp_path, request):
    """A fresh ZooKeeper root with hosts and the initial map; shard dbs reseeded."""
    from tests.fleet import open_fleet, reset_shards

    rows = getattr(request, "param", None) or 20
    ensure_healthy(sandbox)
    try:
        reset_shards(sandbox, rows)
    except Exception as exc:  # noqa: BLE001 - a fleet that cannot even be reset is rebuilt once
        rebuild(sandbox, f"resetting the shard databases failed: {exc}")
        reset_shards(sandbox, rows)
    with open_fleet(sandbox, tmp_path) as f:
        yield f


@pytest.fixture
def zk_root(sandbox, tmp_path):
    """Only a fresh ZooKeeper root and config file (no MySQL reset)."""
    ensure_healthy(sandbox)
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    root = f"/t{uuid.uuid4().hex[:12]}"
    cfg = sandbox.config().with_root(root)
    cfg.credentials.file = str(sandbox.secrets_file)
    cfg_path = tmp_path / "migrator.toml"
    cfg_path.write_text(config_mod.dump(cfg))
    cfg = config_mod.load(cfg_path)
    creds = config_mod.load_credentials(cfg)
    zk = zk_mod.connect(cfg, creds)
    yield cfg, cfg_path, creds, zk
    try:
        zk.client.delete(root, recursive=True)
    except Exception:
        pass
    zk.close()
