"""The keys a tail collects for a compare are bounded in bytes (no servers): past the bound the largest
table's set becomes "compare it whole", which still covers every key that changed."""

from __future__ import annotations

import pytest

from migrator.engine.catch_up.keys import KEY_OVERHEAD, ChangedKeys, key_bytes, max_bytes_from_env
from migrator.engine.catch_up.statements import WHOLE_TABLE

A, B = ("db00002", "pins"), ("db00002", "jobs")


def test_past_the_bound_the_largest_table_is_compared_whole_and_the_rest_kept():
    keys = ChangedKeys([A, B], limit=20 * (KEY_OVERHEAD + 3))
    keys.add(B, [("b1",)])
    keys.add(A, [(f"{i:03d}",) for i in range(19)])
    assert keys.sets[A] != {WHOLE_TABLE} and keys.total == 19 * key_bytes(("000",)) + key_bytes(("b1",))
    keys.add(A, [("999",), ("998",)])  # over the bound: A, the largest, is compared whole
    assert keys.sets[A] == {WHOLE_TABLE} and keys.sets[B] == {("b1",)}
    assert keys.total == key_bytes(("b1",))
    keys.add(A, [("1000",)])  # a whole table takes no more keys
    assert keys.copy()[A] == {WHOLE_TABLE}


def test_a_key_seen_again_costs_nothing_and_other_tables_are_not_collected():
    keys = ChangedKeys([A], limit=1000)
    keys.add(A, [("1",), ("1",)])
    keys.add(A, [("1",)])
    keys.add(B, [("2",)])
    assert keys.total == key_bytes(("1",)) and not keys.wants(B) and keys.copy() == {A: {("1",)}}


def test_the_bound_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("MIGRATOR_CHANGED_KEYS_BYTES", "1234")
    assert max_bytes_from_env() == 1234 and ChangedKeys([A]).limit == 1234
    monkeypatch.setenv("MIGRATOR_CHANGED_KEYS_BYTES", "lots")
    with pytest.raises(ValueError, match="MIGRATOR_CHANGED_KEYS_BYTES"):
        max_bytes_from_env()
