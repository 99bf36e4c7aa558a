"""Fixtures of the engine's integration tests."""

from __future__ import annotations

import pytest

from migrator.fleet.mysql import connect


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
