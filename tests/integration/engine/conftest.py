"""Fixtures of the engine's integration tests."""

from __future__ import annotations

import pytest

from migrator.fleet.mysql import connect


@pytest.fixture(autouse=True)
def close_drainers():
    """The drainers prepare_converged handed out end with the test (their reader processes too)."""
    from .cutover_setup import OPEN_DRAINERS

    yield
    while OPEN_DRAINERS:
        try:
            OPEN_DRAINERS.pop().close()
        except Exception:
            pass


@pytest.fixture
def conns(fleet):
    """Open migrator-identity connections by host name; closed at the end."""
    opened = []

    def open_(name: str):
        c = connect(fleet.hosts[name], fleet.credentials)
        opened.append(c)
        return c

    yield open_
    for c in opened:
        try:
            c.close()
        except Exception:
            pass
