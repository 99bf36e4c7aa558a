"""CLI: `migrator run PLAYBOOK`, `migrator approve RUN STEP`, `migrator playbook status|list|resume|steps|reference`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from migrator.cli.helpers import JsonOpt, load_config, state
from migrator.cli.inputs import RunIdArg
from migrator.ops import playbook as pbm

playbook_app = typer.Typer(help="Runbook playbooks: runs, their steps, approvals.", no_args_is_help=True,
                           rich_markup_mode=None)


def run(
    path: Path = typer.Argument(..., help="A playbook YAML file (see playbooks/).", metavar="PATH"),
    sets: list[str] = typer.Option([], "--set", help="name=value for a playbook param; repeatable.",
                                   metavar="NAME=VALUE"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check and print the steps; run nothing (the hosts "
                                                          "the steps name are looked up in the registry)."),
    sync: bool = typer.Option(False, "--sync", help="Run in this process instead of on RQ workers."),
) -> None:
    """Run a playbook (checked whole before anything runs: every value as the command line checks it, and
    the hosts it names against the registry)."""
    pb = pbm.load(path)
    params = pbm.bind_params(pb, pbm.parse_sets(sets))
    lines = pbm.dry_run(pb, params)  # every step's values, bounded: refused here before anything connects
    cfg = load_config()
    if pbm.host_args(pb, params):
        _check_hosts(cfg, pb, params)
    if dry_run:
        print("\n".join(lines))
        return
    run_id = _create(cfg, pb, params)
    print(f"playbook run {run_id} created")
    if sync:
        _drive(cfg, run_id)
    else:
        queue = _enqueue(cfg, run_id, state.config_path, pb.name)
        print(f"enqueued on RQ queue {queue!r}; watch with `migrator playbook status {run_id}`")


def _check_hosts(cfg: object, pb: pbm.Playbook, params: dict[str, object]) -> None:
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.shard_map import HostRegistry

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:  # type: ignore[arg-type]
        pbm.check_hosts(pb, params, set(HostRegistry(zk).all()))


def approve(run_id: RunIdArg, step: str = typer.Argument(..., help="The step waiting for approval.",
                                                         metavar="STEP")) -> None:
    """Approve a manual gate of a playbook run."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        pbm.RunStore(zk).approve(run_id, step)
    print(f"approved {step} of {run_id}")


@playbook_app.command("status")
def status(run_id: RunIdArg, as_json: JsonOpt = False) -> None:
    """A run's steps: status, attempts, what a gate waits on."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        st, _ = pbm.RunStore(zk).get(run_id)
    st.pop("text", None)
    if as_json:
        print(json.dumps(st, indent=2, default=str))
        return
    print(f"{run_id}: playbook {st['playbook']} {st['status']}"
          + (f" (migration {st['context']['migration']})" if st["context"].get("migration") else ""))
    for sid, rec in st["steps"].items():
        extra = f" waiting on: {'; '.join(rec['waiting_on'])}" if rec.get("waiting_on") else ""
        err = f" error: {rec['error']}" if rec.get("error") else ""
        print(f"  {sid:20s} {rec.get('status', '?'):8s} attempts={rec.get('attempts', 0)}{extra}{err}")


@playbook_app.command("list")
def list_runs() -> None:
    """Every playbook run and its status."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        store = pbm.RunStore(zk)
        for rid in store.list():
            st, _ = store.get(rid)
            print(f"{rid}  {st['playbook']:24s} {st['status']}")


@playbook_app.command("resume")
def resume(run_id: RunIdArg, sync: bool = typer.Option(False, "--sync",
                                                       help="Run it in this process instead of RQ workers.")) -> None:
    """Continue a run from its last checkpoint (after a crash or a lost Redis)."""
    cfg = load_config()
    if sync:
        _drive(cfg, run_id)
    else:
        print(f"re-enqueued {run_id} on RQ queue {_enqueue(cfg, run_id, state.config_path)!r}")


@playbook_app.command("steps")
def steps_cmd() -> None:
    """Every step a playbook may call, with its parameters (?: optional) and what it does."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from migrator.ops.playbook.reference import step_rows

    t = Table(title="playbook steps (`migrator playbook reference` for keys, gates, handlers)")
    for col in ("call", "parameters", "what it does"):
        t.add_column(col)
    for row in step_rows():
        t.add_row(*(Text(c) for c in row))  # plain text: a bracket is not markup
    Console().print(t)


@playbook_app.command("reference")
def reference_cmd() -> None:
    """The playbook reference as Markdown (docs/playbooks.md): keys, types, steps, gates, handlers."""
    from migrator.ops.playbook.reference import render

    print(render(), end="")


def register(app: typer.Typer) -> None:
    """Add ``run``, ``approve`` and the ``playbook`` group to the ``migrator`` app."""
    app.command("run")(run)
    app.command("approve")(approve)
    app.add_typer(playbook_app, name="playbook")


def _create(cfg: object, pb: pbm.Playbook, params: dict) -> str:
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:  # type: ignore[arg-type]
        return pbm.RunStore(zk).create(pb, params)


def _enqueue(cfg: object, run_id: str, config_path: str | None, name: str | None = None) -> str:
    """Queue the run's next advance; returns the RQ queue it went to."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import redis_client
    from migrator.fleet import zk as zk_mod
    from migrator.ops.steps import enqueue_playbook, playbook_queue

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:  # type: ignore[arg-type]
        migration = pbm.RunStore(zk).get(run_id)[0]["context"].get("migration")
        queue = playbook_queue(zk, migration)
    path = str(config_mod.resolve_path(config_path).resolve())
    enqueue_playbook(run_id, path, connection=redis_client.connect(cfg), playbook_name=name,  # type: ignore[arg-type]
                     migration=migration, queue=queue)
    return queue


def _drive(cfg: object, run_id: str) -> None:
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:  # type: ignore[arg-type]
        last = None
        while True:
            out = pbm.advance(cfg, zk, run_id, wait_budget_s=5)
            msg = (f"{out.status}" + (f" at {out.step}" if out.step else "")
                   + (f": {out.message}" if out.message else ""))
            if msg != last:
                print(msg, flush=True)
                last = msg
            if out.status in ("done", "failed"):
                if out.status == "failed":
                    raise typer.Exit(1)
                return
            if out.status == "busy":
                time.sleep(1)
