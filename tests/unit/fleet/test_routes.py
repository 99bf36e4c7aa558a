"""Table routes in the shard map and the moving set a cutover freezes and flips through."""

import pytest

from migrator.errors import ShardMapError
from migrator.fleet.model import MovingSet, ShardMap

A, B, C = ("MySQL001A", "MySQL001B"), ("MySQL002A", "MySQL002B"), ("MySQL003A", "MySQL003B")
JOBS = ("jobs_hq_p5", "jobs_hq_p5_dedupe")


def fleet_map() -> ShardMap:
    return ShardMap.from_wire({"num_shards": 8, "ranges": [
        {"range": [0, 3], "master": A[0], "slave": A[1]}, {"range": [4, 7], "master": B[0], "slave": B[1]}]})


def test_a_map_without_routes_keeps_its_wire_format():
    smap = fleet_map()
    assert "routes" not in smap.to_wire()
    assert smap.master_of_table(5, JOBS[0]) == B[0] and not smap.is_table_frozen(5, JOBS[0])


def test_a_partition_move_freezes_and_flips_its_route_only():
    moving = MovingSet((5,), JOBS)
    smap = fleet_map()
    frozen = moving.freeze(smap)
    # the route is frozen, pointing where the tables are; the range and the shard's other tables are not
    assert frozen.is_table_frozen(5, JOBS[1]) and not frozen.is_frozen(5) and not frozen.is_table_frozen(5, "pins")
    assert frozen.frozen == () and moving.served_by(frozen, B[0]) and moving.all_frozen(frozen)
    flipped = moving.flip(frozen, *C)
    assert moving.served_by(flipped, C[0]) and not moving.all_frozen(flipped)
    assert flipped.master_of(5) == B[0] and flipped.master_of_table(5, "pins") == B[0]
    assert flipped.pair_of_table(5, JOBS[0]) == C
    again = ShardMap.from_json(flipped.to_json())
    assert again.routes == flipped.routes and again.to_wire()["routes"][0]["tables"] == list(JOBS)
    # an undo before the flip drops the route (unfrozen on its range's pair), as if nothing happened
    assert moving.unfreeze(frozen).routes == ()
    # moving back home: the route is dropped, the range serves the tables again
    back = moving.flip(moving.freeze(flipped), *B)
    assert back.routes == () and moving.served_by(back, B[0])
    # an unfreeze of a flipped route leaves it as it is
    assert moving.unfreeze(flipped) == flipped


def test_a_shard_move_leaves_a_route_where_it_is():
    smap = MovingSet((5,), JOBS).flip(fleet_map(), *C)
    shards = MovingSet((4, 5))
    frozen = shards.freeze(smap)
    assert frozen.is_frozen(5) and not frozen.is_table_frozen(5, JOBS[0])  # routed tables keep serving
    moved = shards.flip(frozen, *A)
    assert moved.master_of(5) == A[0] and moved.master_of_table(5, JOBS[0]) == C[0]
    assert [rt.tables for rt in moved.routes_of(5)] == [JOBS]
    assert shards.image(frozen) == ((B[0], B[1], True), (B[0], B[1], True))


@pytest.mark.parametrize("routes,msg", [
    ([{"shard": 9, "tables": ["t"], "master": C[0], "slave": C[1]}], "outside"),
    ([{"shard": 1, "tables": ["t"], "master": C[0], "slave": C[1]},
      {"shard": 1, "tables": ["t", "u"], "master": B[0], "slave": B[1]}], "two routes"),
    ([{"shard": 1, "tables": [], "master": C[0], "slave": C[1]}], "no table"),
    ([{"shard": 1, "tables": ["t"], "master": C[0], "slave": C[0]}], "both master and slave"),
    ([{"shard": 1, "tables": ["t"], "master": C[0], "slave": C[1], "x": 1}], "unknown keys"),
    ([{"shard": 1, "tables": "t", "master": C[0], "slave": C[1]}], "list of table names"),
])
def test_bad_routes_are_refused_with_the_reason(routes, msg):
    wire = fleet_map().to_wire()
    wire["routes"] = routes
    with pytest.raises(ShardMapError, match=msg):
        ShardMap.from_wire(wire)


def test_a_route_is_changed_whole_or_not_at_all():
    smap = MovingSet((5,), JOBS).flip(fleet_map(), *C)
    with pytest.raises(ShardMapError, match="not one route"):
        smap.with_route(5, (JOBS[0],), *A, frozen=False)
    with pytest.raises(ShardMapError, match="exactly one shard"):
        MovingSet((4, 5), JOBS)
