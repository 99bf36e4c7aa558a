import pytest

from migrator.errors import ShardMapError, UnknownHost
from migrator.fleet.model import Host, ShardMap, ShardRange, even_layout, pair_names

SEED_MAP = [
    {"range": [0, 511], "master": "MySQL001A", "slave": "MySQL001B"},
    {"range": [512, 1023], "master": "MySQL002A", "slave": "MySQL002B"},
]


def hosts(*pairs):
    out = {}
    for i, (a, b) in enumerate(pairs):
        out[a] = Host(name=a, port=4000 + 2 * i, partner=b)
        out[b] = Host(name=b, port=4001 + 2 * i, partner=a)
    return out


def test_seed_format_list_is_accepted():
    smap = ShardMap.from_wire(SEED_MAP)
    assert smap.num_shards == 1024
    assert smap.master_of(0) == "MySQL001A"
    assert smap.master_of(600) == "MySQL002A"
    smap.validate_hosts(hosts(("MySQL001A", "MySQL001B"), ("MySQL002A", "MySQL002B")))


def test_wire_round_trip_keeps_frozen():
    smap = ShardMap.from_wire({"num_shards": 1024, "ranges": SEED_MAP, "frozen": [[256, 511]]})
    again = ShardMap.from_json(smap.to_json())
    assert again.frozen == ((256, 511),)
    assert again.is_frozen(300) and not again.is_frozen(100)


def test_overlap_rejected():
    bad = [dict(SEED_MAP[0]), {"range": [500, 1023], "master": "MySQL002A", "slave": "MySQL002B"}]
    with pytest.raises(ShardMapError, match="overlap"):
        ShardMap.from_wire(bad)


def test_gap_rejected():
    bad = [dict(SEED_MAP[0]), {"range": [600, 1023], "master": "MySQL002A", "slave": "MySQL002B"}]
    with pytest.raises(ShardMapError, match="512..599 are not covered"):
        ShardMap.from_wire(bad)


def test_must_start_at_zero_and_reach_n():
    with pytest.raises(ShardMapError, match="0..0 are not covered"):
        ShardMap.from_wire([{"range": [1, 3], "master": "a1", "slave": "b1"}])
    with pytest.raises(ShardMapError, match="4..7 are not covered"):
        ShardMap.from_wire({"num_shards": 8, "ranges": [{"range": [0, 3], "master": "a1", "slave": "b1"}]})


@pytest.mark.parametrize("item,msg", [
    ({"range": [5, 2], "master": "A", "slave": "B"}, "empty"),
    ({"range": [0], "master": "A", "slave": "B"}, "two integers"),
    ({"range": [0, 3], "master": "A", "slave": "A"}, "both master and slave"),
    ({"range": [0, 3], "master": "A; DROP", "slave": "B"}, "not valid"),
    ({"range": [0, 3], "master": "A", "slave": "B", "extra": 1}, "unknown keys"),
    ("nope", "must be an object"),
])
def test_bad_ranges(item, msg):
    with pytest.raises(ShardMapError, match=msg):
        ShardMap.from_wire([item])


def test_malformed_json():
    with pytest.raises(ShardMapError, match="not valid JSON"):
        ShardMap.from_json("{not json")
    with pytest.raises(ShardMapError, match="non-empty"):
        ShardMap.from_wire({"ranges": []})


def test_unknown_host_and_not_a_pair():
    smap = ShardMap.from_wire(SEED_MAP)
    with pytest.raises(UnknownHost, match="MySQL002A"):
        smap.validate_hosts(hosts(("MySQL001A", "MySQL001B")))
    crossed = hosts(("MySQL001A", "MySQL002B"), ("MySQL002A", "MySQL001B"))
    with pytest.raises(ShardMapError, match="not a master-master pair"):
        smap.validate_hosts(crossed)


def test_reassign_splits_and_merges():
    smap = ShardMap.from_wire(SEED_MAP)
    moved = smap.reassign(256, 511, "MySQL003A", "MySQL003B")
    assert [(r.lo, r.hi, r.master) for r in moved] == [
        (0, 255, "MySQL001A"), (256, 511, "MySQL003A"), (512, 1023, "MySQL002A")]
    back = moved.reassign(256, 511, "MySQL001A", "MySQL001B")
    assert [(r.lo, r.hi, r.master) for r in back] == [(0, 511, "MySQL001A"), (512, 1023, "MySQL002A")]


def test_freeze_edits_are_pure():
    smap = ShardMap.from_wire(SEED_MAP)
    f = smap.with_frozen(256, 511)
    assert smap.frozen == () and f.frozen == ((256, 511),)
    assert f.without_frozen(256, 511).frozen == ()
    with pytest.raises(ShardMapError, match="outside"):
        smap.with_frozen(1000, 2000)


def test_even_layout_and_names():
    assert pair_names(1) == ("MySQL001A", "MySQL001B")
    smap = even_layout(16, [pair_names(1), pair_names(2), pair_names(3)])
    assert [r.count for r in smap] == [6, 5, 5]
    assert smap.shards_on("MySQL002A") == list(range(6, 11))
    with pytest.raises(ShardMapError):
        even_layout(1, [pair_names(1), pair_names(2)])


def test_range_helpers():
    r = ShardRange(lo=4, hi=7, master="A", passive="B")
    assert r.count == 4 and r.contains(7) and not r.contains(8)
    assert r.overlaps(7, 9) and not r.overlaps(8, 9)
