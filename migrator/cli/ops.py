"""CLI: `migrator history` (audit trail), `migrator worker` (RQ workers for migration jobs) and
`migrator restart-copy ID` (redo a copy whose binlog position is gone)."""

from __future__ import annotations

import json

import typer

from migrator.cli.helpers import JsonOpt, MigrationIdArg, load_config
from migrator.cli.inputs import OptionalMigrationIdArg
from migrator.cli.options import YesOpt, confirm, listen_address, old_spelling

#: RQ runs delayed jobs (the pipeline's re-checks, a rebalance's advances, retries) from a scheduler in one
#: worker, under a Redis lock that lives 61 s after its holder dies. Another worker takes it over only in its
#: maintenance, every 10 min by default and only between dequeues (an idle worker waits worker_ttl - 15 s in
#: one). With these, a live worker takes the scheduler over within ~1.5 min of the holder's death, not ~10 min.
SCHEDULER_CHECK_S = 10
WORKER_TTL_S = 30


def history(migration_id: OptionalMigrationIdArg = None,
            limit: int = typer.Option(200, "--limit", min=1, metavar="N", help="Changes shown, newest last."),
            as_json: JsonOpt = False) -> None:
    """Every shard-map change and migration state change: who, when, epochs."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod
    from migrator.ops import audit

    cfg = load_config()
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        rows = audit.history(zk, migration_id=migration_id, limit=limit)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        tag = f" [{r['migration']}]" if r.get("migration") else ""
        print(f"{r['when_iso']}  {r['what']:9s} {r['who']}{tag}  {r['detail']}")


def metrics_cmd(listen: str = typer.Option("127.0.0.1:9640", "--listen", help="HOST:PORT to serve /metrics on.",
                                           metavar="HOST:PORT")
                ) -> None:
    """Serve Prometheus /metrics of every migration (read from ZooKeeper on scrape)."""
    import time

    from migrator.fleet import config as config_mod
    from migrator.fleet import zk as zk_mod
    from migrator.ops import metrics

    host, port = listen_address(listen)
    cfg = load_config()
    server = metrics.serve(zk_mod.connect(cfg, config_mod.load_credentials(cfg)), port, host)
    print(f"serving migration metrics on http://{host}:{server.server_port}/metrics", flush=True)
    while True:
        time.sleep(3600)


def demo(
    directory: str = typer.Option(".sandbox-demo", "--dir", help="A fresh sandbox is started here (a sandbox "
                                                               "already there is deleted first, after asking).",
                                                                   metavar="DIR"),
    base_port: int = typer.Option(33300, "--base-port", min=1, max=65000, metavar="PORT",
                                   help="Ports base+1.. (MariaDB), base+81 (ZK), base+91 (Redis)."),
    rate: float = typer.Option(200.0, "--rate", min=0, help="Queue load, jobs/s (0: as fast as it can).",
                               metavar="PER_S"),
    rows: int = typer.Option(500, "--rows", min=0, help="Seed pins per shard.", metavar="N"),
    shard_count: int = typer.Option(16, "--shard-count", min=2, max=65536, metavar="N",
                                    help="Shards of the seed map."),
    shards_old: int | None = old_spelling("--shards", "--shard-count", min=2, max=65536),
    down: bool = typer.Option(False, "--down", help="Stop the sandbox at the end."),
    tls: bool = typer.Option(True, "--tls/--no-tls", help="MariaDB over TLS only (--no-tls: plaintext)."),
    yes: YesOpt = False,
) -> None:
    """A live split of a sandbox fleet under queue load, with a report."""
    from migrator.ops.demo import run_demo
    from migrator.sandbox import Sandbox

    existing = Sandbox(directory)
    if existing.state is not None:
        confirm(f"stop the sandbox in {existing.dir} and delete that directory with everything in it, then start "
                "a fresh demo fleet there", yes)

    report = run_demo(directory=directory, base_port=base_port, rate=rate, rows=rows,
                      shards=shard_count if shards_old is None else shards_old, down=down,
                      tls=tls)
    if not report.ok:
        raise typer.Exit(1)


def restart_copy(migration_id: MigrationIdArg,
                 yes: YesOpt = False,
                 as_json: JsonOpt = False) -> None:
    """Redo the copy from scratch (e.g. the binlog catch-up needed was purged): drop the target
    copies, reset copy and catch-up progress, keep the migration and its shard locks."""
    from migrator.ops import command, intents

    cfg = load_config()
    confirm(intents.restart_copy(cfg, migration_id), yes)
    out = command.restart_copy(cfg, migration_id)
    if as_json:
        print(json.dumps({"migration": migration_id, **out}, indent=2, default=str))
        return
    print(f"{migration_id}: copy restarted (was {out['was']}); dropped on the target: "
          f"{', '.join(out['dropped']) or 'nothing'}; " +
          (f"enqueued {out['job']}" if out["job"] else f"run `migrator copy {migration_id}`"))


def worker(
    pairs: str | None = typer.Option(None, "--pairs", help="Serve only the jobs of migrations whose source is "
                                     "one of these pairs (comma-separated host names, e.g. "
                                     "MySQL003A,MySQL004A; default: every pair).", metavar="HOSTS"),
    queues: list[str] = typer.Option([], "--queue", help="RQ queues to serve; repeatable (with --pairs: "
                                     "served too, e.g. --queue migrator for rebalance advances).", metavar="QUEUE"),
    burst: bool = typer.Option(False, "--burst", help="Exit when the queues are empty."),
    name: str | None = typer.Option(None, "--name", metavar="NAME", help="Worker name (default: RQ's, host and pid)."),
    metrics_listen: str | None = typer.Option(None, "--metrics-listen",
                                              help="HOST:PORT to serve Prometheus /metrics of migrations on "
                                                   "(default: none served).", metavar="HOST:PORT"),
    settle: bool = typer.Option(True, "--settle/--no-settle",
                                help="Settle cutovers whose process died (undo before the flip, finish after)."),
) -> None:
    """Run one RQ worker (with the scheduler) for migration and playbook jobs: without options it serves
    the general queue and every registered pair's queue (read at start), with --pairs only those pairs'.
    It also settles, within seconds, any cutover whose process died (module
    migrator.engine.cutover.settle)."""
    import os

    from rq import Queue

    from migrator.fleet import config as config_mod
    from migrator.fleet import redis_client
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.shard_map import HostRegistry
    from migrator.ops import steps
    from migrator.ops.worker import Worker

    metrics_at = listen_address(metrics_listen, "--metrics-listen") if metrics_listen else None
    cfg = load_config()
    # jobs find the fleet through the same config file
    os.environ.setdefault(config_mod.ENV_CONFIG, str(cfg.path))
    wanted = [p.strip() for p in (pairs or "").split(",") if p.strip()]
    if pairs is not None and not wanted:
        raise steps.UnknownPair("--pairs names no pair: give host names such as MySQL003A,MySQL004A")
    serve = list(queues)
    if wanted or not queues:
        with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
            serve += [q for q in steps.worker_queues(HostRegistry(zk).all(), wanted) if q not in serve]
    if metrics_at:
        from migrator.ops import metrics

        metrics.serve(zk_mod.connect(cfg, config_mod.load_credentials(cfg)), metrics_at[1], metrics_at[0])
    if settle:
        from migrator.engine.cutover.settle import Settler

        Settler(cfg).start()  # a daemon thread of this process, not of the work-horses it forks
    conn = redis_client.connect(cfg)
    print(f"worker serving {', '.join(serve)}", flush=True)
    w = Worker([Queue(q, connection=conn) for q in serve], connection=conn, name=name,
               maintenance_interval=SCHEDULER_CHECK_S, worker_ttl=WORKER_TTL_S)
    w.work(burst=burst, with_scheduler=True)


def register(app: typer.Typer) -> None:
    """Add ``history``, ``metrics``, ``demo``, ``restart-copy`` and ``worker`` to the ``migrator`` app."""
    app.command("history")(history)
    app.command("metrics")(metrics_cmd)
    app.command("demo")(demo)
    app.command("restart-copy")(restart_copy)
    app.command("worker")(worker)
