"""The code says *passive*; stored records, the shard map and JSON output keep their keys."""

import json

from migrator.engine.migration import Options, Spec
from migrator.fleet.model import WIRE_NAMES, ShardMap, ShardRange, wire_keys

OLD_SPEC = {"id": "m1", "kind": "shards", "source_master": "MySQL001A", "source_slave": "MySQL001B",
            "target_master": "MySQL003A", "target_slave": "MySQL003B", "shards": [2, 3],
            "options": {"max_standby_lag_s": 7.5, "copy_workers": 2}}


def test_a_stored_spec_reads_into_the_codes_names_and_is_written_back_under_its_stored_keys():
    spec = Spec.model_validate_json(json.dumps(OLD_SPEC))
    assert (spec.source_passive, spec.target_passive) == ("MySQL001B", "MySQL003B")
    assert spec.options.max_passive_lag_s == 7.5
    back = json.loads(spec.model_dump_json())
    assert back["source_slave"] == "MySQL001B" and back["target_slave"] == "MySQL003B"
    assert back["options"]["max_standby_lag_s"] == 7.5
    assert not {"source_passive", "target_passive"} & set(back)
    assert "max_passive_lag_s" not in back["options"]


def test_code_builds_a_spec_and_options_by_the_codes_names():
    spec = Spec(id="m1", source_master="A1", source_passive="A2", target_master="B1", target_passive="B2",
                shards=(1,), options=Options(max_passive_lag_s=3.0))
    assert spec.model_dump()["source_slave"] == "A2"
    assert Options(**{"max_standby_lag_s": 4.0}).max_passive_lag_s == 4.0


def test_options_merged_from_a_dump_and_config_keys_validate():
    """``migrator set`` merges the stored options (config keys) with the changes (config keys)."""
    opts = Options(**{**Options().model_dump(), "max_standby_lag_s": 9.5})
    assert opts.max_passive_lag_s == 9.5


def test_the_shard_map_keeps_the_seeds_slave_key():
    r = ShardRange(lo=0, hi=3, master="MySQL001A", passive="MySQL001B")
    assert r.to_wire() == {"range": [0, 3], "master": "MySQL001A", "slave": "MySQL001B"}
    assert ShardRange.from_wire(r.to_wire()) == r
    smap = ShardMap(num_shards=4, ranges=(r,))
    assert json.loads(smap.to_json())["ranges"][0]["slave"] == "MySQL001B"


def test_every_wire_name_is_translated_both_ways():
    assert len(set(WIRE_NAMES.values())) == len(WIRE_NAMES)
    assert wire_keys({"passive_lag": ["x"], "dropped": []}) == {"standby_lag": ["x"], "dropped": []}
