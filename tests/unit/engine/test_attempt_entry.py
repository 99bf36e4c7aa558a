"""An attempt's entry is written to ZooKeeper as the same dict, key for key and in order, as it always was."""

from __future__ import annotations

from migrator.engine.cutover.record import AttemptRecord

KEYS = ["at", "outcome", "freeze_ms", "steps_ms", "refresh_rounds", "predicted", "drained", "released",
        "waiters_ended", "before_freeze_ms", "lock_waits"]


def test_the_entry_is_the_record_at_that_moment():
    rec = AttemptRecord(steps={"freeze_cas": 1.5}, before_freeze={"prepare": 3.0}, waiters_ended=2,
                        released={"db.t": 4.0})
    entry = rec.entry("x" * 600, {"h1": {"tries": 1}})
    rec.steps["fence"] = 9.0  # later steps do not change an entry taken before
    d = entry.as_dict()
    assert list(d) == KEYS
    assert d["outcome"] == "x" * 500 and d["freeze_ms"] is None and d["steps_ms"] == {"freeze_cas": 1.5}
    assert d["before_freeze_ms"] == {"prepare": 3.0} and d["waiters_ended"] == 2
    assert d["lock_waits"] == {"h1": {"tries": 1}}


def test_blockers_are_written_last_and_only_when_known():
    entry = AttemptRecord().entry("aborted: x", {})
    entry.lock_waits["h2"] = {"tries": 3}
    entry.blockers = [{"id": 7}]
    d = entry.as_dict()
    assert list(d) == [*KEYS, "blockers"] and d["blockers"] == [{"id": 7}] and d["lock_waits"] == {"h2": {"tries": 3}}
