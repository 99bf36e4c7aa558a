"""Fixtures for the queue service tests: a QueueService on the per-test fleet."""

from __future__ import annotations

import pytest


@pytest.fixture
def qs(fleet):
    from migrator.queue.service import QueueService

    svc = QueueService(fleet.config, fleet.credentials, frozen_wait=3.0)
    try:
        yield svc
    finally:
        svc.close()
