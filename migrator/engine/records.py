"""Typed views of the JSON records a migration keeps in ZooKeeper.

Each model reads a record in the shape the engine writes it (:class:`MigrationStore`'s progress
nodes, the ``history`` and ``stopped`` of its state): keys it does not name are kept as they are
(``extra="allow"``), a key that is missing or ``null`` reads as the field's default. :meth:`Record.dump`
gives back the keys the record was read with (plus those set since), so a record read and written
again keeps its wire format, and so does the JSON of the commands that show it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, model_validator

#: a JSON number: read as it was written (an int stays an int), so a record written back is unchanged
Number = int | float


class Record(BaseModel):
    """A JSON record: unnamed keys kept, missing or ``null`` keys defaulted."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    #: the keys read as ``null`` that stand for a default: :meth:`dump` writes them back as ``null``
    _nulls: tuple[str, ...] = PrivateAttr(default=())
    #: the keys in the order they were read: :meth:`dump` keeps it (new keys follow)
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _null_is_default(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        # a stored null reads as the default, as ``int(rows or 0)`` did
        nulls: tuple[str, ...] = ()
        order: tuple[str, ...] = ()
        if isinstance(data, dict):
            order = tuple(data)
            defaulted = {f.alias or name for name, f in cls.model_fields.items() if f.default is not None
                         or f.default_factory is not None}
            nulls = tuple(k for k, v in data.items() if v is None and k in defaulted)
            data = {k: v for k, v in data.items() if k not in nulls}
        rec = handler(data)
        if nulls:
            rec._nulls = nulls
        if order:
            rec._order = order
        return rec

    @classmethod
    def parse(cls, data: dict[str, Any] | Record | None) -> Any:
        """The record of ``data`` (an empty one for None; a record of this type as it is)."""
        return data if isinstance(data, cls) else cls.model_validate(data or {})

    @classmethod
    def parse_list(cls, items: list[Any] | None) -> list[Any]:
        return [cls.parse(d) for d in items or []]

    def dump(self) -> dict[str, Any]:
        """The record as JSON data, with the keys it was read or made with."""
        out = self.model_dump(by_alias=True, exclude_unset=True)
        for name, f in type(self).model_fields.items():  # nested records keep their own key order
            value = getattr(self, name)
            if name not in self.model_fields_set:
                continue
            if isinstance(value, Record):
                out[f.alias or name] = value.dump()
            elif isinstance(value, list) and value and all(isinstance(v, Record) for v in value):
                out[f.alias or name] = [v.dump() for v in value]
        for k in self._nulls:
            out.setdefault(k, None)
        rank = {k: i for i, k in enumerate(self._order)}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


class TableProgress(Record):
    """Copy progress of one table: ``<migration>/copy/<db>.<table>``."""

    db: str = ""
    table: str = ""
    last_key: Any = None
    done: bool = False
    rows: int = 0
    bytes: int = 0
    est_rows: int = 0
    est_bytes: int = 0
    chunks: int = 0
    chunk_rows: int | None = None
    copy_s: Number = 0.0
    wall_s: Number = 0.0
    read_s: Number = 0.0
    load_s: Number = 0.0
    throttled_s: Number = 0.0
    prepare_s: Number = 0.0
    started_at: Number | None = None
    finished_at: Number | None = None
    #: the source position seen before the first chunk: catch-up replays from the earliest
    start_gtid: str | None = None
    start_state: str | None = None

    @property
    def rows_left(self) -> int:
        return max(0, self.est_rows - self.rows)


class CatchupPass(Record):
    """One row of a pass table (the ``catchup`` node's, a rollback's reverse passes)."""

    number: int | None = None
    started_at: Number | None = None
    events: int = 0
    duration_s: Number = 0.0
    apply_rate: Number = 0.0
    write_rate: Number = 0.0
    lag_s: Number = 0.0
    predicted_freeze_ms: Number = 0.0
    converged: bool = False


class CatchupNode(Record):
    """The ``catchup`` checkpoint: the last GTID applied on the target, and the pass table."""

    gtid: str | None = None
    state: str | None = None
    head_at: Number | None = None
    not_converging: dict[str, Any] | None = None
    passes: list[CatchupPass] = Field(default_factory=list)


class Attempt(Record):
    """One cutover attempt as recorded (refused, undone and flipped ones alike)."""

    at: Number = 0.0
    outcome: str | None = None
    freeze_ms: Number | None = None
    steps_ms: dict[str, Any] = Field(default_factory=dict)
    predicted: dict[str, Any] = Field(default_factory=dict)
    died_at: str | None = None
    #: ms the undo of an undone freeze took
    undo_ms: Number | None = None


class NextTry(Record):
    """When the pipeline tries the cutover next."""

    at: Number = 0.0
    attempt: int | None = None
    until: Number | None = None


class AuditDetails(Record):
    """The details of a shard map audit entry that a flip (or a flip back) wrote."""

    migration: str | None = None
    direction: str = "cutover"
    fence_gtid: str | None = None
    target_gtid: str | None = None
    target_state: str | None = None


class AuditEntry(Record):
    """One entry of the shard map's audit log (each change of the map: its epochs, who, why)."""

    when: Number | None = None
    who: str | None = None
    reason: str | None = None
    old_epoch: int | None = None
    new_epoch: int | None = None
    details: AuditDetails = Field(default_factory=AuditDetails)


class AttemptsNode(Record):
    """The ``cutover_attempts`` node (and a rollback's passes node, which holds attempts too)."""

    attempts: list[Attempt] = Field(default_factory=list)
    next_try: NextTry | None = None
    passes: list[CatchupPass] = Field(default_factory=list)


class CutoverHolder(Record):
    """Who holds a cutover (or a rollback's flip back) and where it was last heard of."""

    holder: str | None = None
    label: str | None = None
    attempt: Any = None
    #: the last step of the freeze it finished
    step: str | None = None
    #: the step before the freeze it was in
    before_freeze: str | None = None

    @property
    def where(self) -> str:
        """The step it was in, as an attempt's ``died_at`` says it."""
        return self.step or self.before_freeze or "prepare"


class FreezeSample(Record):
    """A flipped freeze kept for the next migrations' predictions (``stats/freeze``'s ``recent``)."""

    fixed_ms: Number = 0.0
    fence: str | None = None
    tables: int = 0
    drain_ms: Number | None = None
    drain_sampled_ms: Number | None = None
    #: the flip CAS and the release: what follows the watchdog's last chance
    after_claim_ms: Number | None = None


class UndoSample(Record):
    """An undone freeze kept for the next freezes' watchdogs (``stats/freeze_undo``'s ``recent``)."""

    undo_ms: Number | None = None
    fence: str | None = None
    tables: int = 0


class SuspectChunk(Record):
    """A chunk a full check could not settle (its rows changed while it was read): checked again under
    the fence. ``lo``/``hi``: its key bounds as the copy checkpoint encodes them (None: open)."""

    table: str = ""
    lo: Any = None
    hi: Any = None


class VerifyNode(Record):
    """The last full check: the source position it started from and what it found."""

    verified_gtid: str | None = None
    suspect_chunks: list[SuspectChunk] = Field(default_factory=list)
    mismatched: int | None = None


class FlipNode(Record):
    """What a flip (or a flip back) recorded: the fence position and the target's."""

    target_gtid: str | None = None
    target_state: str | None = None
    fence_gtid: str | None = None
    freeze_ms: Number | None = None
    steps_ms: dict[str, Any] = Field(default_factory=dict)


class HandoverNode(Record):
    """A batch's ``handover`` node: the seconds of each pipeline step around each of its cutover attempts."""

    attempts: list[dict[str, Any]] = Field(default_factory=list)


class PhaseChange(Record):
    """One entry of a state's ``history``."""

    who: str | None = None
    when: Number | None = None
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    error: str | None = None
    #: the component that made the change, when it named itself as ``who``
    component: str | None = None


class Stopped(Record):
    """Why the pipeline gave up on a step, and what to do next (a state's ``stopped``)."""

    step: str | None = None
    reason: str | None = None
    next: str | None = None
    at: Number | None = None
    exit_code: int | None = None
