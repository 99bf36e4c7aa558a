"""The tailer's shape: an apply call's rounds and counts live on one object per call (``_Apply``), never passed
from method to method, and the tailer's public verbs keep their signatures. Pure logic, no servers."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from migrator.engine.catch_up import tailer as tailer_mod
from migrator.engine.catch_up.tailer import Tailer, TailStats, _Apply, _Rounds
from migrator.fleet.gtid import GtidPos, GtidState

SOURCE = Path(tailer_mod.__file__)


def _functions() -> list[tuple[str, ast.FunctionDef]]:
    tree = ast.parse(SOURCE.read_text())
    found: list[tuple[str, ast.FunctionDef]] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        found += [(f"{cls.name}.{f.name}", f) for f in cls.body if isinstance(f, ast.FunctionDef)]
    found += [(f.name, f) for f in tree.body if isinstance(f, ast.FunctionDef)]
    return found


def _params(f: ast.FunctionDef) -> set[str]:
    a = f.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def test_no_method_passes_an_apply_calls_rounds_or_stats_around():
    offenders = [name for name, f in _functions() if _params(f) & {"rounds", "stats"}]
    assert offenders == []


def test_the_apply_object_carries_the_loop():
    methods = {name for name, _ in _functions()}
    for name in ("run", "_done", "_await_reader", "_passed", "_take", "_maybe_cut", "_barrier", "_submit", "settle"):
        assert f"_Apply.{name}" in methods
    for name in ("_loop", "_done", "_await_reader", "_passed", "_take", "_maybe_cut", "_barrier", "_submit",
                 "_settle"):
        assert f"Tailer.{name}" not in methods


def _shape(cls: type, name: str) -> object:
    obj = inspect.getattr_static(cls, name)
    if isinstance(obj, property):
        return "property"
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(obj).parameters.values()]


E = inspect.Parameter.empty
PUBLIC = {
    "apply_until": [("self", "POSITIONAL_OR_KEYWORD", E), ("until", "POSITIONAL_OR_KEYWORD", E),
                    ("timeout_s", "KEYWORD_ONLY", None), ("stop", "KEYWORD_ONLY", None),
                    ("save", "KEYWORD_ONLY", True)],
    "drain_to": [("self", "POSITIONAL_OR_KEYWORD", E), ("target_gtid", "POSITIONAL_OR_KEYWORD", E),
                 ("timeout_s", "POSITIONAL_OR_KEYWORD", E), ("save", "KEYWORD_ONLY", True)],
    "warm": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "reached": [("self", "POSITIONAL_OR_KEYWORD", E), ("target", "POSITIONAL_OR_KEYWORD", E)],
    "collect": [("self", "POSITIONAL_OR_KEYWORD", E), ("tables", "POSITIONAL_OR_KEYWORD", E)],
    "collected": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "applied_state": "property",
    "source_head": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "close": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "wake": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "__enter__": [("self", "POSITIONAL_OR_KEYWORD", E)],
    "__exit__": [("self", "POSITIONAL_OR_KEYWORD", E), ("exc", "VAR_POSITIONAL", E)],
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_tailers_public_verbs_keep_their_signatures(name):
    assert _shape(Tailer, name) == PUBLIC[name]


def test_tail_stats_fields_are_unchanged():
    assert [f.name for f in dataclasses.fields(TailStats)] == [
        "start", "end", "reached", "events", "transactions", "bytes", "statements", "rounds", "duration_s",
        "first_ts", "last_ts", "lanes", "read_s", "save_s", "submit_s", "sent_s", "retries", "retry_cause",
        "reached_s", "stopped_s", "connects", "last_round_ms", "path", "fast_failure", "fast_replays"]


# -- the GTID targets: one conversion ---------------------------------------------------------------------

def test_a_state_target_is_taken_as_it_is():
    st = GtidState.parse("0-1-5,0-2-9")
    assert Tailer._wanted(st) is st


@pytest.mark.parametrize("target", ["0-1-5", "0-1-5,1-1-3", "0-1-5,0-2-9", "", GtidPos.parse("0-1-5,1-2-3")])
def test_positions_and_texts_become_their_gtids(target):
    assert Tailer._wanted(target) == GtidState.of(target)


@pytest.mark.parametrize("seen", ["0-1-5", "0-1-5,0-2-9", "0-2-9,1-1-4", ""])
@pytest.mark.parametrize("target", ["0-1-5", "0-1-6", "0-2-9", "0-1-5,0-2-9", "0-1-4,0-1-5", "1-1-4", "",
                                    GtidPos.parse("0-1-5"), GtidPos.parse("0-2-9,1-1-4"),
                                    GtidState.parse("0-1-5,0-2-9")])
def test_reached_decides_as_the_state_does_on_the_raw_target(seen, target):
    tail = SimpleNamespace(_seen=GtidState.parse(seen), _wanted=Tailer._wanted)
    assert Tailer.reached(tail, target) == GtidState.parse(seen).reaches(target)


# -- the rounds and the end of a call --------------------------------------------------------------------

def test_rounds_cover_a_target_once_a_round_read_reaches_it():
    want = GtidState.parse("0-1-10")
    r = _Rounds()
    assert not r.covers(want)
    r.collect_state = GtidState.parse("0-1-10")  # a state without a position: no round collected
    assert not r.covers(want)
    r.collect_pos = "0-1-10"
    assert r.covers(want)
    r = _Rounds(inflight_pos="0-1-12", inflight_state=GtidState.parse("0-1-12"))
    assert r.covers(want)
    r = _Rounds(collect_pos="0-1-9", collect_state=GtidState.parse("0-1-9"))
    assert not r.covers(want)


def _call(seen: str, want: str | None, timeout_s: float | None, stop: threading.Event | None = None) -> _Apply:
    tail = SimpleNamespace(lanes=None, _applied_text="0-1-1", _seen=GtidState.parse(seen))
    return _Apply(tail, None if want is None else GtidState.parse(want), timeout_s, stop)  # type: ignore[arg-type]


def test_an_apply_call_starts_its_own_stats_and_rounds():
    a, b = _call("0-1-1", None, 1.0), _call("0-1-1", None, 1.0)
    assert a.stats == TailStats(start="0-1-1", end="", reached=False)
    assert a.rounds == _Rounds()
    assert a.stats is not b.stats and a.rounds is not b.rounds
    assert a.deadline is not None and a.deadline - a.t0 == pytest.approx(1.0)
    assert _call("0-1-1", None, None).deadline is None


def test_a_call_ends_when_stopped_when_its_target_is_applied_or_at_its_deadline():
    stop = threading.Event()
    assert not _call("0-1-1", "0-1-5", None, stop)._done()
    stop.set()
    assert _call("0-1-1", "0-1-5", None, stop)._done()
    assert _call("0-1-5", "0-1-5", None)._done()
    assert not _call("0-1-4", "0-1-5", 60.0)._done()
    assert not _call("0-1-1", None, 60.0)._done()
    past = _call("0-1-1", None, 0.0)
    time.sleep(0.001)
    assert past._done()
