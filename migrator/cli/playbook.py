"""CLI: `migrator run PLAYBOOK`, `migrator approve RUN STEP`, `migrator playbook status|list|resume|steps|reference`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from migrator.cli.helpers import JsonOpt, ZkPatienceOpt, load_config, state
from migrator.cli.inputs import RunIdArg
from migrator.cli.options import dry_run_or_yes
from migrator.cli.report import Report, print_json
from migrator.fleet.zk import PATIENCE_S
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
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Start the run (without it: a dry run that checks and "
                                                          "prints the steps, as split does).")] = False,
    as_json: JsonOpt = False,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Run a playbook (checked whole before anything runs: every value as the command line checks it, and
    the hosts it names against the registry). A dry run unless --yes."""
    dry_run_or_yes(dry_run, yes)
    pb = pbm.load(path)
    params = pbm.bind_params(pb, pbm.parse_sets(sets))
    lines = pbm.dry_run(pb, params)  # every step's values, bounded: refused here before anything connects
    rep = Report(as_json)
    cfg = load_config()
    if pbm.host_args(pb, params):
        _check_hosts(cfg, pb, params)
    if dry_run or not yes:
        if as_json:
            return print_json({"playbook": pb.name, "params": params, "lines": lines, "dry_run": True})
        print("\n".join(lines))
        if not dry_run:
            print("dry run: nothing started; give --yes to start the run", file=sys.stderr)
        return
    run_id = _create(cfg, pb, params)
    rep.say(f"playbook run {run_id} created")
    doc: dict = {"run": run_id, "playbook": pb.name}
    if sync:
        doc["status"] = _drive(cfg, run_id, rep, zk_patience)
    else:
        doc["queue"] = queue = _enqueue(cfg, run_id, state.config_path, pb.name)
        rep.say(f"enqueued on RQ queue {queue!r}; watch with `migrator playbook status {run_id}`")
    rep.document(doc)
    if doc.get("status") == "failed":
        raise typer.Exit(1)


def _check_hosts(cfg: object, pb: pbm.Playbook, params: dict[str, object]) -> None:
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.shard_map import HostRegistry

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:  # type: ignore[arg-type]
        pbm.check_hosts(pb, params, set(HostRegistry(zk).all()))


def approve(run_id: RunIdArg, step: str = typer.Argument(..., help="The step waiting for approval.",
                                                         metavar="STEP"), as_json: JsonOpt = False) -> None:
    """Approve a manual gate of a playbook run."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        pbm.RunStore(zk).approve(run_id, step)
    if as_json:
        return print_json({"run": run_id, "approved": step})
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
        print_json(st)
        return
    print(f"{run_id}: playbook {st['playbook']} {st['status']}"
          + (f" (migration {st['context']['migration']})" if st["context"].get("migration") else ""))
    for sid, rec in st["steps"].items():
        extra = f" waiting on: {'; '.join(rec['waiting_on'])}" if rec.get("waiting_on") else ""
        err = f" error: {rec['error']}" if rec.get("error") else ""
        print(f"  {sid:20s} {rec.get('status', '?'):8s} attempts={rec.get('attempts', 0)}{extra}{err}")


@playbook_app.command("list")
def list_runs(as_json: JsonOpt = False) -> None:
    """Every playbook run and its status."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        store = pbm.RunStore(zk)
        runs = [{"run": rid, "playbook": st["playbook"], "status": st["status"]}
                for rid in store.list() for st in [store.get(rid)[0]]]
    if as_json:
        return print_json({"runs": runs})
    for r in runs:
        print(f"{r['run']}  {r['playbook']:24s} {r['status']}")


@playbook_app.command("resume")
def resume(run_id: RunIdArg, sync: bool = typer.Option(False, "--sync",
                                                       help="Run it in this process instead of RQ workers."),
           as_json: JsonOpt = False, zk_patience: ZkPatienceOpt = PATIENCE_S) -> None:
    """Continue a run from its last checkpoint (after a crash or a lost Redis)."""
    cfg = load_config()
    rep = Report(as_json)
    doc: dict = {"run": run_id}
    if sync:
        doc["status"] = _drive(cfg, run_id, rep, zk_patience)
    else:
        doc["queue"] = queue = _enqueue(cfg, run_id, state.config_path)
        rep.say(f"re-enqueued {run_id} on RQ queue {queue!r}")
    rep.document(doc)
    if doc.get("status") == "failed":
        raise typer.Exit(1)


@playbook_app.command("steps")
def steps_cmd(as_json: JsonOpt = False) -> None:
    """Every step a playbook may call, with its parameters (?: optional) and what it does."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from migrator.ops.playbook.reference import step_rows

    if as_json:
        return print_json({"steps": [dict(zip(("call", "parameters", "what"), row)) for row in step_rows()]})
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


def _drive(cfg: object, run_id: str, rep: Report, patience_s: float = PATIENCE_S) -> str:
    """Advance the run in this process until it ends, a line per change of what it does; its last status. On one
    ZooKeeper session that waits ``patience_s`` for ZooKeeper whenever it goes away: the run goes on from its
    cursor once it is back (a step it interrupted runs again: every step is resumable)."""
    from migrator.fleet.zk import PatientSession
    from migrator.ops import watch

    then = f"the run stops where it is: `migrator playbook resume {run_id} --sync` goes on from there once it is back"
    with PatientSession(cfg, patience_s=patience_s, then=then) as ps:  # type: ignore[arg-type]
        last = None
        while True:
            out = ps.call(lambda zk: pbm.advance(cfg, zk, run_id, wait_budget_s=5))
            for ev in watch.reconnects(ps, run_id):
                rep.say(ev.line())
            msg = (f"{out.status}" + (f" at {out.step}" if out.step else "")
                   + (f": {out.message}" if out.message else ""))
            if msg != last:
                rep.say(msg)
                last = msg
            if out.status in ("done", "failed"):
                return out.status
            if out.status == "busy":
                time.sleep(1)
