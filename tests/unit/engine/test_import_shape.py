"""The cutover package holds no import circle (``TYPE_CHECKING`` imports included): its modules stand in an order
a reader can follow. The layers between packages are import-linter's (``pyproject.toml``)."""

from __future__ import annotations

import grimp


def _cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph("migrator")
    mods = sorted(m for m in graph.modules if m.startswith(package))
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m) if d.startswith(package)} for m in mods}
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in mods:
        if m not in state:
            visit(m, [m])
    return found


def test_the_cutover_package_has_no_import_circle():
    assert _cycles("migrator.engine.cutover") == []


def test_the_reader_process_starts_without_the_fleet_config():
    """The catch-up reader process is a fresh interpreter started inside a tail's timing: it imports
    the binlog modules only, not the fleet's config, model and connection modules."""
    import subprocess
    import sys

    code = ("import sys, migrator.engine.binlog.process; "
            "print(' '.join(m for m in sys.modules if m.startswith('migrator')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "migrator.engine.binlog.process" in loaded
    heavy = {"migrator.fleet.config", "migrator.fleet.model", "migrator.fleet.mysql"} & set(loaded)
    assert not heavy, f"the reader process imports {sorted(heavy)}"


def test_the_cutover_package_name_settle_is_only_its_module():
    """``migrator.engine.cutover.settle`` once named a function before the worker imported the module of the
    same name, and the module after: an abort called it and left every gate behind. The package re-exports no
    ``settle`` now; the function is ``reconcile.settle``."""
    import importlib
    import types

    cutover = importlib.import_module("migrator.engine.cutover")
    assert "settle" not in cutover.__all__
    name = getattr(cutover, "settle", None)  # absent until the module is imported, then the module
    assert name is None or isinstance(name, types.ModuleType), name
