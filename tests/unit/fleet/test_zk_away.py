"""What counts as ZooKeeper going away (a step run again, a follower's retry), and the line a follower prints."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from migrator.errors import MigratorError, ZooKeeperUnavailable
from migrator.fleet.zk import Outage, went_away


def test_zookeeper_went_away_however_the_caller_wrapped_it():
    assert went_away(ConnectionLoss())
    assert went_away(SessionExpiredError())
    assert went_away(ZooKeeperUnavailable("cannot reach ZooKeeper"))
    try:
        try:
            raise ConnectionLoss()
        except ConnectionLoss as inner:
            raise MigratorError("copy of 2 table(s) from db00002.pins: ConnectionLoss") from inner
    except MigratorError as exc:
        assert went_away(exc)
    try:
        try:
            raise ValueError("a bug")
        except ValueError:
            raise ConnectionLoss() from None  # the record of the failure could not be written either
    except ConnectionLoss as exc:
        assert went_away(exc)
    try:
        try:
            raise ConnectionLoss()
        except ConnectionLoss:
            raise MigratorError("preflight failed: the target is not empty")  # noqa: B904 - the case itself
    except MigratorError as exc:
        assert not went_away(exc)  # the step's own verdict, raised while a lost connection was handled
    assert not went_away(NoNodeError())
    assert not went_away(MigratorError("shards already moving"))
    assert not went_away(None)


def test_the_reconnection_line_says_how_long_and_whether_the_session_held():
    assert Outage(21.4, True).text() == "ZooKeeper is back after 21s (the session had expired: went on with a new one)"
    assert Outage(3.0, False).text() == "ZooKeeper is back after 3s (the session held)"
    assert Outage(3.0, False).as_dict() == {"away_s": 3.0, "expired": False}

