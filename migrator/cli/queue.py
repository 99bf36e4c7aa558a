"""``migrator queue ...`` and ``migrator partitions ...``: the queue service's CLI.

Server processes (``serve``, ``broker``, ``worker``, ``load``) and admin
commands (``create``, ``list``, ``pause``, ``counts``, ...). Admin commands
talk to the fleet directly through :class:`QueueService`; the CLI only parses
options and prints. :func:`migrator.cli.main.main` turns errors into one line.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.cli.helpers import JsonOpt, QueueNameOpt, load_config
from migrator.cli.inputs import (
    DURATION_METAVAR,
    JobStateOpt,
    QueueNameArg,
    QueueNamesOpt,
    at_least,
    checked,
    duration_parser,
)
from migrator.cli.options import UsageProblem, YesOpt, confirm, dry_run_or_yes, listen_address
from migrator.fleet import bounds

console = Console()

queue_app = typer.Typer(help="The MySQL-backed job queue on the fleet: serve, brokers, workers, admin, load.",
                        no_args_is_help=True, rich_markup_mode=None)
ledger_app = typer.Typer(help="The load generator's ledger.", no_args_is_help=True, rich_markup_mode=None)
partitions_app = typer.Typer(help="Partition maintenance of queue and log tables.", no_args_is_help=True,
                             rich_markup_mode=None)

#: --open of `queue serve` and `queue broker`
OpenOpt = Annotated[bool, typer.Option(
    "--open", help="Serve without a token when the secrets file has none: anyone who reaches the address may "
                   "enqueue, dequeue and delete (refused without a token otherwise).")]
#: a shard number of the id format
ShardArg = Annotated[int, typer.Argument(min=0, max=65535, help="The shard (0..65535).", metavar="SHARD")]
#: the load generator's ledger (`queue load` writes it, `queue ledger check` reads it)
LedgerOpt = Annotated[Path, typer.Option("--ledger", metavar="FILE", help="The ledger (SQLite file).")]
LEDGER = Path("queue-ledger.db")
#: --attempts of update, enqueue and retry (None: not given)
AttemptsOpt = Annotated[int | None, typer.Option("--attempts", metavar="N",
                                                 help="Attempts per job (default: the queue's).")]
#: ``--json`` of the commands that print JSON always (accepted for uniformity; it changes nothing)
AlwaysJsonOpt = Annotated[bool, typer.Option("--json", help="Accepted for uniformity: this command always prints "
                                                            "one JSON document.")]
queue_app.add_typer(ledger_app, name="ledger")


def register(app: typer.Typer) -> None:
    app.add_typer(queue_app, name="queue")
    app.add_typer(partitions_app, name="partitions")


def _service(**kw: Any) -> Any:
    from migrator.queue.service import QueueService

    return QueueService(load_config(), **kw)


def _token(open_: bool) -> str | None:
    """The queue token; None only with --open (and --open only without a token): said at start."""
    from migrator.fleet.config import load_credentials
    from migrator.queue.api import NO_TOKEN, OpenRefused

    token = load_credentials(load_config()).queue_token
    if token and open_:
        raise UsageProblem("--open, but the secrets file (or MIGRATOR_QUEUE_TOKEN) has a queue token: the API "
                           "demands it; drop --open")
    if not token and not open_:
        raise OpenRefused(NO_TOKEN)
    if not token:
        print("warning: serving OPEN (--open, no queue token): anyone who reaches this address may enqueue, "
              "dequeue and delete jobs", file=sys.stderr, flush=True)
    return token


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# -- servers ----------------------------------------------------------------------------

@queue_app.command("serve")
def serve(listen: str | None = typer.Option(None, "--listen", help="HOST:PORT (default: [queue] listen).",
                                            metavar="HOST:PORT"),
          broker: bool = typer.Option(False, "--broker/--no-broker",
                                      help="Also run a dequeue broker in this process."),
          reap_every: float = typer.Option(1.0, "--reap-every", help="Seconds between lease reaper passes.",
                                           metavar=DURATION_METAVAR, parser=duration_parser("--reap-every")),
          frozen_wait: float = typer.Option(10.0, "--frozen-wait",
                                            help="Max seconds a write waits on a frozen shard.",
                                                metavar=DURATION_METAVAR, parser=duration_parser("--frozen-wait")),
          open_: OpenOpt = False) -> None:
    """Serve the HTTP/JSON API (OpenAPI at /docs) and Prometheus /metrics; every /v1 call must send
    Authorization: Bearer <the [queue] token of the secrets file>."""
    import uvicorn

    from migrator.queue.api import create_app
    from migrator.queue.broker import Broker, BrokerDirectory

    cfg = load_config()
    host, port = listen_address(listen or cfg.queue.listen)
    token = _token(open_)
    svc = _service(frozen_wait=frozen_wait)
    b = None
    if broker:
        b = Broker(svc, url=f"http://{host}:{port}").start()
    svc.dequeue_source = BrokerDirectory(svc, local=b, fallback_to_table=True, token=token)
    stop = threading.Event()

    def reaper() -> None:
        while not stop.wait(reap_every):
            try:
                svc.reap()
            except Exception:  # noqa: BLE001 - keep reaping
                pass

    if b is None:  # brokers reap the partitions they own
        threading.Thread(target=reaper, daemon=True, name="reaper").start()
    app = create_app(svc, token=token, broker=b, allow_open=open_)
    console.print(f"queue service on http://{host}:{port} (docs at /docs, metrics at /metrics)"
                  + ("" if token else " OPEN: no token"), markup=False, highlight=False)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        stop.set()
        if b is not None:
            b.stop()
        svc.close()


@queue_app.command("broker")
def broker_cmd(listen: str = typer.Option("127.0.0.1:0", "--listen",
                                          help="HOST:PORT for broker dequeues (0: any free port).",
                                          metavar="HOST:PORT"),
               buffer: int = typer.Option(200, "--buffer", min=1, help="Jobs buffered per owned partition.",
                                          metavar="N"),
               broker_id: str | None = typer.Option(None, "--id", metavar="ID",
                                                    help="Broker id (default: a random b...)."),
               open_: OpenOpt = False) -> None:
    """Run a dequeue broker: own queue partitions (assigned through ZooKeeper) and serve them from memory."""
    import uvicorn

    from migrator.queue.api import create_app
    from migrator.queue.broker import Broker

    host, port = listen_address(listen)
    token = _token(open_)
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    svc = _service()
    b = Broker(svc, broker_id=broker_id, url=f"http://{host}:{port}", buffer_size=buffer).start()
    console.print(f"broker {b.id} on http://{host}:{port}")
    try:
        uvicorn.run(create_app(svc, token=token, broker=b, allow_open=open_), host=host, port=port,
                    log_level="warning")
    finally:
        b.stop()
        svc.close()


@queue_app.command("worker")
def worker_cmd(queue: QueueNameOpt,
               handler: str = typer.Option(..., "--handler", help="package.module:function taking a job.",
                                           metavar="MODULE:FUNCTION"),
               concurrency: int = typer.Option(1, "--concurrency", min=1, metavar="N", help="Threads taking jobs."),
               lease: float | None = typer.Option(None, "--lease", help="Lease seconds (default: the queue's).",
                                                  callback=checked(at_least(0, exclusive=True), "--lease"),
                                                  metavar=DURATION_METAVAR, parser=duration_parser("--lease")),
               url: str | None = typer.Option(None, "--url",
                                              help="Use a queue server instead of the fleet directly (default: the "
                                                   "fleet).",
                                              callback=checked(bounds.http_url, "--url"), metavar="URL"),
               max_jobs: int | None = typer.Option(None, "--max-jobs", min=1, metavar="N",
                                                   help="Stop after this many jobs (default: never).")) -> None:
    """Run HANDLER on jobs of QUEUE with lease heartbeats; SIGTERM/SIGINT stop it gracefully."""
    from migrator.queue.worker import load_handler, run_worker

    fn = load_handler(handler)
    api = _api(url)
    try:
        stats = run_worker(api, queue, fn, concurrency=concurrency, lease_seconds=lease, max_jobs=max_jobs,
                           install_signals=True)
    finally:
        api.close()
    console.print(f"worker stopped: {stats.succeeded} succeeded, {stats.failed} failed, {stats.stale} stale, "
                  f"{stats.errors} errors")


def _api(url: str | None) -> Any:
    if url:
        from migrator.fleet.config import load_credentials
        from migrator.queue.client import QueueClient

        return QueueClient(url, token=load_credentials(load_config()).queue_token)
    return _service()


@queue_app.command("load")
def load_cmd(queue: QueueNameOpt = "load",
             rate: float = typer.Option(100.0, "--rate", help="Jobs/s to enqueue; 0 = as fast as possible.",
                                        callback=checked(at_least(0), "--rate"), metavar="PER_S"),
             duration: float = typer.Option(10.0, "--duration", help="Seconds (above 0).",
                                            callback=checked(at_least(0, exclusive=True), "--duration"),
                                                metavar=DURATION_METAVAR, parser=duration_parser("--duration")),
             ledger: LedgerOpt = LEDGER,
             partitions: int = typer.Option(2, "--partitions", min=1, max=256,
                                            help="Partitions if the queue is created.", metavar="N"),
             consumers: int = typer.Option(2, "--consumers", min=0, metavar="N", help="Consumer threads."),
             producers: int = typer.Option(1, "--producers", min=1, metavar="N", help="Producer threads."),
             url: str | None = typer.Option(None, "--url",
                                            help="Load a queue server instead of the fleet directly (default: the "
                                                 "fleet).",
                                            callback=checked(bounds.http_url, "--url"), metavar="URL"),
             as_json: JsonOpt = False) -> None:
    """Enqueue, dequeue and ack at a target rate, recording everything in a ledger."""
    from migrator.fleet.config import load_credentials
    from migrator.queue.load import run_load

    cfg = load_config()
    token = load_credentials(cfg).queue_token if url else None
    res = run_load(cfg, queue, rate, duration, ledger, url=url, token=token, partitions=partitions,
                   consumers=consumers, producers=producers)
    if as_json:
        return _print(asdict(res))
    console.print(res.to_text(), markup=False, highlight=False)


@ledger_app.command("check")
def ledger_check(ledger: LedgerOpt = LEDGER,
                 as_json: JsonOpt = False) -> None:
    """Prove every acknowledged enqueue is done or pending; count double executions; rates and latencies."""
    from migrator.queue.ledger import check_ledger

    if not ledger.is_file():
        raise UsageProblem(f"--ledger {ledger}: no such file (give the ledger `migrator queue load --ledger` wrote)")
    try:
        rep = check_ledger(load_config(), ledger)
    except sqlite3.DatabaseError as exc:
        raise UsageProblem(f"--ledger {ledger}: not a ledger ({exc}): give the SQLite file `migrator queue load "
                           "--ledger` wrote") from None
    if as_json:
        _print(rep.to_dict())
    else:
        print(rep.to_text())
    if not rep.ok:
        raise typer.Exit(1)


# -- admin -------------------------------------------------------------------------------

@queue_app.command("create")
def create(name: QueueNameArg, partitions: int = typer.Option(1, "--partitions", "-p", metavar="N",
                                                              help="Partitions (shards the jobs spread over)."),
           fifo: bool = typer.Option(False, "--fifo", help="Jobs of a partition are taken in enqueue order."),
           lease: float = typer.Option(30.0, "--lease", metavar=DURATION_METAVAR, parser=duration_parser("--lease"),
                                       help="Lease of a taken job (s)."),
           attempts: int = typer.Option(3, "--attempts", metavar="N", help="Attempts per job."),
           max_rate: float = typer.Option(0.0, "--max-rate", help="Dequeue jobs/s; 0 = unlimited.",
                                          metavar="PER_S"), as_json: JsonOpt = False) -> None:
    """Create a queue: pick shards, create the jobs tables, record it in ZooKeeper."""
    from migrator.queue.model import QueueConfig

    config = QueueConfig(partitions=partitions, fifo=fifo, lease_seconds=lease, default_attempts=attempts,
                         max_jobs_per_second=max_rate)  # a bad value is refused before the fleet is asked
    with _service() as svc:
        rec = svc.create_queue(name, config)
        where = {p["partition"]: p["master"] for p in svc.placement(name)}
    if as_json:
        return _print({**rec.model_dump(mode="json"), "placement": where})
    for p in rec.partitions:
        print(f"{rec.name} partition {p.index}: shard {p.shard} table {p.table} on {where[p.index]}")


@queue_app.command("list")
def list_cmd(counts: bool = typer.Option(True, "--counts/--no-counts", help="Jobs per state of each queue."),
             as_json: JsonOpt = False) -> None:
    """Queues with their partitions and (optionally) jobs per state."""
    with _service() as svc:
        if as_json:
            return _print({"queues": [{**rec.model_dump(mode="json"), **({"counts": svc.counts(rec.name)}
                                                                          if counts else {})}
                                      for rec in svc.list_queues()]})
        t = Table(title="queues")
        for col in ("queue", "partitions", "shards", "fifo", "paused", "lease", "max/s", "NEW", "IPR", "OK", "FAIL"):
            t.add_column(col)
        for rec in svc.list_queues():
            c = svc.counts(rec.name) if counts else {}
            t.add_row(rec.name, str(len(rec.partitions)), ",".join(str(p.shard) for p in rec.partitions),
                      "yes" if rec.config.fifo else "", "PAUSED" if rec.config.paused else "",
                      f"{rec.config.lease_seconds:g}", f"{rec.config.max_jobs_per_second:g}",
                      *(str(c.get(s, "")) for s in ("NEW", "IPR", "OK", "FAIL")))
        console.print(t)


@queue_app.command("show")
def show(name: QueueNameArg, _json: AlwaysJsonOpt = False) -> None:
    """The queue's ZooKeeper record, where each partition lives and the counts, as JSON."""
    with _service() as svc:
        rec = svc.get_queue(name)
        _print({**rec.model_dump(mode="json"), "placement": svc.placement(name), "counts": svc.counts(name)})


@queue_app.command("update")
def update(name: QueueNameArg, lease: float | None = typer.Option(None, "--lease", metavar=DURATION_METAVAR,
                                                                  parser=duration_parser("--lease"),
                                                                  help="New lease (s; default: unchanged)."),
           attempts: AttemptsOpt = None,
           max_rate: float | None = typer.Option(None, "--max-rate", metavar="PER_S",
                                                 help="New dequeue limit, jobs/s (0: none; default: unchanged)."),
           yes: YesOpt = False, _json: AlwaysJsonOpt = False) -> None:
    """Change lease, default attempts or the dequeue rate limit of a live queue (shows the change and asks)."""
    from migrator.queue.model import QueueConfigUpdate

    change = QueueConfigUpdate(lease_seconds=lease, default_attempts=attempts, max_jobs_per_second=max_rate)
    given = change.model_dump(exclude_none=True)
    if not given:
        raise UsageProblem("give at least one of --lease, --attempts, --max-rate")
    with _service() as svc:
        old = svc.get_queue(name).config.model_dump(mode="json")
        confirm(f"change queue {name}'s " + ", ".join(f"{k} from {old.get(k)} to {v}" for k, v in given.items())
                + " (its workers and servers take it at once)", yes)
        rec = svc.update_queue(name, change)
    _print(rec.config.model_dump(mode="json"))


@queue_app.command("pause")
def pause(name: QueueNameArg, yes: YesOpt = False, as_json: JsonOpt = False) -> None:
    """Stop dequeues of a queue (enqueues still accepted; shows what it stops and asks)."""
    with _service() as svc:
        have = svc.counts(name)
        confirm(f"pause queue {name}: its workers get no job until `migrator queue resume {name}` (it holds "
                f"{have.get('NEW', 0)} NEW jobs now; enqueues go on)", yes)
        svc.pause(name)
    if as_json:
        return _print({"queue": name, "paused": True})
    print(f"queue {name} paused")


@queue_app.command("resume")
def resume(name: QueueNameArg, as_json: JsonOpt = False) -> None:
    """Let a paused queue be dequeued again."""
    with _service() as svc:
        svc.resume(name)
    if as_json:
        return _print({"queue": name, "paused": False})
    print(f"queue {name} resumed")


@queue_app.command("delete")
def delete(name: QueueNameArg, yes: YesOpt = False, as_json: JsonOpt = False) -> None:
    """Delete a queue and drop its jobs tables (shows what it drops and asks)."""
    with _service() as svc:
        rec = svc.get_queue(name)
        counts = svc.counts(name)
        jobs = ", ".join(f"{n} {state}" for state, n in counts.items()) or "no jobs"
        confirm(f"delete queue {name} and drop its {len(rec.partitions)} jobs tables "
                f"({', '.join(p.table + ' in shard ' + str(p.shard) for p in rec.partitions)}) holding {jobs}", yes)
        svc.delete_queue(name)
    if as_json:
        return _print({"queue": name, "deleted": True, "counts": counts})
    print(f"queue {name} deleted")


@queue_app.command("enqueue")
def enqueue(name: QueueNameArg, bodies: list[str] = typer.Argument(..., help="Job bodies.", metavar="BODY"),
            priority: int = typer.Option(2, "--priority", metavar="N", help="Priority (lower first)."),
                delay: float | None = typer.Option(None, "--delay", metavar=DURATION_METAVAR,
                                                   parser=duration_parser("--delay"),
                                                   help="Not taken before this many seconds (default: at once)."),
            attempts: AttemptsOpt = None,
            dedupe: str | None = typer.Option(None, "--dedupe-key", metavar="KEY",
                                              help="An enqueue with a pending job of this key is deduplicated "
                                                   "(default: none)."),
            idempotency_key: str | None = typer.Option(
                None, "--idempotency-key", metavar="KEY",
                help="Any key of yours for this call: the same command run again with the same key and bodies "
                     "enqueues none of them twice, however much the first run stored (default: none)."),
            as_json: JsonOpt = False) -> None:
    """Enqueue jobs (one per BODY)."""
    from migrator.queue.model import EnqueueJob

    jobs = [EnqueueJob(body=b, priority=priority, delay_seconds=delay, attempts=attempts, dedupe_key=dedupe)
            for b in bodies]
    with _service() as svc:
        results = svc.enqueue(name, jobs, idempotency_key=idempotency_key)
    if as_json:
        return _print({"queue": name, "jobs": [{"id": r.id, "deduplicated": r.deduplicated} for r in results]})
    for r in results:
        print(f"{r.id}{' (deduplicated)' if r.deduplicated else ''}")


@queue_app.command("counts")
def counts(name: QueueNameArg, _json: AlwaysJsonOpt = False) -> None:
    """Jobs per state."""
    with _service() as svc:
        _print(svc.counts(name))


@queue_app.command("lookup")
def lookup(name: QueueNameArg, job_id: str = typer.Argument(..., help="The job id.", metavar="JOB_ID"),
           _json: AlwaysJsonOpt = False) -> None:
    """One job by id."""
    from migrator.fleet.ids import parse_id

    with _service() as svc:
        _print(svc.lookup(name, parse_id(job_id)).model_dump(mode="json"))


@queue_app.command("scan")
def scan(name: QueueNameArg, state: JobStateOpt = "NEW", limit: int = typer.Option(20, "--limit", min=1, metavar="N",
                                                                                   help="Jobs per page."),
         cursor: str | None = typer.Option(None, "--cursor", metavar="CURSOR",
                                           help="Where the last page ended (default: the start)."),
         as_json: JsonOpt = False) -> None:
    """A page of jobs in a state (keyset pagination: pass --cursor from the last page)."""
    with _service() as svc:
        jobs, nxt = svc.scan(name, state, limit, cursor)
    if as_json:
        return _print({"jobs": [j.model_dump(mode="json") for j in jobs], "next_cursor": nxt})
    for j in jobs:
        print(f"{j.id}  p{j.partition}  prio {j.priority}  left {j.attempts_left}  {j.custom_status!r}  "
              f"{j.body[:60]!r}")
    print(f"next cursor: {nxt}" if nxt else "(end)")


@queue_app.command("retry")
def retry(name: QueueNameArg, limit: int = typer.Option(1000, "--limit", min=1, metavar="N",
                                                        help="At most this many jobs."),
          attempts: AttemptsOpt = None, as_json: JsonOpt = False) -> None:
    """Move failed jobs back to pending."""
    with _service() as svc:
        n = svc.retry_failed(name, limit, attempts)
    if as_json:
        return _print({"queue": name, "retried": n})
    print(f"{n} job(s) back to NEW")


@queue_app.command("purge")
def purge(name: QueueNameArg, state: JobStateOpt,
          limit: int = typer.Option(1000, "--limit", min=1, metavar="N", help="At most this many jobs."),
          yes: YesOpt = False, as_json: JsonOpt = False) -> None:
    """Delete jobs of one state (shows how many and asks; routine purging is `migrator partitions maintain`)."""
    from migrator.queue.model import JobState

    key = JobState.parse(state).name  # checked as the option was parsed
    with _service() as svc:
        have = svc.counts(name)
        confirm(f"delete up to {limit} {key} jobs of queue {name} (it holds {have.get(key, 0)} now)", yes)
        n = svc.delete_jobs(name, state, limit)
    if as_json:
        return _print({"queue": name, "state": key, "deleted": n})
    print(f"{n} job(s) deleted")


# -- partitions ----------------------------------------------------------------------------

@partitions_app.command("maintain")
def maintain(dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; change nothing (the default "
                                                                  "without --yes)."),
             yes: Annotated[bool, typer.Option("--yes", "-y", help="Run the DROP and REORGANIZE PARTITION "
                                                                   "statements (without it: a dry run).")] = False,
             queue: QueueNamesOpt = None,
             lock_wait: int = typer.Option(2, "--lock-wait", callback=checked(at_least(1), "--lock-wait"),
                                           help="lock_wait_timeout (s) for each DDL.",
                                           metavar=DURATION_METAVAR, parser=duration_parser("--lock-wait", whole=True)),
             pretend_later: float = typer.Option(0.0, "--pretend-later", hidden=True,
                                                 help="Pretend the clock is this many seconds later.",
                                                 metavar="X"), as_json: JsonOpt = False) -> None:
    """Drop expired buckets (DROP PARTITION) and split FUTURE partitions ahead (REORGANIZE PARTITION). A dry
    run unless --yes."""
    from migrator.queue.maintenance import maintain as run

    dry_run_or_yes(dry_run, yes)
    dry_run = dry_run or not yes

    with _service() as svc:
        reports = run(svc, advance_seconds=pretend_later, lock_wait_timeout=lock_wait, dry_run=dry_run,
                      queues=queue or None)
    if as_json:
        return _print({"dry_run": dry_run, "tables": [asdict(r) for r in reports]})
    for r in reports:
        print(("[dry run] " if dry_run else "") + r.to_text())
        if dry_run and (r.dropped or r.added):
            print(f"    drop: {', '.join(r.dropped) or '-'}\n    add:  {', '.join(r.added) or '-'}")
    if not reports:
        print("no queue or log tables to maintain")


@partitions_app.command("pause")
def partitions_pause(shard: ShardArg, reason: str = typer.Option("", "--reason", metavar="TEXT",
                                                                 help="Why, recorded with the pause."),
                     as_json: JsonOpt = False) -> None:
    """Pause maintenance of a shard (creates <root>/maintenance/paused/<shard>)."""
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.config import load_credentials
    from migrator.queue.maintenance import pause_path, pause_shard

    cfg = load_config()
    with zk_mod.connect(cfg, load_credentials(cfg)) as zk:
        pause_shard(zk, shard, reason or f"{os.environ.get('USER', '?')}@{socket.gethostname()} at {time.ctime()}")
        if as_json:
            return _print({"shard": shard, "paused": True, "node": pause_path(zk, shard)})
        print(f"maintenance paused on shard {shard} ({pause_path(zk, shard)})")


@partitions_app.command("resume")
def partitions_resume(shard: ShardArg, as_json: JsonOpt = False) -> None:
    """Resume maintenance of a shard."""
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.config import load_credentials
    from migrator.queue.maintenance import resume_shard

    cfg = load_config()
    with zk_mod.connect(cfg, load_credentials(cfg)) as zk:
        resume_shard(zk, shard)
    if as_json:
        return _print({"shard": shard, "paused": False})
    print(f"maintenance resumed on shard {shard}")


@partitions_app.command("paused")
def partitions_paused(as_json: JsonOpt = False) -> None:
    """Shards whose maintenance is paused."""
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.config import load_credentials
    from migrator.queue.maintenance import paused_shards

    cfg = load_config()
    with zk_mod.connect(cfg, load_credentials(cfg)) as zk:
        shards = paused_shards(zk)
    if as_json:
        return _print({"paused": list(shards)})
    print(", ".join(map(str, shards)) if shards else "none")
