"""Job handlers the worker tests import by name (module:function)."""

from __future__ import annotations

import json
import time


class Retry(Exception):
    retry_delay_seconds = 0.0


def echo(job):
    return f"done {job.body}"


def slow(job):
    time.sleep(float(json.loads(job.body).get("sleep", 0)))
    return "slept"


def flaky(job):
    if job.attempt == 1:
        raise Retry("first try fails")
    return "second try"
