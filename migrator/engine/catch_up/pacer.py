"""When a round goes to the lanes, and how large rounds are and how many lanes write them.

The tail (:mod:`.tailer`) collects row changes into a round while the lanes
(:mod:`.lanes`) write the previous one; :meth:`Pacer.cut` says when the round
being collected goes to the lanes, and :meth:`Pacer.after_round` adapts the
round size and the lane count from what each written round measured.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from migrator.engine.binlog.reader import part_bytes_from_env

#: a transaction this recent (binlog timestamp, seconds) means the tail is at the source's head
NEAR_HEAD_S = 2.0


class Cut(enum.Enum):
    """Why a round goes to the lanes now."""

    #: it reached ``round_rows``, or ``round_bytes`` (the only cut that waits for a round still being written)
    SIZE = "size"
    #: the tail is at the source's head with nothing more read: the tail's lag is one commit
    HEAD = "head"
    #: it has been collected for ``round_target_ms``
    AGE = "age"


@dataclass
class Pacer:
    """Round size and lane count from what the last rounds measured."""

    lanes: int = 4
    min_lanes: int = 1
    max_lanes: int = 8
    round_rows: int = 2000
    min_round_rows: int = 200
    max_round_rows: int = 50_000
    round_target_ms: float = 150.0
    #: a round holds changes read from at most this many bytes of row events (beyond one message of the
    #: reader): the memory bound of wide rows, whatever ``round_rows`` says; 0: the reader's part bound
    #: (``MIGRATOR_CATCHUP_PART_BYTES``, 32 MiB)
    round_bytes: int = 0
    adapt: bool = True
    _rates: dict[int, float] = field(default_factory=dict)
    _rounds_at_count: int = 0

    def __post_init__(self) -> None:
        if not self.round_bytes:
            self.round_bytes = part_bytes_from_env()

    def cut(self, rows: int, started: float, last_ts: int, busy: Callable[[], bool],
            more: Callable[[], bool], nbytes: int = 0) -> Cut | None:
        """Whether the round being collected (``rows`` row changes read from ``nbytes`` bytes of row
        events, its first collected at monotonic ``started``) goes to the lanes now; ``last_ts``: the
        binlog timestamp of the last event read,
        ``busy()``: a lane still writes the round in flight, ``more()``: the reader has more already.

        While the round in flight is being written, only a round at its size limit is cut (and then
        waits for the lanes): otherwise the tail keeps reading and collecting, so the reader never
        waits on a full pipe and the tail does not fall behind by a whole commit plus what piled up
        meanwhile. At the source's head (its last transaction from the last seconds) with nothing
        more read, the round goes at once: the tail's lag is one commit, not a round's collection
        time. In a backlog it goes once it is ``round_target_ms`` old: small rounds cost throughput.
        """
        if rows >= self.round_rows or nbytes >= self.round_bytes:
            return Cut.SIZE
        if busy():
            return None
        if last_ts and time.time() - last_ts < NEAR_HEAD_S and not more():
            return Cut.HEAD
        if time.monotonic() - started >= self.round_target_ms / 1000:
            return Cut.AGE
        return None

    def after_round(self, rows: int, write_ms: float, cut_by_size: bool) -> None:
        if not self.adapt or rows < self.min_round_rows:
            return
        if cut_by_size and write_ms < self.round_target_ms / 2:
            self.round_rows = min(self.max_round_rows, int(self.round_rows * 1.5))
        elif write_ms > self.round_target_ms * 2:
            self.round_rows = max(self.min_round_rows, int(self.round_rows / 1.5))
        rate = rows / max(write_ms, 0.1)
        old = self._rates.get(self.lanes)
        self._rates[self.lanes] = rate if old is None else 0.7 * old + 0.3 * rate
        self._rounds_at_count += 1
        if self._rounds_at_count < 4:
            return
        self._rounds_at_count = 0
        self.lanes = self._next_lanes()

    def _next_lanes(self) -> int:
        """A hill climb on the measured rate: to a neighbouring lane count that measured faster, else
        to an untried neighbour only in the direction that paid last (up first). A climb into every
        untried count regardless of what the last step measured ends at ``max_lanes`` wherever the
        best is (on a 2-core box 2 lanes beat 4 and the climb went to 8)."""
        rates, here = self._rates, self._rates[self.lanes]
        up, down = self.lanes + 1, self.lanes - 1
        up_ok, down_ok = up <= self.max_lanes, down >= self.min_lanes
        if up_ok and up in rates and rates[up] > here * 1.05:
            return up
        if down_ok and down in rates and rates[down] >= here * 0.98:
            return down
        if up_ok and up not in rates and (down not in rates or here > rates[down] * 1.05):
            return up
        if down_ok and down not in rates and (not up_ok or up in rates):
            return down
        return self.lanes


def pacer_from_env() -> Pacer:
    """Lane and round settings; ``MIGRATOR_CATCHUP_LANES`` fixes the lane count (no adapting)."""
    lanes = os.environ.get("MIGRATOR_CATCHUP_LANES")
    if lanes:
        return Pacer(lanes=max(1, int(lanes)), adapt=False)
    return Pacer()
