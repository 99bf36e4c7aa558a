"""The console's FastAPI app: the static page and its JSON endpoints, behind the queue token.

Every ``/api`` route demands ``Authorization: Bearer <token>`` (the ``[queue] token``
of the secrets file, checked by the queue API's own :func:`~migrator.queue.api.bearer_auth`);
the page itself holds no data and is served to anyone, and asks for the token. Handlers
are plain ``def``: FastAPI runs them in its thread pool (they block on ZooKeeper,
Redis and MySQL). Errors are ``{"error": {"code", "message"}}``: 404 for an unknown
migration or rebalance, 409 for a plan refused (a migration under way, shards frozen),
503 for anything else the fleet answered with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from migrator.engine.migration import MigrationNotFound
from migrator.errors import ExitCode, MigratorError
from migrator.fleet.config import Config
from migrator.ops import watch
from migrator.ops.console import data
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.planner import OBJECTIVES, RebalanceError
from migrator.ops.rebalance.record import RebalanceNotFound
from migrator.queue.api import bearer_auth

STATIC = Path(str(resources.files("migrator.ops.console") / "static"))


class ConsoleError(MigratorError):
    component = "console"
    exit_code = ExitCode.CONFIG


def create_app(config: Config, *, token: str | None, measurements: data.Measurements) -> FastAPI:
    """The console over the fleet of ``config``; ``measurements`` is started and stopped with the app."""
    if not token:
        raise ConsoleError("the console needs a token: set `token` under [queue] in the secrets file "
                           "(or MIGRATOR_QUEUE_TOKEN)")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        measurements.start()
        try:
            yield
        finally:
            measurements.stop()

    app = FastAPI(title="migrator console", version="1", lifespan=lifespan,
                  description="Read-only views of the fleet, its migrations and rebalances.")
    deps = bearer_auth(app, token)

    @app.exception_handler(MigratorError)
    async def _migrator_error(_req: Request, exc: MigratorError) -> JSONResponse:
        status = 404 if isinstance(exc, MigrationNotFound | RebalanceNotFound) else (
            409 if isinstance(exc, RebalanceError) else 503)
        return JSONResponse(status_code=status, content={"error": {"code": type(exc).__name__,
                                                                   "message": str(exc)}})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/api/fleet", dependencies=deps)
    def fleet() -> dict[str, Any]:
        """Pairs with their ranges, shard count, bytes, rows, writes/s; frozen ranges; the map's epoch history."""
        return data.fleet(config, measurements)

    @app.get("/api/status", dependencies=deps)
    def status() -> dict[str, Any]:
        """``migrator status --json``: every migration's phase and the workers."""
        return watch.listing(config)

    @app.get("/api/status/{migration_id}", dependencies=deps)
    def status_of(migration_id: str) -> dict[str, Any]:
        """``migrator status ID --json``: a migration (or a rebalance, for an ``rb-`` id)."""
        if rebalance.is_rebalance_id(migration_id):
            return rebalance.status(config, migration_id)
        return watch.overview(config, migration_id)

    @app.get("/api/rebalances", dependencies=deps)
    def rebalances() -> dict[str, Any]:
        return rebalance.status(config)

    @app.get("/api/rebalances/{rid}/plan", dependencies=deps)
    def rebalance_plan(rid: str) -> dict[str, Any]:
        """A stored rebalance's load per pair before and after, and its moves in order."""
        return data.rebalance_plan(config, rid, measurements)

    @app.get("/api/plan", dependencies=deps)
    def plan(objective: Annotated[str, Query(pattern=f"^({'|'.join(OBJECTIVES)})$")] = "bytes",
             threshold: Annotated[float, Query(gt=0, lt=1)] = 0.10,
             add_pair: Annotated[list[str] | None, Query()] = None,
             drain: Annotated[list[str] | None, Query()] = None) -> dict[str, Any]:
        """``migrator rebalance --dry-run --json [--add-pair P] [--drain P]`` on the cached measurement."""
        return data.plan_preview(config, measurements, objective=objective, threshold=threshold,
                                 add_pairs=add_pair or [], drain=drain or [])

    return app


def serve(config: Config, *, port: int = 8080, bind: str = "127.0.0.1", measure_every_s: float = 30.0,
          window_s: float = 2.0) -> None:
    """Run the console with uvicorn until interrupted."""
    import uvicorn

    from migrator.fleet.config import load_credentials

    token = load_credentials(config).queue_token
    app = create_app(config, token=token, measurements=data.Measurements(config, every_s=measure_every_s,
                                                                         window_s=window_s))
    print(f"serving the console on http://{bind}:{port}/ (give it the queue token of the secrets file)", flush=True)
    uvicorn.run(app, host=bind, port=port, log_level="warning")
