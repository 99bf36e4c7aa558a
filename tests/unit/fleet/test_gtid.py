"""GTID positions: parsing, ordering and per-domain combination."""

from __future__ import annotations

import pytest

from migrator.fleet.gtid import (
    Gtid,
    GtidPos,
    GtidState,
    InvalidGtid,
    compare,
    earliest,
    format_pos,
    format_state,
    latest,
    parse_gtids,
    reaches,
    state_of,
)


def test_parse_and_render_sorted_by_domain():
    pos = GtidPos.parse("2-2-7, 0-1-100")
    assert str(pos) == "0-1-100,2-2-7"
    assert pos[2] == Gtid(2, 2, 7)
    assert GtidPos.parse("") == GtidPos() and len(GtidPos.parse(None)) == 0
    assert Gtid.parse("3-10-99") == Gtid(3, 10, 99) and str(Gtid(3, 10, 99)) == "3-10-99"


@pytest.mark.parametrize("bad", ["1-2", "a-b-c", "1-2-3-4", "1--3"])
def test_parse_rejects_malformed(bad):
    with pytest.raises(InvalidGtid):
        GtidPos.parse(bad)


def test_two_gtids_of_one_domain_are_rejected():
    with pytest.raises(InvalidGtid):
        GtidPos.parse("1-1-5,1-2-6")


def test_contains_counts_every_domain():
    pos = GtidPos.parse("1-1-100,2-2-7")
    assert pos.contains("1-1-100")
    assert pos.contains("1-1-50,2-2-7")
    assert not pos.contains("1-1-101")
    assert not pos.contains("1-1-10,2-2-8")
    assert not pos.contains("3-3-1")  # a domain we have not seen at all
    assert pos.contains(Gtid(2, 2, 3)) and not pos.contains(Gtid(2, 2, 8))
    assert pos.contains("")


def test_compare_is_a_partial_order():
    assert compare("1-1-5", "1-1-6") == -1
    assert compare("1-1-6,2-2-1", "1-1-6") == 1
    assert compare("1-1-6", "1-1-6") == 0
    assert compare("1-1-7,2-2-1", "1-1-6,2-2-2") is None
    assert GtidPos.parse("1-1-5") <= GtidPos.parse("1-1-5,2-2-1")


def test_earliest_takes_min_per_domain_and_drops_domains_some_position_lacks():
    e = earliest(["1-1-100,2-2-7", "1-1-80,2-2-9,3-3-4", "1-1-90,2-2-8"])
    assert str(e) == "1-1-80,2-2-7"  # domain 3 is missing from the first: replay it from its start
    with pytest.raises(InvalidGtid):
        earliest([])


def test_latest_is_the_union():
    assert str(latest(["1-1-100,2-2-7", "1-1-80,3-3-4"])) == "1-1-100,2-2-7,3-3-4"


def test_with_gtid_and_behind():
    pos = GtidPos.parse("1-1-10")
    nxt = pos.with_gtid(Gtid(2, 2, 1)).with_gtid(Gtid(1, 1, 11))
    assert str(nxt) == "1-1-11,2-2-1" and str(pos) == "1-1-10"
    assert pos.behind("1-1-15,2-2-3") == 8
    assert GtidPos.parse("1-1-20").behind("1-1-15") == 0
    assert hash(GtidPos.parse("1-1-1,2-2-2")) == hash(GtidPos.parse("2-2-2,1-1-1"))


def test_the_light_forms_render_and_reach_as_the_values_do():
    text = "0-2-9,0-1-12,1-1-14"
    state = state_of(text, "0-1-3")
    assert format_state(state) == str(GtidState.parse(text)) == "0-1-12,0-2-9,1-1-14"
    assert GtidState.copy_of(state) == GtidState.parse(text)
    assert format_pos(GtidPos.parse("2-2-7,0-1-100")) == "0-1-100,2-2-7"
    assert reaches(state, parse_gtids("0-1-12,0-2-9")) and not reaches(state, parse_gtids("0-2-10"))
    assert GtidState.parse(text).reaches("0-1-12,0-2-9") and not GtidState.parse(text).reaches(Gtid(1, 2, 1))


def test_set_back_before_a_transaction():
    pos = GtidPos.parse("0-1-12,1-1-14")
    assert str(pos.before(Gtid(0, 2, 13), Gtid(0, 1, 12))) == "0-1-12,1-1-14"
    assert str(pos.before(Gtid(1, 1, 14), None)) == "0-1-12"
    state = GtidState.parse("0-1-12,0-2-9")
    assert str(state.before(Gtid(0, 2, 9), 8)) == "0-1-12,0-2-8"
    assert str(state.before(Gtid(0, 2, 9), None)) == "0-1-12" and str(state) == "0-1-12,0-2-9"
