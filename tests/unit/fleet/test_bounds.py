"""The checks an operator's input passes before anything connects (migrator.fleet.bounds), and that the command
line and playbooks refuse the same values with them."""

from __future__ import annotations

import time

import pytest

from migrator.engine.migration import new_id
from migrator.fleet import bounds
from migrator.fleet.ids import MAX_SHARD


def test_shards_within_the_id_format():
    assert bounds.shards("4-7") == [4, 5, 6, 7]
    assert bounds.shards("4-5, 9,4") == [4, 5, 9]
    assert bounds.shards("0-2,1-3") == [0, 1, 2, 3]
    assert bounds.shards(f"{MAX_SHARD}") == [MAX_SHARD]
    assert bounds.shards("00012") == [12]
    for bad, why in (("7-4", "empty"), ("x", "expected shards"), ("", "no shards"), ("4-", "expected shards"),
                     ("-3", "expected shards"), ("1-2-3", "expected shards"), (f"{MAX_SHARD + 1}", "65535"),
                     ("0-99999999999999999999", "65535"), ("9" * 5000, "65535")):
        with pytest.raises(ValueError, match=why):
            bounds.shards(bad)


def test_shards_are_refused_by_their_text_not_by_building_a_set():
    t0 = time.monotonic()
    with pytest.raises(ValueError):
        bounds.shards("0-99999999999999999999")
    with pytest.raises(ValueError):
        bounds.shards("0-65535," * 50_000 + "x")  # 400 KB of text
    # the whole id space, written many times over, is still 65,536 shards
    assert len(bounds.shards(",".join(["0-65535"] * 2000))) == MAX_SHARD + 1
    assert time.monotonic() - t0 < 5  # generous: milliseconds on an idle box


def test_migration_ids_are_exactly_the_ones_migrator_makes():
    from migrator.ops.batched.handover import batch_id
    from migrator.ops.rebalance.record import migration_id

    made = [new_id(), "rb-20261122-155024-7e9460", migration_id("rb-20261122-155024-7e9460", 3),
            migration_id("rb-20261122-155024-7e9460", 1234), batch_id(new_id(), 0),
            batch_id(migration_id("rb-20261122-155024-7e9460", 3), 12)]
    for mid in made:
        assert bounds.migration_id(mid) == mid
    for bad in ("../../etc", "m-1", "m-nope", "", "m-20261122-155024-7e9460/x", "m-20261122-155024-7E9460",
                "x-20261122-155024-7e9460", "m-20261122-155024-7e9460-m001", "rb-20261122-155024-7e9460-m1",
                " m-20261122-155024-7e9460", "m-20261122-155024-7e9460-b1", None, 5):
        with pytest.raises(ValueError, match="not a migration id"):
            bounds.migration_id(bad)


def test_run_ids_host_and_queue_names():
    assert bounds.run_id("run-20261122-155024-7e9460")
    for bad in ("../x", "run-1", "m-20261122-155024-7e9460"):
        with pytest.raises(ValueError):
            bounds.run_id(bad)
    assert bounds.host_name("MySQL001A") == "MySQL001A"
    for bad in ("", "1abc", "a b", "a/b", "a" * 64, "../etc"):
        with pytest.raises(ValueError, match="not a valid host name"):
            bounds.host_name(bad)
    assert bounds.queue_name("emails_2") == "emails_2"
    for bad in ("", "q-1", "q.x", "q" * 41, "../q", "é"):
        with pytest.raises(ValueError, match="not a valid queue name"):
            bounds.queue_name(bad)


def test_numbers_counts_and_durations_are_never_negative():
    assert bounds.number(0) == 0 and bounds.number("1.5", minimum=1) == 1.5
    for bad, kw in ((-1, {}), (0, {"exclusive": True}), ("nan", {}), ("inf", {}), (True, {}), ("x", {})):
        with pytest.raises(ValueError):
            bounds.number(bad, **kw)
    assert bounds.count("3") == 3 and bounds.count(0) == 0
    for bad in (-2, "-2", 1.5, True, "x"):
        with pytest.raises(ValueError):
            bounds.count(bad)
    assert bounds.duration("500ms") == 0.5 and bounds.duration("2h") == 7200 and bounds.duration(30) == 30
    for bad in (-30, "-30", "-5s", "5 parsecs", float("nan")):
        with pytest.raises(ValueError):
            bounds.duration(bad)


def test_queue_server_urls():
    assert bounds.http_url("http://127.0.0.1:8000")
    for bad in ("notaurl", "ftp://x", "http://", "http://h:99999"):
        with pytest.raises(ValueError, match="URL"):
            bounds.http_url(bad)


def test_the_queue_service_and_the_engine_check_queue_names_alike():
    from migrator.engine import plan
    from migrator.queue import model

    assert model.QUEUE_NAME_RE is bounds.QUEUE_NAME_RE is plan.QUEUE_NAME_RE


def test_the_store_never_makes_a_path_of_a_bad_id():
    from migrator.engine.migration import MigrationStore
    from migrator.errors import InvalidIdError

    store = MigrationStore.__new__(MigrationStore)
    store.base = "/migrator/migrations"
    assert store.node_path("m-20261122-155024-7e9460", "spec").endswith("/m-20261122-155024-7e9460/spec")
    for bad in ("../../etc", "a/b", "", ".."):
        with pytest.raises(InvalidIdError):
            store.node_path(bad)


# -- the command line's callbacks: one line naming the flag, before any config is read ---------------

@pytest.mark.parametrize(("check", "value", "needle"), [
    (bounds.shards, "0-99999999999999999999", "--x 0-99999999999999999999"),
    (bounds.migration_id, "../../etc", "--x ../../etc: not a migration id"),
    (bounds.host_name, "a b", "--x a b: not a valid host name"),
])
def test_cli_callbacks_name_the_flag(check, value, needle):
    from migrator.cli.inputs import checked
    from migrator.cli.options import UsageProblem

    cb = checked(check, "--x")
    with pytest.raises(UsageProblem) as info:
        cb(value)
    assert needle in str(info.value) and info.value.exit_code == 2
    assert cb(None) is None


def test_cli_job_states():
    from migrator.cli.inputs import job_state

    for ok in ("NEW", "ipr", "pending", "FAIL", "2"):
        assert job_state(ok) == ok
    for bad in ("BOGUS", "", "9"):
        with pytest.raises(ValueError, match="NEW, IPR, OK, FAIL"):
            job_state(bad)


def test_shard_runs_write_what_the_shards_parser_reads():
    from migrator.fleet.model import MovingSet, shard_runs

    assert shard_runs([(0, 3), (7, 7)]) == "0-3,7"
    assert shard_runs([]) == ""
    runs = MovingSet(shards=(9, 4, 5, 6, 7)).ranges
    assert bounds.shards(shard_runs(runs)) == [4, 5, 6, 7, 9]
