"""The rebalance record's scheduling rules (no servers)."""

from __future__ import annotations

from migrator.ops.rebalance import record


def rec(moves, **kw):
    base = {"id": "rb-x", "phase": "running", "paused": False, "max_concurrent": None}
    base.update(kw)
    base["moves"] = [{"index": i, "source": s, "target": t, "state": st, "bytes": 10, "migration": f"m{i}"}
                     for i, (s, t, st) in enumerate(moves)]
    return base


def test_a_pair_is_in_one_running_move_at_a_time():
    r = rec([("A", "E", "waiting"), ("B", "E", "waiting"), ("C", "F", "waiting"), ("A", "G", "waiting")])
    assert [m["index"] for m in record.startable(r)] == [0, 2]
    r["moves"][0]["state"] = "running"
    assert [m["index"] for m in record.startable(r)] == [2]
    r["moves"][0]["state"] = "done"
    assert [m["index"] for m in record.startable(r)] == [1, 2, 3]


def test_the_cap_pause_and_failed_moves_hold_starts():
    r = rec([("A", "E", "waiting"), ("B", "F", "waiting"), ("C", "G", "waiting")], max_concurrent=2)
    assert len(record.startable(r)) == 2
    r["paused"] = True
    assert record.startable(r) == []
    r = rec([("A", "E", "failed"), ("A", "F", "waiting"), ("B", "G", "waiting")])
    assert [m["index"] for m in record.startable(r)] == [2]  # a failed move's pairs stay busy


def test_phases():
    r = rec([("A", "E", "done"), ("B", "F", "done")])
    record.finish_phase(r)
    assert r["phase"] == "done"
    r = rec([("A", "E", "failed"), ("A", "F", "waiting")])
    record.finish_phase(r)
    assert r["phase"] == "stopped"
    s = record.summary(rec([("A", "E", "done"), ("B", "F", "running"), ("C", "G", "waiting")]))
    assert (s["done"], s["running"], s["waiting"], s["bytes"], s["bytes_done"]) == (1, 1, 1, 30, 10)


def test_a_stopped_rebalance_exits_with_its_stopped_moves_cause():
    """`rebalance --yes` and a batched `split --yes` exit with the code the summary carries: the stop's cause
    (6 not converging, 4 unreachable, 5 config) as a single migration's follower does, else 3."""
    r = rec([("A", "E", "done"), ("B", "F", "failed"), ("C", "G", "failed")])
    r["moves"][2]["exit_code"] = 6
    assert record.summary(r)["exit_code"] == 6
    r["moves"][2]["exit_code"] = None
    assert record.summary(r)["exit_code"] == 3


def test_the_rebalance_of_a_move_or_a_batch():
    assert record.rebalance_of("rb-20261207-115424-e9d5b2-m000") == "rb-20261207-115424-e9d5b2"
    assert record.rebalance_of("rb-20261207-115424-e9d5b2-m000-b003") == "rb-20261207-115424-e9d5b2"
    assert record.rebalance_of("rb-20261207-115424-e9d5b2") is None
    assert record.rebalance_of("m-20261207-115424-e9d5b2") is None


def test_a_rebalance_id_is_told_from_the_ids_of_its_moves_and_batches():
    """``migrator status rb-...-m000-b002`` shows that batch, not "no rebalance" (its id extends the record's)."""
    from migrator.ops.rebalance.command import is_rebalance_id

    rid = "rb-20261207-114925-50c5b0"
    assert is_rebalance_id(rid)
    assert not is_rebalance_id(f"{rid}-m000") and not is_rebalance_id(f"{rid}-m000-b002")
    assert not is_rebalance_id("m-20261207-114925-50c5b0")


def test_a_batched_split_whose_pipeline_stopped_stops_though_its_open_batch_is_not_done():
    """The batched move failed (its pipeline gave up on its open batch's cutover): that batch, still converged,
    waits for the move's resume, so the split stops (its follower exits) instead of running for ever."""
    r = rec([("A", "E", "failed"), ("A", "E", "done"), ("A", "E", "running")])
    r["moves"][0]["batched"] = True
    for m in r["moves"][1:]:
        m["batch_of"] = 0
    record.finish_phase(r)
    assert r["phase"] == "stopped"
    r = rec([("A", "E", "running"), ("A", "E", "running")])  # the batched move still runs: so does its batch
    r["moves"][0]["batched"], r["moves"][1]["batch_of"] = True, 0
    record.finish_phase(r)
    assert r["phase"] == "running"
