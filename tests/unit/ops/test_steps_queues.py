"""Queue names of migration steps and the queues a worker serves."""

import pytest

from migrator.engine.migration import Spec
from migrator.ops import steps
from tests.unit.engine.test_plan_arithmetic import _hosts

FLEET = _hosts(("MySQL001A", "MySQL001B"), ("MySQL002A", "MySQL002B"), ("MySQL003A", "MySQL003B"))


def test_a_migration_goes_to_its_source_pairs_queue_whichever_member_is_master():
    spec = Spec(id="m1", source_master="MySQL002B", source_passive="MySQL002A", target_master="MySQL003A",
                target_passive="MySQL003B", shards=(1, 2))
    assert steps.migration_queue(spec) == "migrator.pair.MySQL002A" == steps.pair_queue("MySQL002A")


def test_plain_worker_serves_the_general_queue_and_every_pair():
    assert steps.worker_queues(FLEET, None) == [steps.QUEUE, "migrator.pair.MySQL001A", "migrator.pair.MySQL002A",
                                                "migrator.pair.MySQL003A"]


def test_pairs_worker_serves_only_its_pairs_named_by_either_member():
    assert steps.worker_queues(FLEET, ["MySQL003B", "MySQL001A", "MySQL003A"]) == [
        "migrator.pair.MySQL003A", "migrator.pair.MySQL001A"]


def test_unknown_pair_is_refused_with_the_known_ones():
    with pytest.raises(steps.UnknownPair, match="MySQL009A.*MySQL001A, MySQL002A, MySQL003A"):
        steps.worker_queues(FLEET, ["MySQL009A"])
