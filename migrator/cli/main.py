"""The ``migrator`` command line (typer).

Each command is a thin shell over a plain function in the library: it parses
options, calls the function and prints the result. Whatever it raises reaches
one handler, :func:`main`, which prints one line on stderr and exits with a
code of :class:`~migrator.errors.ExitCode` (:mod:`migrator.cli.failures`);
what every command means the same way (``--yes``, ``--listen``, the migration
limits) is in :mod:`migrator.cli.options`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.cli import failures
from migrator.cli.helpers import JsonOpt, human_bytes, load_config, state
from migrator.cli.options import old_spelling
from migrator.errors import ExitCode, MigratorError
from migrator.fleet import ids

#: help texts are plain text: Rich markup would eat "[queue]" and every other bracketed word
MARKUP = None
#: ``-h`` is ``--help`` everywhere: every command's context inherits the root's help option names
CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    help="Shard migration and rebalancing for sharded MySQL/MariaDB fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=MARKUP,
    context_settings=CONTEXT,
)
sandbox_app = typer.Typer(help="A real fleet on this machine (MariaDB pairs, ZooKeeper, Redis), no Docker.",
                          no_args_is_help=True, rich_markup_mode=MARKUP)
topology_app = typer.Typer(help="The shard map and host registry in ZooKeeper.", no_args_is_help=True,
                           rich_markup_mode=MARKUP)
id_app = typer.Typer(help="64-bit object ids: (shard << 46) | (type << 36) | local.", no_args_is_help=True,
                     rich_markup_mode=MARKUP)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(topology_app, name="topology")
app.add_typer(id_app, name="id")

console = Console()
err_console = Console(stderr=True)


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("shard-migrator")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        print(f"migrator {version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    config: str | None = typer.Option(
        None, "--config", "-c", help="Config file (default: $MIGRATOR_CONFIG, else .sandbox/migrator.toml).",
        metavar="PATH"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log library chatter (ZooKeeper, RQ) too."),
    _version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                  help="Print the version and exit."),
) -> None:
    state.config_path = config
    setup_logging(verbose)


def setup_logging(verbose: bool) -> None:
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        # kazoo narrates every reconnect attempt; the CLI reports the outcome in one line instead
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


# -- id ----------------------------------------------------------------------------

@id_app.command("decode")
def id_decode(object_id: str = typer.Argument(..., help="The id, decimal or 0x hex.", metavar="ID"),
              as_json: JsonOpt = False) -> None:
    """Split an id into shard, type and local id."""
    oid = ids.decode(ids.parse_id(object_id))
    if as_json:
        print(json.dumps({"id": oid.value, "shard": oid.shard, "type": oid.type, "local": oid.local,
                          "database": ids.shard_db(oid.shard)}))
    else:
        print(f"id {oid.value}: shard {oid.shard} ({ids.shard_db(oid.shard)}), type {oid.type}, local {oid.local}")


@id_app.command("encode")
def id_encode(shard: int = typer.Option(..., "--shard", metavar="SHARD", help="Shard (0..65535)."),
              type_id: int = typer.Option(..., "--type", metavar="N", help="Object type."),
              local: int = typer.Option(..., "--local", metavar="N",
                                        help="Local id within the shard and type."), as_json: JsonOpt = False) -> None:
    """Pack shard, type and local id into one id."""
    oid = ids.encode(shard, type_id, local)
    print(json.dumps({"id": oid, "shard": shard, "type": type_id, "local": local}) if as_json else oid)


@id_app.command("mod-shard")
def id_mod_shard(key: str = typer.Argument(..., help="The key (any text).", metavar="KEY"),
                 shard_count: int = typer.Option(4096, "--shard-count", metavar="N", help="Number of shards."),
                 shards_old: int | None = old_spelling("--shards", "--shard-count"), as_json: JsonOpt = False) -> None:
    """The shard of a key without an id: md5(key) % N."""
    shards = shard_count if shards_old is None else shards_old
    shard = ids.mod_shard(key, shards)
    print(json.dumps({"key": key, "shards": shards, "shard": shard}) if as_json else shard)


# -- topology -------------------------------------------------------------------------

@topology_app.command("show")
def topology_show(as_json: JsonOpt = False,
                  sizes: bool = typer.Option(True, "--sizes/--no-sizes",
                                             help="Ask each master for data size.")) -> None:
    """Ranges -> pairs, with shard counts and data size."""
    from migrator.fleet import topology

    cfg = load_config()
    view = topology.show(cfg, with_sizes=sizes)
    if as_json:
        print(json.dumps(view, indent=2))
        return
    t = Table(title=f"shard map epoch {view['epoch']} ({view['num_shards']} shards)")
    for col in ("range", "master", "slave", "shards", "data", "frozen"):
        t.add_column(col)
    for r in view["ranges"]:
        size = r.get("bytes")
        t.add_row(f"{r['range'][0]}-{r['range'][1]}", r["master"], r["slave"], str(r["shards"]),
                  "?" if size is None else human_bytes(size), "yes" if r["frozen"] else "")
    console.print(t)
    spare = view.get("spare_pairs") or []
    if spare:
        console.print("pairs holding no range: " + ", ".join(f"{a}/{b}" for a, b in spare))


@topology_app.command("init")
def topology_init(from_file: Path = typer.Option(..., "--from", help="A JSON map file (seed format).", metavar="FILE"),
                  hosts_file: Path | None = typer.Option(None, "--hosts",
                                                            help="JSON list of hosts to register first "
                                                                 "(default: none).",
                                                            metavar="FILE"),
                  as_json: JsonOpt = False) -> None:
    """Store a first shard map (validated) in ZooKeeper."""
    from migrator.fleet import topology

    cfg = load_config()
    smap = topology.init_from_file(cfg, from_file, hosts_file)
    if as_json:
        print(json.dumps({"ranges": len(smap.ranges), "num_shards": smap.num_shards, "epoch": smap.epoch}))
        return
    print(f"shard map stored: {len(smap.ranges)} ranges over {smap.num_shards} shards, epoch {smap.epoch}")


@topology_app.command("create-shards")
def topology_create_shards(rows: int = typer.Option(0, "--rows", help="Seed pins per new shard.", metavar="N"),
                           as_json: JsonOpt = False) -> None:
    """Create missing shard databases (seed schema) on their masters."""
    from migrator.fleet import topology

    created = topology.create_shards_command(load_config(), rows=rows)
    if as_json:
        print(json.dumps({"created": created}))
        return
    print(f"created {len(created)} shard databases" + (f": {created[0]}..{created[-1]}" if created else ""))


def _host_arg(spec: str, partner: str) -> Any:
    from pydantic import ValidationError

    from migrator.cli.options import UsageProblem
    from migrator.fleet.model import Host

    name, sep, addr = spec.partition("=")
    host, colon, port = addr.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise UsageProblem(f"{failures.short(spec)}: give NAME=ADDRESS:PORT, e.g. MySQL009A=10.0.3.17:3306")
    try:
        return Host(name=name, address=host, port=int(port), partner=partner)
    except ValidationError as exc:
        raise UsageProblem(f"{failures.short(spec)}: {failures.pydantic_reason(exc)}") from None


@topology_app.command("add-pair")
def topology_add_pair(
    master: str = typer.Argument(...,
                                 help="NAME=ADDRESS:PORT of the new pair's master, e.g. MySQL009A=10.0.3.17:3306",
                                 metavar="NAME=ADDRESS:PORT"),
    passive: str = typer.Argument(..., help="NAME=ADDRESS:PORT of its passive member (its master-master partner)",
                                  metavar="NAME=ADDRESS:PORT"),
    as_json: JsonOpt = False,
) -> None:
    """Register a new, empty master-master pair (a split, move or rebalance target), after checking it."""
    from migrator.fleet import topology

    a_name, b_name = master.split("=", 1)[0], passive.split("=", 1)[0]
    hosts = _host_arg(master, b_name), _host_arg(passive, a_name)  # checked before the fleet is asked
    out = topology.add_pair(load_config(), *hosts)
    if as_json:
        print(json.dumps(out, indent=2, default=str))
        return
    print(f"registered {' and '.join(out['registered'])} (empty pair): `migrator rebalance --add-pair {a_name}` "
          "fills it")


@topology_app.command("history")
def topology_history(limit: int = typer.Option(20, "--limit", min=1, metavar="N",
                                               help="Changes shown, newest last."), as_json: JsonOpt = False) -> None:
    """Shard-map changes: who, when, old and new epoch."""
    from migrator.fleet import topology

    rows = topology.history(load_config(), limit)
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    for rec in rows:
        print(f"{rec['when_iso']}  epoch {rec['old_epoch']} -> {rec['new_epoch']}  {rec['who']}  {rec['reason']}")


# -- sandbox ----------------------------------------------------------------------------

#: the sandbox's directory (--dir), the same default for every sandbox command
SandboxDirOpt = Annotated[Path, typer.Option("--dir", metavar="DIR", help="The sandbox's directory.")]
SANDBOX_DIR = Path(".sandbox")


@sandbox_app.command("up")
def sandbox_up(
    pair_count: int = typer.Option(2, "--pair-count", help="Pairs that hold shards.", metavar="N"),
    pairs_old: int | None = old_spelling("--pairs", "--pair-count"),
    spare_pairs: int = typer.Option(1, "--spare-pairs", help="Empty pairs: split targets.", metavar="N"),
    shard_count: int = typer.Option(16, "--shard-count", metavar="N", help="Shards of the seed map."),
    shards_old: int | None = old_spelling("--shards", "--shard-count"),
    rows: int = typer.Option(100, "--rows", help="Seed pins per shard.", metavar="N"),
    directory: SandboxDirOpt = SANDBOX_DIR,
    base_port: int = typer.Option(33100, "--base-port",
                                  help="Ports base+1.. (MariaDB), base+81 (ZK), base+91 (Redis).", metavar="PORT"),
    tls: bool = typer.Option(True, "--tls/--no-tls",
                             help="MariaDB accepts TLS only, with certificates of the sandbox's own CA "
                                  "(--no-tls: plaintext). Fixed when the sandbox is created."),
    gtid_layout: str = typer.Option("per-server", "--gtid-layout",
                                    help="per-server: a GTID domain per server, strict mode on; shared: every "
                                         "server in domain 0, strict mode off (MariaDB's default). Fixed when "
                                         "the sandbox is created.", metavar="LAYOUT"),
    parallel: int = typer.Option(0, "--parallel-replication", min=0,
                                 help="Optimistic parallel applier threads on every pair link (0: one SQL "
                                      "thread). Fixed when the sandbox is created.", metavar="N"),
) -> None:
    """Start the sandbox fleet (a no-op when it already runs)."""
    from migrator.sandbox import Sandbox

    sb = Sandbox(directory)
    pairs = pair_count if pairs_old is None else pairs_old
    shards = shard_count if shards_old is None else shards_old
    sb.up(pairs=pairs, spare_pairs=spare_pairs, shards=shards, rows=rows, base_port=base_port, tls=tls,
          gtid_layout=gtid_layout, parallel_threads=parallel)


@sandbox_app.command("status")
def sandbox_status(directory: SandboxDirOpt = SANDBOX_DIR,
                   as_json: JsonOpt = False) -> None:
    """Each process, port, pid, and replication health in both directions."""
    from migrator.sandbox import Sandbox

    sb = Sandbox(directory)
    if not sb.state:
        raise SandboxMissing(f"no sandbox in {directory}: start one with `migrator sandbox up --dir {directory}`")
    rows = sb.status()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title=f"sandbox {sb.dir}")
    for col in ("process", "kind", "port", "pid", "up", "replication (from partner)"):
        t.add_column(col)
    for r in rows:
        rep = ""
        if "replication" in r:
            x = r["replication"]
            rep = (f"from {x.get('from')}: io={x.get('io')} sql={x.get('sql')} lag={x.get('lag')}"
                   if "io" in x else x.get("error", ""))
            if x.get("error") and "io" in x:
                rep += f" error: {x['error']}"
        name = r["name"] + (" (spare)" if r.get("spare") else "")
        t.add_row(name, r["kind"], str(r["port"]), str(r["pid"] or "-"), "yes" if r["alive"] else "NO", rep)
    console.print(t)
    par = f", {sb.state.parallel_threads} parallel applier threads per link" if sb.state.parallel_threads else ""
    console.print(f"GTID layout: {sb.state.gtid_layout}{par}")
    console.print(f"memory (RSS): {sb.memory_rss_mb():.0f} MB")


@sandbox_app.command("add-pair")
def sandbox_add_pair(directory: SandboxDirOpt = SANDBOX_DIR) -> None:
    """Start one more master-master pair, empty, and register it (a target for rebalance --add-pair)."""
    from migrator.sandbox import Sandbox
    from migrator.sandbox.grow import add_pair

    add_pair(Sandbox(directory))


@sandbox_app.command("down")
def sandbox_down(directory: SandboxDirOpt = SANDBOX_DIR,
                 purge: bool = typer.Option(False, "--purge",
                                            help="Also delete the directory: only one holding a sandbox this tool "
                                                 "made (its state file names it); anything else is refused.")
                 ) -> None:
    """Stop every sandbox process by pid."""
    from migrator.sandbox import Sandbox

    sb = Sandbox(directory)
    if sb.state is None and not (purge and sb.dir.exists()):
        print(f"no sandbox in {sb.dir}: nothing to stop")
        return
    stopped = sb.down(purge=purge)
    print(f"stopped {len(stopped)} processes" + (f": {', '.join(stopped)}" if stopped else "")
          + (f"; {sb.dir} removed" if purge else ""))


def register(module: Any) -> None:
    """Let feature packages add their sub-commands."""
    module.register(app)


#: the command modules, in the order `migrator --help` lists their commands; each is part of the package
PLUGINS = ("migrator.cli.queue", "migrator.cli.migrate", "migrator.cli.playbook", "migrator.cli.ops",
           "migrator.cli.rebalance", "migrator.cli.console")

_loaded: list[str] = []


class PluginMissing(MigratorError):
    """A command module of :data:`PLUGINS` is not installed: the installation is incomplete."""

    component = "cli"
    exit_code = ExitCode.FAILED


def _load_plugins() -> None:
    """Add the feature modules' commands to :data:`app`, once per process. A module of :data:`PLUGINS`
    that is not installed is an error (its commands would be missing), naming it and the way out."""
    import importlib

    if _loaded:
        return
    _loaded.append("done")
    for name in PLUGINS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            raise PluginMissing(f"command module {name} is not installed, so its commands are missing: reinstall "
                                "migrator (`pip install -e .` in the checkout, or `scripts/setup`)") from None
        mod.register(app)


class SandboxMissing(MigratorError):
    component = "sandbox"
    exit_code = ExitCode.USAGE


def _option_arity(params: list[Any]) -> dict[str, bool]:
    """Each option name of ``params`` (a command's parameters) -> whether it takes a value."""
    out: dict[str, bool] = {}
    for p in params:
        if p.param_type_name == "option":
            for name in (*p.opts, *p.secondary_opts):
                out[name] = not p.is_flag and not getattr(p, "count", False) and p.nargs != 0
    return out


def hoist_root_options(argv: list[str], root: Any = None) -> list[str]:
    """``argv`` with the root options (``-c/--config``, ``-v``, ... any option of the app's callback) that stand
    after the subcommand moved in front of it, so ``migrator status ID -c prod.toml`` means what
    ``migrator -c prod.toml status ID`` does. The values of the subcommand's own options are never looked at,
    an option of the subcommand with the same name stays the subcommand's, and nothing after ``--`` moves."""
    root = typer.main.get_command(app) if root is None else root
    root_opts = _option_arity(root.params)
    front: list[str] = []
    rest: list[str] = []
    cmd: Any = root
    own = root_opts
    i, n = 0, len(argv)
    while i < n:
        tok = argv[i]
        if tok == "--":
            rest.extend(argv[i:])
            break
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if tok.startswith("-") and len(tok) > 1:
            takes = "=" not in tok and (own.get(name) if name in own else root_opts.get(name))
            width = 2 if takes else 1
            if cmd is not root and name not in own and name in root_opts:
                front.extend(argv[i:i + width])  # a root option after the subcommand: to the front
            else:
                rest.extend(argv[i:i + width])
            i += width
            continue
        rest.append(tok)
        if hasattr(cmd, "commands"):  # a group: this token names its subcommand
            sub = cmd.commands.get(tok)
            if sub is None:  # not a command name: click reports it, with its usage
                rest.extend(argv[i + 1:])
                break
            cmd, own = sub, _option_arity(sub.params)
        i += 1
    return front + rest


class MetavarArgument(typer.core.TyperArgument):
    """An argument whose help row shows its metavar (``ID``, ``HOST``, ``QUEUE``), not typer's Python type
    after it (``ID <str>``): the metavar says what to give, the type is an implementation detail."""

    def display_type_rich(self, ctx: Any) -> str:  # noqa: ARG002 - typer's signature
        return ""


def command() -> Any:
    """The click command of :data:`app` as ``migrator`` runs it: the plugins' commands added, every argument
    a :class:`MetavarArgument`. The help tests read this tree."""
    _load_plugins()
    root = typer.main.get_command(app)

    def walk(cmd: Any) -> None:
        for p in cmd.params:
            if type(p) is typer.core.TyperArgument:
                p.__class__ = MetavarArgument
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(root)
    return root


def run(argv: list[str] | None = None) -> int:
    """Run the command line; every failure becomes one line on stderr and the exit code returned."""
    try:
        root = command()
        argv = hoist_root_options(list(sys.argv[1:] if argv is None else argv), root)
        rv = root.main(args=argv, standalone_mode=False, prog_name="migrator")
    except typer.TyperException as exc:
        if type(exc).__name__ != "NoArgsIsHelpError":
            return failures.report(exc, sys.stderr)
        print(exc.ctx.get_help())  # type: ignore[attr-defined]  # `migrator`, `migrator queue`: their help
        return int(ExitCode.USAGE)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the one handler: one line and an exit code
        return failures.report(exc, sys.stderr)
    code = rv if isinstance(rv, int) else 0
    if code == ExitCode.INTERRUPTED:  # typer turns Ctrl-C into Exit(130) before it reaches us
        return failures.report(KeyboardInterrupt(), sys.stderr)
    return code


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(argv))


if __name__ == "__main__":
    # the root options' state lives in migrator.cli.helpers, shared by every module however this one was run
    main()
