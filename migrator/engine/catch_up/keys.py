"""The changed keys a tail collects for a compare, bounded in bytes.

Runs in the catch-up tail (:class:`~migrator.engine.catch_up.tailer.Tailer`, both apply paths) while the
cutover's re-check or verify's change window collects the primary keys of the rows it applies. A busy
window (a backfill of millions of rows) would hold every key in memory: past :data:`MAX_BYTES` the
largest table's set becomes the one :data:`~migrator.engine.catch_up.statements.WHOLE_TABLE` key (every
row of that table is compared), and so on until the rest fits. Exact for the compare either way: a whole
table holds every changed key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from migrator.engine.catch_up.statements import WHOLE_TABLE

#: what one key costs beyond its literals: the tuple, its strings' headers and the set's slot (bytes)
KEY_OVERHEAD = 120


def max_bytes_from_env() -> int:
    """``MIGRATOR_CHANGED_KEYS_BYTES`` as the process finds it, else 64 MiB."""
    raw = os.environ.get("MIGRATOR_CHANGED_KEYS_BYTES", "").strip()
    try:
        value = int(raw or 64 << 20)
    except ValueError:
        raise ValueError(f"MIGRATOR_CHANGED_KEYS_BYTES={raw!r} is not a number of bytes: set it to a whole "
                         "number (67108864 if unset)") from None
    return max(1, value)


def key_bytes(key: tuple[str, ...]) -> int:
    return KEY_OVERHEAD + sum(len(x) for x in key)


class ChangedKeys:
    """Changed primary keys per (schema, table), at most ``limit`` bytes of them in all."""

    def __init__(self, tables: Iterable[tuple[str, str]], limit: int | None = None):
        self.limit = max_bytes_from_env() if limit is None else limit
        self.sets: dict[tuple[str, str], set[tuple[str, ...]]] = {t: set() for t in tables}
        self._bytes: dict[tuple[str, str], int] = dict.fromkeys(self.sets, 0)
        self.total = 0

    def wants(self, table: tuple[str, str]) -> bool:
        return table in self.sets

    def add(self, table: tuple[str, str], keys: Iterable[tuple[str, ...]]) -> None:
        got = self.sets.get(table)
        if got is None or WHOLE_TABLE in got:
            return
        n = 0
        for key in keys:
            if key not in got:
                got.add(key)
                n += key_bytes(key)
        if n:
            self._bytes[table] += n
            self.total += n
            if self.total > self.limit:
                self._shrink()

    def whole(self, table: tuple[str, str]) -> None:
        """Every row of ``table`` is to be compared (a statement removed rows without row events)."""
        got = self.sets.get(table)
        if got is None:
            return
        self.total -= self._bytes[table]
        self._bytes[table] = 0
        got.clear()
        got.add(WHOLE_TABLE)

    def _shrink(self) -> None:
        while self.total > self.limit:
            table = max(self._bytes, key=self._bytes.__getitem__)
            if not self._bytes[table]:
                return
            self.whole(table)

    def copy(self) -> dict[tuple[str, str], set[tuple[str, ...]]]:
        return {k: set(v) for k, v in self.sets.items()}
