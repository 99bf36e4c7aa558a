"""RQ failure callback of every migration step: the failure lands in the migration record.

RQ runs it in the worker when a step's job raises (``on_failure``, set where
the step is enqueued: :func:`migrator.ops.steps.on_failure`). The record's
``stopped`` field then says which step gave up, why, and what to do next:
``migrator status`` shows it and ``migrator split --yes`` stops following and
exits non-zero at once. A job killed with its worker never gets here; that is
``migrator resume ID``'s case.
"""

from __future__ import annotations

import logging
from typing import Any

from migrator.engine.migration import MigrationStore
from migrator.errors import ExitCode
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.ops.steps import next_step

log = logging.getLogger(__name__)


def stop_exit_code(exc: BaseException | None) -> int:
    """The exit code of a command that follows the pipeline and sees it stop: the error's own where a
    script would act on it differently (not converging, unreachable, config), else REFUSED."""
    code = getattr(exc, "exit_code", None)
    kept = (ExitCode.NOT_CONVERGING, ExitCode.UNREACHABLE, ExitCode.CONFIG)
    return int(code) if code in kept else int(ExitCode.REFUSED)


def record(job: Any, connection: Any, type: Any, value: BaseException | None, traceback: Any) -> None:  # noqa: A002
    mid = (job.meta or {}).get("migration")
    step = (job.meta or {}).get("step") or "step"
    if not mid:
        return
    reason = getattr(value, "message", None) or f"{getattr(type, '__name__', 'error')}: {value}"
    try:
        cfg = config_mod.load((job.kwargs or {}).get("config_path"))
        with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
            MigrationStore(zk).record_stop(mid, step, str(reason), next_step(step, value, mid),
                                           exit_code=stop_exit_code(value))
    except Exception as exc:  # noqa: BLE001 - the job's own failure is what RQ reports
        log.warning("could not record the failure of %s in migration %s: %s", step, mid, exc)
