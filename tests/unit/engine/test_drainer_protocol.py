"""Every drainer offers every verb of :class:`~migrator.engine.verify.drainers.Drainer`, and the engine calls
them directly: no caller probes a drainer for a verb (``getattr``/``hasattr``) and falls back when it is missing.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import migrator.engine
from migrator.engine.catch_up.tailer import Tailer
from migrator.engine.rollback import ReverseDrainer
from migrator.engine.verify.drainers import CatchUpDrainer, CheckpointWaiter, Drainer, NoTail, TailDrainer

ENGINE = Path(migrator.engine.__file__).parent
MEMBERS = sorted(n for n in vars(Drainer) if not n.startswith("_"))


def _drainer_classes() -> set[type]:
    """The classes in migrator.engine with a ``drain_to``: the drainers (the catch-up Tailer drains too, but
    is the tail a drainer owns, never handed to a caller as one)."""
    found: set[type] = set()
    for mod in pkgutil.walk_packages(migrator.engine.__path__, "migrator.engine."):
        module = importlib.import_module(mod.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "drain_to") and cls not in (Drainer, Tailer):
                found.add(cls)
    return found


def _test_doubles() -> list[type]:
    from tests.integration.engine.test_cutover_refusals import SlowDrainUnderFence
    from tests.unit.engine.test_verify_waits import SlowTail

    return [SlowTail, SlowDrainUnderFence]


def test_the_protocol_names_every_verb_its_callers_use():
    assert MEMBERS == sorted(["drain_to", "progress", "open", "warm", "follow", "following", "reached",
                              "stop_following", "position", "collect", "collected", "close"])


def test_the_drainers_are_found():
    assert {CheckpointWaiter, TailDrainer, CatchUpDrainer, ReverseDrainer} <= _drainer_classes()


def _shape(obj: object) -> object:
    """A member's kind, and for a method its parameters (names, kinds, defaults; not the annotations)."""
    if isinstance(obj, property):
        return "property"
    return [(p.name, p.kind, p.default) for p in inspect.signature(obj).parameters.values()]


@pytest.mark.parametrize("cls", sorted(_drainer_classes() | set(_test_doubles()), key=lambda c: c.__qualname__),
                         ids=lambda c: c.__qualname__)
def test_a_drainer_implements_every_verb_of_the_protocol(cls):
    for name in MEMBERS:
        assert hasattr(cls, name), f"{cls.__qualname__} has no {name}"
        theirs = inspect.getattr_static(cls, name)
        ours = inspect.getattr_static(Drainer, name)
        assert theirs is not ours, f"{cls.__qualname__}.{name} is the protocol's own (no implementation)"
        assert _shape(theirs) == _shape(ours), f"{cls.__qualname__}.{name} differs from Drainer.{name}"


def test_no_tail_leaves_only_the_drain_to_its_subclasses():
    assert not hasattr(NoTail, "drain_to")
    assert set(MEMBERS) - {"drain_to"} <= set(dir(NoTail))


#: a probe on a drainer: ``getattr(drainer, "warm", None)``, ``hasattr(run.drainer, "close")``
PROBE = re.compile(r"\b(?:getattr|hasattr)\(\s*[\w.]*drainer\b", re.IGNORECASE)


def test_no_caller_probes_a_drainer_for_a_verb():
    probes = [f"{path.relative_to(ENGINE.parent.parent)}:{n}: {line.strip()}"
              for path in sorted(ENGINE.rglob("*.py"))
              for n, line in enumerate(path.read_text().splitlines(), 1) if PROBE.search(line)]
    assert probes == []


def test_the_probe_pattern_finds_a_probe():
    assert PROBE.search('    warm = getattr(run.drainer, "warm", None)')
    assert PROBE.search('if own_drainer and hasattr(drainer, "close"):')
    assert not PROBE.search('read.events = int(getattr(stats, "events", 0) or 0)')
