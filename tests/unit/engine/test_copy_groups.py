from migrator.engine.copy import TableResult
from migrator.engine.copy_groups import plan_groups, remaining


def _p(db, t, nbytes, done=False):
    return {"db": db, "table": t, "est_bytes": nbytes, "done": done}


def test_large_tables_go_alone_and_small_ones_share_a_few_groups():
    progress = [_p("db1", "big", 100 << 20), _p("db1", "done", 10, done=True)]
    progress += [_p(f"db{i % 7}", f"t{i}", 16384) for i in range(1500)]
    groups = plan_groups(progress, workers=4, group_bytes=16 << 20)
    assert groups[0] == [("db1", "big")]
    small = groups[1:]
    # one group per worker left, plus what the byte cap needs (1500 x 16 KiB = 23.4 MiB -> 2 groups)
    assert len(small) == 3
    flat = [t for g in small for t in g]
    assert len(flat) == 1500 and len(set(flat)) == 1500 and ("db1", "done") not in flat
    assert max(len(g) for g in small) - min(len(g) for g in small) <= 1


def test_few_small_tables_are_not_split_further_than_one_per_group():
    groups = plan_groups([_p("d", "a", 1), _p("d", "b", 1)], workers=8)
    assert sorted(groups) == [[("d", "a")], [("d", "b")]]
    assert plan_groups([], workers=4) == []


def test_remaining_keeps_the_table_stopped_in_and_those_not_reached():
    tables = [("d", "a"), ("d", "b"), ("d", "c"), ("d", "e")]
    results = [TableResult("d", "a", "done"), TableResult("d", "b", "superseded"), TableResult("d", "c", "sliced")]
    assert remaining(tables, results) == [("d", "c"), ("d", "e")]
