"""What an operator's input may be: the checks a value passes before anything connects.

Runs wherever a value from outside comes in: the command line (typer callbacks and the commands of
:mod:`migrator.cli`), playbooks (:mod:`migrator.ops.playbook`: parameters, ``--set`` values, step
keys) and the plan functions of the engine. One function per kind of value, so the CLI and a
playbook refuse the same things with the same words. Each is pure and fast: it never reads the
fleet, and it bounds its work by the size of its text (``--shards 0-99999999999999999999`` is
refused by its digits, it never builds a set). A refusal is a :class:`ValueError` whose text
says what is accepted; each caller adds where the value came from (a flag, a playbook line).
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import urlsplit

from migrator.fleet.ids import MAX_SHARD
from migrator.fleet.model import HOST_NAME_RE

#: the digits of the largest shard number (65535)
_SHARD_DIGITS = len(str(MAX_SHARD))
#: a shard list longer than this is not a shard list someone typed (every shard one by one is ~330 KB)
MAX_SHARDS_TEXT = 400_000
_SHARD_PART_RE = re.compile(r"(\d+)(?:-(\d+))?")

#: the migration ids migrator makes: ``m-20261122-155024-7e9460`` (:func:`migrator.engine.migration.new_id`),
#: a rebalance's or batched split's ``rb-20261122-155024-7e9460`` and its moves' ``rb-...-m003``
MIGRATION_ID_RE = re.compile(r"(?:m-\d{8}-\d{6}-[0-9a-f]{6}|rb-\d{8}-\d{6}-[0-9a-f]{6}(?:-m\d{3,6})?)(?:-b\d{3,6})?")
#: a playbook run's id: ``run-20261122-155024-7e9460``
RUN_ID_RE = re.compile(r"run-\d{8}-\d{6}-[0-9a-f]{6}")
#: a queue of the queue service: its name goes into table names (``q_<name>_p<n>``)
QUEUE_NAME_RE = re.compile(r"\w{1,40}", re.ASCII)
#: a duration: a number of seconds, or with a unit
DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def shards(text: Any) -> list[int]:
    """``"4-7,9"`` -> ``[4, 5, 6, 7, 9]``; every shard within 0..65535 (the id format's 16 bits), every range
    written low-high. Refused by its text alone, before any range is expanded."""
    s = str(text).replace(" ", "")
    if len(s) > MAX_SHARDS_TEXT:
        raise ValueError(f"a shard list of {len(s)} characters is not one: give ranges such as 4-7,9")
    runs: list[tuple[int, int]] = []
    parts = [p for p in s.split(",") if p]
    if not parts:
        raise ValueError("no shards given: give shards such as 4-7 or 1,3,5-6")
    for part in parts:
        m = _SHARD_PART_RE.fullmatch(part)
        if not m:
            raise ValueError("expected shards such as 4-7 or 1,3,5-6 (numbers and low-high ranges)")
        for digits in m.groups():
            if digits is not None and (len(digits.lstrip("0")) > _SHARD_DIGITS or int(digits) > MAX_SHARD):
                raise ValueError(f"shard {digits if len(digits) <= 12 else digits[:8] + '...'} is beyond the id "
                                 f"format's last shard, {MAX_SHARD}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if lo > hi:
            raise ValueError(f"shard range {part} is empty: write it low-high, e.g. {hi}-{lo}")
        runs.append((lo, hi))
    out: list[int] = []
    for lo, hi in sorted(runs):  # merged first: the work is bounded by the 65,536 shards, not by the text
        start = max(lo, out[-1] + 1) if out else lo
        out.extend(range(start, hi + 1))
    return out


def shard_text(text: Any) -> str:
    """A shard list checked by :func:`shards`, kept as the text given (a playbook's ``shards`` type)."""
    shards(text)
    return str(text).replace(" ", "")


def migration_id(text: Any) -> str:
    """A migration id as migrator makes them (``m-YYYYMMDD-HHMMSS-xxxxxx``, ``rb-...``, a rebalance's move
    ``rb-...-mNNN``, a batch of a batched migration ``...-bNNN``): nothing else reaches a ZooKeeper path."""
    if not isinstance(text, str) or not MIGRATION_ID_RE.fullmatch(text):
        raise ValueError("not a migration id: they look like m-20261122-155024-7e9460 or rb-20261122-155024-"
                         "7e9460 (`migrator status` lists them)")
    return text


def run_id(text: Any) -> str:
    """A playbook run's id (``run-YYYYMMDD-HHMMSS-xxxxxx``)."""
    if not isinstance(text, str) or not RUN_ID_RE.fullmatch(text):
        raise ValueError("not a playbook run id: they look like run-20261122-155024-7e9460 (`migrator playbook "
                         "list` lists them)")
    return text


def host_name(text: Any) -> str:
    """A host name of the registry: letters, digits, '.', '_' or '-', starting with a letter, at most 63."""
    if not isinstance(text, str) or not HOST_NAME_RE.fullmatch(text):
        raise ValueError("not a valid host name: use letters, digits, '.', '_' or '-', starting with a letter, at "
                         "most 63, e.g. MySQL001A")
    return text


def queue_name(text: Any) -> str:
    """A queue's name: 1-40 letters, digits or underscores."""
    if not isinstance(text, str) or not QUEUE_NAME_RE.fullmatch(text):
        raise ValueError("not a valid queue name: use 1-40 letters, digits or underscores")
    return text


def number(value: Any, *, minimum: float = 0.0, exclusive: bool = False) -> float:
    """A finite number at least ``minimum`` (above it when ``exclusive``)."""
    if isinstance(value, bool):
        raise ValueError("expected a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not math.isfinite(v):
        raise ValueError("expected a finite number")
    if v < minimum or (exclusive and v == minimum):
        raise ValueError(f"must be {'greater than' if exclusive else 'at least'} {minimum:g}")
    return v


def count(value: Any, *, minimum: int = 0) -> int:
    """An integer at least ``minimum`` (a count: retries, passes, workers)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,18}\s*", value):
        value = int(value)
    if not isinstance(value, int):
        raise ValueError("expected an integer")
    if value < minimum:
        raise ValueError(f"must be at least {minimum}")
    return value


def duration(value: Any) -> float:
    """``500ms``, ``30s``, ``5m``, ``2h`` or a number of seconds -> seconds, never negative."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return number(value)
    m = DURATION_RE.fullmatch(str(value).strip())
    if not m:
        raise ValueError("expected a duration such as 500ms, 30s, 5m or 2h (never negative)")
    return number(float(m.group(1)) * _UNITS[m.group(2)])


def http_url(text: Any) -> str:
    """A queue server's address: ``http://HOST:PORT`` or ``https://...``."""
    try:
        parts = urlsplit(str(text))
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected a queue server's URL such as http://127.0.0.1:8000")
    del port
    return str(text)
