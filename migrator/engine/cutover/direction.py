"""Which way a freeze moves the ranges: forward (a cutover) or back (a rollback).

The same freeze -> fence -> sentinel -> drain -> compare -> flip protocol
(:class:`~migrator.engine.cutover.run.CutoverRun`) serves both; a
:class:`Direction` says which host is fenced, which must hold every row, and
in which schema the target's tables live.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from migrator.engine.cutover.errors import CutoverError
from migrator.engine.migration import Spec
from migrator.engine.verify.run import VERIFY_NODE
from migrator.fleet.model import Host
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK


class StepView(Protocol):
    """What a direction's step may read of the attempt that runs it: its spec and its id."""

    spec: Spec
    attempt_id: str


@dataclass
class Direction:
    """Which way a freeze moves the ranges: forward (cutover) or back (rollback).

    ``source`` is the host that gets fenced (its tables become tombstones),
    ``target`` the host whose tables must hold every row; on the target the
    tables live in ``target_db_of(db)`` (the tombstone schema for a rollback).
    ``pre_flip``/``undo_pre_flip`` run under the fence just before the flip
    CAS, and to undo it if the flip does not land. ``label`` is its phase
    (``cutover``, ``rollback``): the name its errors carry.
    """

    label: str
    source: Host
    target: Host
    from_master: str
    to_master: str
    to_passive: str
    #: the source's pair partner, closed by a :class:`TriggerGate` (None: not fenced)
    passive: Host | None = None
    verify_node: str = VERIFY_NODE
    target_db_of: Callable[[str], str] = lambda db: db
    pre_flip: Callable[[StepView], None] | None = None
    undo_pre_flip: Callable[[StepView], None] | None = None


def forward(zk: ZK, spec: Spec) -> Direction:
    reg = HostRegistry(zk)
    return Direction("cutover", reg.get(spec.source_master), reg.get(spec.target_master),
                     spec.source_master, spec.target_master, spec.target_passive,
                     passive=passive_of(reg, spec.source_master, spec.source_passive, spec))


def passive_of(reg: HostRegistry, master: str, passive: str, spec: Spec) -> Host | None:
    """The pair partner to gate while ``master`` is fenced, or None when the option turns it off."""
    if not spec.options.fence_passive:
        return None
    host = reg.get(passive)
    if host.partner != master:
        raise CutoverError(f"{passive} is not registered as the pair partner of {master} (its partner is "
                           f"{host.partner}): fix the host registry before the cutover", phase="cutover")
    return host
