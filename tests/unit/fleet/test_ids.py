import pytest

from migrator.errors import InvalidIdError
from migrator.fleet import ids


def test_seed_worked_example():
    # Pinterest's pin 241294492511762325 lives in shard 3429, type 1 (pin), row 7075733.
    oid = ids.decode(241294492511762325)
    assert (oid.shard, oid.type, oid.local) == (3429, 1, 7075733)
    assert ids.encode(3429, 1, 7075733) == 241294492511762325
    assert oid.value == 241294492511762325


@pytest.mark.parametrize("shard,type_id,local", [(0, 0, 0), (65535, 1023, (1 << 36) - 1), (1, 2, 3), (4095, 9, 12345)])
def test_round_trip(shard, type_id, local):
    assert ids.decode(ids.encode(shard, type_id, local)) == (shard, type_id, local)


def test_reserved_bits_zero():
    top = ids.encode(65535, 1023, (1 << 36) - 1)
    assert top < (1 << 62)
    with pytest.raises(InvalidIdError, match="reserved"):
        ids.decode(1 << 62)
    with pytest.raises(InvalidIdError, match="reserved"):
        ids.decode(1 << 63)


@pytest.mark.parametrize("args", [(65536, 0, 0), (0, 1024, 0), (0, 0, 1 << 36), (-1, 0, 0), (0, -1, 0), (0, 0, -1)])
def test_out_of_range_parts_rejected(args):
    with pytest.raises(InvalidIdError, match="out of range"):
        ids.encode(*args)


def test_non_integers_rejected():
    with pytest.raises(InvalidIdError):
        ids.encode("1", 0, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        ids.encode(True, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        ids.decode(-5)


def test_parse_id():
    assert ids.parse_id("241294492511762325") == 241294492511762325
    assert ids.parse_id("0x10") == 16
    with pytest.raises(InvalidIdError, match="not an integer"):
        ids.parse_id("pin-42")


def test_mod_shard_is_md5_mod_n():
    import hashlib

    expect = int(hashlib.md5(b"1.2.3.4").hexdigest(), 16) % 4096
    assert ids.mod_shard("1.2.3.4", 4096) == expect
    assert ids.mod_shard(b"1.2.3.4", 4096) == expect
    assert 0 <= ids.mod_shard("user@example.com", 16) < 16
    with pytest.raises(InvalidIdError):
        ids.mod_shard("x", 0)


def test_shard_db_names():
    assert ids.shard_db(3429) == "db03429"
    assert ids.db_shard("db03429") == 3429
    with pytest.raises(InvalidIdError):
        ids.db_shard("db3429")
    with pytest.raises(InvalidIdError):
        ids.db_shard("mysql")
